// CuptiCapture: CUPTI Activity API session, buffer hand-off and the parser thread (see header).
#include "cupti/cupti_capture.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "cupti/cupti_check.h"
#include "moewb/base/units.h"

namespace moewb::profiler {

Result<std::unique_ptr<GpuCapture>> GpuCapture::create(storage::TraceWriter* writer,
                                                       const GpuCaptureOptions& options) {
  return cupti::CuptiCapture::start(writer, options);
}

bool GpuCapture::available() { return true; }

namespace cupti {

namespace {

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_MEMORY2,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_MARKER,
};
constexpr size_t kBufferAlignment = 8;

std::mutex g_activeMutex;  // serialises start/stop of captures
std::atomic<CuptiCapture*> g_active{nullptr};
bool g_callbacksRegistered = false;  // guarded by g_activeMutex

// NVTX (header-only nvtx3) loads the library named by NVTX_INJECTION64_PATH at its first call;
// pointing it at the libcupti already loaded routes the engine's ranges to CUPTI (MARKER records).
void pointNvtxAtCupti() {
  if (std::getenv("NVTX_INJECTION64_PATH") != nullptr) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) != 0 &&
      info.dli_fname != nullptr) {
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
  }
}

}  // namespace

CuptiCapture::CuptiCapture(storage::TraceWriter* writer, const GpuCaptureOptions& options)
    : m_writer(writer), m_options(options), m_builder(writer, options.rank) {}

CuptiCapture::~CuptiCapture() {
  (void)stop();
}

Result<std::unique_ptr<GpuCapture>> CuptiCapture::start(storage::TraceWriter* writer,
                                                        const GpuCaptureOptions& options) {
  if (options.bufferBytes < 1024 || options.maxBuffers < 0) {
    return invalidArgument("GPU capture buffers: bufferBytes must be >= 1024 and maxBuffers >= 0");
  }
  std::lock_guard lock(g_activeMutex);
  if (g_active.load() != nullptr) {
    return failedPrecondition("a GPU capture is already running in this process");
  }
  std::unique_ptr<CuptiCapture> capture(new CuptiCapture(writer, options));
  pointNvtxAtCupti();
  g_active.store(capture.get());
  if (Status enabled = capture->enable(); !enabled.isOk()) {
    capture->disable();
    g_active.store(nullptr);
    capture->m_stopped = true;
    return enabled;
  }
  capture->m_thread = std::thread([c = capture.get()] { c->parserLoop(); });
  return std::unique_ptr<GpuCapture>(std::move(capture));
}

Status CuptiCapture::enable() {
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  if (!g_callbacksRegistered) {
    MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityRegisterCallbacks(&bufferRequested, &bufferCompleted));
    g_callbacksRegistered = true;
  }
  for (CUpti_ActivityKind kind : kKinds) {
    MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityEnable(kind));
    m_enabled.push_back(kind);
  }
  MOEWB_RETURN_IF_ERROR(calibrate());
  m_writer->setMeta("cupti_clock_offset_start_ns", std::to_string(m_clock.firstOffsetNs()));
  m_writer->setMeta("cupti_clock_offset_ns", std::to_string(m_clock.lastOffsetNs()));
  return Status::ok();
}

void CuptiCapture::disable() {
  for (CUpti_ActivityKind kind : m_enabled) {
    Status status = MOEWB_CUPTI_STATUS(cuptiActivityDisable(kind));
    if (!status.isOk()) recordError(status);
  }
  m_enabled.clear();
}

// ---- CUPTI callbacks ---------------------------------------------------------------------

void CUPTIAPI CuptiCapture::bufferRequested(uint8_t** buffer, size_t* size,
                                            size_t* maxNumRecords) {
  *maxNumRecords = 0;
  CuptiCapture* capture = g_active.load();
  if (capture == nullptr) {
    *buffer = nullptr;
    *size = 0;
    return;
  }
  capture->requestBuffer(buffer, size);
}

void CUPTIAPI CuptiCapture::bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                            size_t, size_t validSize) {
  CuptiCapture* capture = g_active.load();
  if (capture == nullptr) {
    std::free(buffer);  // the capture is gone; its records cannot be placed any more
    return;
  }
  capture->completeBuffer(context, streamId, buffer, validSize);
}

void CuptiCapture::requestBuffer(uint8_t** buffer, size_t* size) {
  std::lock_guard lock(m_bufferMutex);
  if (m_buffersInUse >= m_options.maxBuffers) {
    m_buffersRefused.fetch_add(1);
    *buffer = nullptr;
    *size = 0;
    return;
  }
  uint8_t* b = nullptr;
  if (!m_freeBuffers.empty()) {
    b = m_freeBuffers.back();
    m_freeBuffers.pop_back();
  } else {
    b = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, size_t(m_options.bufferBytes)));
  }
  if (b == nullptr) {
    m_buffersRefused.fetch_add(1);
    *size = 0;
  } else {
    ++m_buffersInUse;
    *size = size_t(m_options.bufferBytes);
  }
  *buffer = b;
}

void CuptiCapture::completeBuffer(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                  size_t validSize) {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, streamId, &dropped) == CUPTI_SUCCESS) {
    m_dropped.fetch_add(int64_t(dropped));
  }
  if (buffer == nullptr) return;
  {
    std::lock_guard lock(m_queueMutex);
    m_completed.push_back({buffer, validSize});
  }
  m_wake.notify_one();
}

// ---- engine thread -----------------------------------------------------------------------

void CuptiCapture::onRunStart(const engine::RunStartEvent&) {
  m_builder.setTrainerThread(uint32_t(syscall(SYS_gettid)));
}

void CuptiCapture::onPhase(const engine::PhaseEvent& event) {
  m_builder.addPhase(event);
}

void CuptiCapture::onStep(const engine::StepEvent& event) {
  m_builder.addStep(event.step, event.startNs, event.endNs);
  {
    std::lock_guard lock(m_queueMutex);
    m_lastStep = event.step;
  }
  m_wake.notify_one();
}

// ---- parser thread -----------------------------------------------------------------------

void CuptiCapture::parseCompleted() {
  std::vector<Completed> completed;
  {
    std::lock_guard lock(m_queueMutex);
    completed.swap(m_completed);
  }
  for (const Completed& c : completed) {
    std::vector<gpu::Record> records;
    if (Status parsed = m_parser.parse(c.buffer, c.validBytes, records); !parsed.isOk()) {
      recordError(parsed);
    }
    m_builder.addRecords(std::move(records));
    std::lock_guard lock(m_bufferMutex);
    m_freeBuffers.push_back(c.buffer);
    --m_buffersInUse;
  }
}

Status CuptiCapture::calibrate() {
  // The tightest of a few steady-clock brackets around one CUPTI timestamp.
  int64_t bestWidth = INT64_MAX, bestCupti = 0, bestSteady = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t before = steadyNowNs();
    uint64_t cuptiNs = 0;
    MOEWB_CUPTI_RETURN_IF_ERROR(cuptiGetTimestamp(&cuptiNs));
    const int64_t after = steadyNowNs();
    if (after - before < bestWidth) {
      bestWidth = after - before;
      bestCupti = int64_t(cuptiNs);
      bestSteady = before + (after - before) / 2;
    }
  }
  m_clock.add(bestCupti, bestSteady);
  return Status::ok();
}

Status CuptiCapture::flushAndCalibrate(uint32_t flag) {
  // The flush calls bufferCompleted on this thread for every finished buffer.
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityFlushAll(flag));
  size_t dropped = 0;
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
  m_dropped.fetch_add(int64_t(dropped));
  MOEWB_RETURN_IF_ERROR(calibrate());
  m_writer->setMeta("cupti_clock_offset_ns", std::to_string(m_clock.lastOffsetNs()));
  return Status::ok();
}

void CuptiCapture::parserLoop() {
  while (true) {
    int64_t step = -1;
    bool stopping = false;
    {
      std::unique_lock lock(m_queueMutex);
      m_wake.wait(lock, [&] {
        return !m_completed.empty() || m_lastStep > m_resolvedStep || m_stopping;
      });
      step = m_lastStep;
      stopping = m_stopping;
    }
    parseCompleted();
    if (stopping) {
      disable();
      if (Status s = flushAndCalibrate(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); !s.isOk()) recordError(s);
      parseCompleted();
      m_builder.resolveAll();
      writeStats();
      return;
    }
    if (step > m_resolvedStep) {
      if (Status s = flushAndCalibrate(0); !s.isOk()) recordError(s);
      parseCompleted();
      m_builder.resolveThrough(step);
      m_resolvedStep = step;
      writeStats();
    }
  }
}

void CuptiCapture::writeStats() {
  const gpu::BuilderCounters& c = m_builder.counters();
  const int64_t dropped = m_dropped.load();
  const int64_t refused = m_buffersRefused.load();
  auto stat = [&](const char* name, int64_t value, const char* badSeverity,
                  const char* description) {
    m_writer->addStat({name, value > 0 ? badSeverity : "info", value, description});
  };
  stat("cupti_records", c.records, "info", "GPU activity records received from CUPTI");
  stat("cupti_dropped_records", dropped, "data_loss",
       "activity records CUPTI dropped (no buffer space); the GPU rows are incomplete");
  stat("cupti_buffers_refused", refused, "data_loss",
       "CUPTI buffer requests refused because all capture buffers were in use");
  stat("cupti_incomplete_records", m_parser.incompleteRecords(), "warning",
       "activity records without timestamps, skipped");
  stat("gpu_records_unattributed", c.unattributed, "warning",
       "kernels/copies/memsets whose launching API call was not captured (no step/layer/phase)");
  stat("nvtx_ranges_unmatched", c.unmatchedRanges, "warning",
       "engine NVTX ranges without a matching phase event (layer unknown)");
  stat("phase_events_unmatched", c.unmatchedPhases, "info",
       "engine phase events without a matching NVTX range");
  stat("nvtx_ranges_unclosed", c.unclosedRanges, "warning",
       "NVTX ranges still open when the capture stopped");
}

void CuptiCapture::recordError(const Status& status) {
  std::lock_guard lock(m_errorMutex);
  if (m_error.isOk()) m_error = status;
}

Status CuptiCapture::stop() {
  std::lock_guard lock(g_activeMutex);
  if (!m_stopped) {
    m_stopped = true;
    {
      std::lock_guard queueLock(m_queueMutex);
      m_stopping = true;
    }
    m_wake.notify_one();
    if (m_thread.joinable()) m_thread.join();
    g_active.store(nullptr);
    std::lock_guard bufferLock(m_bufferMutex);
    for (uint8_t* b : m_freeBuffers) std::free(b);
    m_freeBuffers.clear();
  }
  std::lock_guard errorLock(m_errorMutex);
  return m_error;
}

}  // namespace cupti
}  // namespace moewb::profiler
