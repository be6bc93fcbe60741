// CuptiCapture: the GpuCapture of builds with CUPTI (see moewb/profiler/gpu_capture.h).
//
// Threads: CUPTI calls bufferRequested / bufferCompleted from its own threads (or from the thread
// that flushes); they only hand out pooled buffers and queue completed ones (O(1) under a mutex).
// The parser thread parses queued buffers (ActivityParser), feeds the GpuTraceBuilder, and after
// each step flushes CUPTI, recalibrates the clocks and resolves that step. The engine thread
// only copies phase and step events into the builder.
// Kinds: only the CUPTI activity kinds of options.kinds are ever enabled; without nvtx the
// engine's NVTX ranges are not routed to CUPTI at all (unless NVTX_INJECTION64_PATH was set
// before, by the user or an earlier capture in this process).
// Modes: the activity kinds are enabled and disabled on the trainer thread at step ends
// (setKindsEnabled, under a mutex); only captured steps' host events reach the builder. The
// flight recorder puts a FlightRecorderWriter between the builder and the writer; the parser
// thread writes the held steps a firing asks for and drops the rest (gpu/flight_recorder.h).
// Detaching: when a capture window closes (not in every-step or flight-recorder modes) and the
// next window is at least 50 steps away or there is none, the trainer thread flushes and parses
// what is left, then detaches CUPTI (cupti_detach.h) so the steps between windows run without
// CUPTI's hooks; the next window attaches it again. Every CUPTI
// call of the parser thread and of the detach runs under m_cuptiMutex, and nothing calls CUPTI
// while detached (a call would attach it again).
// Buffers: at most options.maxBuffers exist; a request beyond that gets no buffer, so CUPTI drops
// those records (counted: cupti_buffers_refused, cupti_dropped_records).
#pragma once

#include <cupti.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cupti/activity_parser.h"
#include "gpu/clock_calibration.h"
#include "gpu/flight_recorder.h"
#include "gpu/gpu_trace_builder.h"
#include "moewb/profiler/gpu_capture.h"

namespace moewb::profiler::cupti {

class CuptiCapture final : public GpuCapture {
 public:
  // See GpuCapture::create.
  static Result<std::unique_ptr<GpuCapture>> start(storage::TraceWriter* writer,
                                                   const GpuCaptureOptions& options);
  ~CuptiCapture() override;

  void onRunStart(const engine::RunStartEvent& event) override;
  void onPhase(const engine::PhaseEvent& event) override;
  void onExpertLoad(const engine::ExpertLoadEvent& event) override;
  void onCounter(const engine::CounterEvent&) override {}
  void onStep(const engine::StepEvent& event) override;
  void onRunEnd(const engine::RunEndEvent&) override {}
  Status stop() override;
  void setFirstStep(int64_t step) override;

 private:
  struct Completed {
    uint8_t* buffer;
    size_t validBytes;
  };

  CuptiCapture(storage::TraceWriter* writer, const GpuCaptureOptions& options);
  Status enable();
  void disable();
  Status setKindsEnabled(bool on);
  Status attachAgain();           // m_kindsMutex and m_cuptiMutex held
  Status detachBetweenWindows();  // trainer thread, after the window's last step
  static void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords);
  static void CUPTIAPI bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                       size_t size, size_t validSize);
  void requestBuffer(uint8_t** buffer, size_t* size);
  void completeBuffer(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t validSize);

  // Parser thread.
  void parserLoop();
  void parseCompleted();
  std::vector<gpu::Record> parseQueued();    // m_cuptiMutex held
  Status flushAndCalibrate(uint32_t flag);   // m_cuptiMutex held; nothing while detached
  Status calibrate();
  void writeFiredSteps(int64_t throughStep);
  void writeStats();
  void recordError(const Status& status);

  storage::TraceWriter* m_writer;
  GpuCaptureOptions m_options;
  std::mutex m_cuptiMutex;  // held around every CUPTI call but the kinds' (see Detaching)
  bool m_detached = false;  // guarded by m_cuptiMutex
  std::atomic<int64_t> m_detaches{0};
  std::atomic<int64_t> m_flushes{0};  // cuptiActivityFlushAll calls (stats: cupti_flushes)
  gpu::ClockCalibration m_clock;  // under m_cuptiMutex (and create before the parser starts)
  ActivityParser m_parser{&m_clock};  // under m_cuptiMutex
  std::unique_ptr<gpu::FlightRecorderWriter> m_flight;  // flight recorder only; before m_builder
  gpu::GpuTraceBuilder m_builder;
  std::vector<CUpti_ActivityKind> m_kinds;  // of options.kinds; fixed at construction
  std::mutex m_kindsMutex;  // guards m_enabled and m_cbidsEnabled
  std::vector<CUpti_ActivityKind> m_enabled;
  // Callback ids recorded one by one: launch_api without runtime / driver (isLaunchApiName), and
  // every driver call when a windowed capture from step 0 records the driver kind (see the
  // constructor).
  std::vector<CUpti_CallbackId> m_runtimeCbids;
  std::vector<CUpti_CallbackId> m_driverCbids;
  bool m_cbidsEnabled = false;

  gpu::FlightTriggers m_triggers;  // trainer thread
  gpu::FlightWindow m_window;      // parser thread
  std::atomic<int64_t> m_stepsCaptured{0};
  int64_t m_firingCount = 0;       // parser thread
  int64_t m_flightStepsWritten = 0;
  std::string m_firingLog;         // parser thread: the firings, one per line (capped)

  std::mutex m_bufferMutex;  // guards the pool
  std::vector<uint8_t*> m_freeBuffers;
  int32_t m_buffersInUse = 0;
  std::atomic<int64_t> m_buffersRefused{0};
  std::atomic<int64_t> m_dropped{0};

  std::mutex m_queueMutex;  // guards the fields up to m_stopping
  std::condition_variable m_wake;
  std::vector<Completed> m_completed;
  std::vector<gpu::Record> m_parsedAtDetach;  // for the parser thread's builder
  std::vector<gpu::TriggerFiring> m_firings;  // fired, not yet written
  int64_t m_lastStep = -1;
  bool m_stopping = false;

  int64_t m_resolvedStep = -1;  // parser thread
  std::thread m_thread;
  std::mutex m_errorMutex;
  Status m_error;
  bool m_stopped = false;
};

}  // namespace moewb::profiler::cupti
