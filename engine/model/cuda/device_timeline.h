// DeviceTimeline: the phases of one CUDA step timed on the GPU, not on the host. Kernels are
// queued asynchronously, so a host clock around a phase only measures its launches; instead each
// DevicePhase records a CUDA event pair on the stream, and after the step's final
// synchronisation flush() converts the event times into the host steady-clock domain (anchored by
// an event recorded right after a synchronisation at begin()) and reports them through the
// PhaseRecorder. Events arrive in the order their phases closed, as ScopedPhase's do.
// Every phase is also an NVTX range named like its slice ("experts.fwd"), tracing or not; the
// names come from a table built once, so an untimed phase costs two NVTX calls and nothing else.
// Costs while a recorder is attached: per step one stream synchronisation in begin() (the stream
// is normally idle by then: the previous step ended with one) and one anchor event; per phase
// two cudaEventRecord (about a microsecond each) and, in flush(), two cudaEventElapsedTime
// (host-side queries, no synchronisation). Events come from a pool that grows to the largest
// step and is reused; none are created in steady state. Not thread-safe: one per stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/cuda/nvtx_range.h"
#include "moewb/base/status.h"
#include "runtime/phase_recorder.h"

namespace moewb::engine::cuda {

class DeviceTimeline {
 public:
  DeviceTimeline() = default;
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // Starts a step on `stream`: waits for the stream, anchors the clocks. `recorder` may be null
  // (then phases are NVTX ranges only). Errors: kInternal (CUDA).
  Status begin(cudaStream_t stream, PhaseRecorder* recorder);
  // After the stream has been synchronised: reports every closed phase with its GPU times.
  // Errors: kInternal (CUDA).
  Status flush();
  bool timing() const { return m_recorder != nullptr && m_recorder->enabled(); }

  // Used by DevicePhase: an event recorded on the stream now (from the pool), or null.
  cudaEvent_t mark();
  void close(Phase phase, Pass pass, int32_t layer, cudaEvent_t start, cudaEvent_t end);

 private:
  struct Closed {
    Phase phase;
    Pass pass;
    int32_t layer;
    cudaEvent_t start;
    cudaEvent_t end;
  };
  cudaStream_t m_stream = nullptr;
  PhaseRecorder* m_recorder = nullptr;
  int64_t m_anchorNs = 0;
  cudaEvent_t m_anchor = nullptr;
  std::vector<cudaEvent_t> m_pool;  // created events; m_used of them belong to this step
  size_t m_used = 0;
  std::vector<Closed> m_closed;
};

// phaseSliceName(phase, pass) from a table built at first use (thread-safe); the pointer stays
// valid for the life of the process.
const char* cachedPhaseSliceName(Phase phase, Pass pass);

// A traced phase of the CUDA backend: an NVTX range plus, while the timeline times, a GPU-timed
// PhaseEvent. `timeline` may be null (NVTX only).
class DevicePhase {
 public:
  DevicePhase(DeviceTimeline* timeline, Phase phase, Pass pass, int32_t layer)
      : m_timeline(timeline), m_phase(phase), m_pass(pass), m_layer(layer),
        m_nvtx(cachedPhaseSliceName(phase, pass)),
        m_start(timeline != nullptr ? timeline->mark() : nullptr) {}
  ~DevicePhase() {
    if (m_start != nullptr) m_timeline->close(m_phase, m_pass, m_layer, m_start, m_timeline->mark());
  }
  DevicePhase(const DevicePhase&) = delete;
  DevicePhase& operator=(const DevicePhase&) = delete;

 private:
  DeviceTimeline* m_timeline;
  Phase m_phase;
  Pass m_pass;
  int32_t m_layer;
  NvtxRange m_nvtx;
  cudaEvent_t m_start;
};

}  // namespace moewb::engine::cuda
