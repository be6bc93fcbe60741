// DeviceMemoryReporter: turns a CudaContext allocator's allocations and frees into the trace's
// device-memory events (EventSink::onMemory), for the CUDA backend and the GPU ranks alike.
// start() reports one baseline event per category with the bytes already in use (weights, grads
// and optimizer state allocated before training) and switches the allocator to recording (one
// clock read and one append per event, no call); emit(step) hands the recorded events to the
// sink in order, tagged with the step they happened in, once per step after its last launch.
// Costs: one sink call per event at emit time; no allocation in steady state.
// Not thread-safe: the rank's thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "moewb/engine/event_sink.h"

namespace moewb::engine::cuda {

class DeviceMemoryReporter {
 public:
  DeviceMemoryReporter() = default;
  ~DeviceMemoryReporter() { stop(); }
  DeviceMemoryReporter(const DeviceMemoryReporter&) = delete;
  DeviceMemoryReporter& operator=(const DeviceMemoryReporter&) = delete;

  // Starts reporting `context`'s events to `sink` (not null) as `rank`'s, baseline tagged `step`.
  // Both must outlive the reporter or stop().
  void start(CudaContext& context, EventSink* sink, int32_t rank, int64_t step);
  // Hands the events recorded since the last call to the sink, tagged `step`. No-op until start.
  void emit(int64_t step);
  // Stops recording (the events not yet emitted are dropped).
  void stop();
  bool started() const { return m_context != nullptr; }

 private:
  CudaContext* m_context = nullptr;
  EventSink* m_sink = nullptr;
  int32_t m_rank = 0;
  std::vector<DeviceMemoryEvent> m_events;  // emit's batch (storage reused)
};

}  // namespace moewb::engine::cuda
