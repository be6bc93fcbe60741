// GpuCapture: in-process capture of a CUDA run's GPU activity (CUPTI Activity API) into the trace:
// kernels, memcpy, memset, device memory, synchronisation, runtime and driver API calls and NVTX
// ranges, each kernel / copy / memset attributed to the step, layer and phase it ran under (see
// profiler/src/gpu/gpu_trace_builder.h). options.kinds narrows what is recorded (like nsys
// --trace; gpu_trace_kinds.h says which kinds attribution needs); the kinds are kept in meta
// (gpu_trace_kinds) and, with what they allow to attribute, in stats (gpu_trace_kinds).
//
// Lifecycle: create() before the engine makes its first CUDA or NVTX call (it points
// NVTX_INJECTION64_PATH at libcupti so the engine's NVTX ranges reach CUPTI), add the capture to
// the engine's sinks (it only copies phase and step events), train, then stop() before the
// writer is closed. CUPTI hands its buffers to a parser thread; nothing is parsed on the engine's
// thread. After each step (or, with options.flushIntervalMs, after the first step that ends that
// long after the last flush) the parser thread flushes CUPTI and writes the finished steps' rows;
// inside a step window of at most 16 steps only after its last step (a flush holds the engine's
// CUDA calls for milliseconds; stats: cupti_flushes).
// Dropped CUPTI records and attribution problems are counted in the stats table; the
// CUPTI-to-steady clock offset is kept in meta (cupti_clock_offset_ns,
// cupti_clock_offset_start_ns).
// Capture modes (options.mode, capture_mode.h): outside the steps a mode captures, the CUPTI
// activity kinds are disabled (enabled again at the end of the step before the next captured
// one), so CUPTI records nothing there; the flight recorder records every step and writes only
// the steps its triggers ask for. The mode is kept in meta (gpu_capture_mode), the triggers that
// fired in meta (gpu_capture_triggers) and stats (flight_recorder_triggers).
// Only one capture may be active in a process at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "moewb/base/status.h"
#include "moewb/engine/event_sink.h"
#include "moewb/profiler/capture_mode.h"
#include "moewb/profiler/gpu_trace_kinds.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler {

struct GpuCaptureOptions {
  int64_t bufferBytes = 8 << 20;  // bytes per CUPTI activity buffer
  int32_t maxBuffers = 64;        // buffers held by CUPTI or waiting to be parsed; when all are in
                                  // use CUPTI drops records (counted in stats)
  int32_t rank = 0;               // tags the GPU tracks
  CaptureMode mode;               // which steps are captured (default: every step)
  GpuTraceKinds kinds;            // which activity kinds are recorded (default: all); must not
                                  // be empty (create() says kInvalidArgument)
  int32_t flushIntervalMs = 0;    // 0: flush CUPTI and write a step's GPU rows after every step;
                                  // > 0: at most every that many ms (fewer flushes; rows of
                                  // several steps at once, later)
  bool detachBetweenWindows = true;  // windowed modes: detach CUPTI after a window followed by
                                     // >= 50 uncaptured steps (or the last), so those steps run
                                     // untraced (re-attached at the next window); false keeps
                                     // it attached with kinds off
};

class GpuCapture : public engine::EventSink {
 public:
  // Starts capturing. Errors: kUnimplemented in a build without CUPTI (MOEWB_CUDA=OFF);
  // kFailedPrecondition when another capture is active; kInternal naming the failed CUPTI call.
  // `writer` must outlive the capture.
  static Result<std::unique_ptr<GpuCapture>> create(storage::TraceWriter* writer,
                                                    const GpuCaptureOptions& options);
  // True when this build can capture (CUPTI was found at build time).
  static bool available();
  ~GpuCapture() override = default;

  // The step the trainer starts at (0, or a resumed checkpoint's step); call before training.
  // A mode that does not capture that step disables CUPTI until its first captured step. Without
  // the call the capture assumes step 0. Trainer thread.
  virtual void setFirstStep(int64_t step) { (void)step; }

  // Flushes CUPTI, writes every remaining row, the stats and meta rows, and disables the
  // capture. Idempotent; the first error of the capture is returned. Call from the thread that
  // owns the run, before the writer is closed.
  virtual Status stop() = 0;
};

}  // namespace moewb::profiler
