// CuptiCapture: CUPTI Activity API session, buffer hand-off and the parser thread (see header).
#include "cupti/cupti_capture.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "cupti/cupti_check.h"
#include "cupti/cupti_clock.h"
#include "cupti/cupti_detach.h"
#include "moewb/base/units.h"

namespace moewb::profiler {

Result<std::unique_ptr<GpuCapture>> GpuCapture::create(storage::TraceWriter* writer,
                                                       const GpuCaptureOptions& options) {
  return cupti::CuptiCapture::start(writer, options);
}

bool GpuCapture::available() { return true; }

namespace cupti {

namespace {

// Detaching and attaching again costs tens of milliseconds (CUPTI's set-up), so a window is
// followed by a detach only when the next window is at least this many steps away (or there is
// none): `--trace-every 10` on a 5 ms step ran 90% slower when every window re-attached
// (bench/RESULTS.md), while the cost CUPTI leaves attached is per step.
constexpr int64_t kDetachMinGapSteps = 50;

// True when no step in (step, step + kDetachMinGapSteps] is captured.
bool longGapAfter(const CaptureMode& mode, int64_t step) {
  for (int64_t s = step + 1; s <= step + kDetachMinGapSteps; ++s) {
    if (mode.capturesStep(s)) return false;
  }
  return true;
}

// A flush of CUPTI's buffers on the parser thread holds CUPTI's locks for milliseconds, and the
// engine's CUDA calls wait for them: on h200.toml each per-step flush put a 1-7 ms hole in the GPU
// timeline at the next step's start (bench/RESULTS.md, eleventh session). Inside a short window the
// steps' rows are therefore flushed and written once, after the window's last step (as Kineto
// flushes once per active phase); a window longer than this, every-step capture and the flight
// recorder keep the per-step flush (their records would pile up in memory).
constexpr int64_t kFlushAtWindowEndMaxSteps = 16;

// True when `step` is captured inside a window that ends within kFlushAtWindowEndMaxSteps steps:
// the next step is captured and one of the following kFlushAtWindowEndMaxSteps is not.
bool flushAtWindowEnd(const CaptureMode& mode, int64_t step) {
  if (mode.isEveryStep() || !mode.capturesStep(step + 1)) return false;
  for (int64_t s = step + 2; s <= step + kFlushAtWindowEndMaxSteps; ++s) {
    if (!mode.capturesStep(s)) return true;
  }
  return false;
}

// Each GpuTraceKind and the CUPTI activity kind it enables.
constexpr std::pair<GpuTraceKind, CUpti_ActivityKind> kActivityKinds[] = {
    {GpuTraceKind::kKernel, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
    {GpuTraceKind::kMemcpy, CUPTI_ACTIVITY_KIND_MEMCPY},
    {GpuTraceKind::kMemset, CUPTI_ACTIVITY_KIND_MEMSET},
    {GpuTraceKind::kMemory, CUPTI_ACTIVITY_KIND_MEMORY2},
    {GpuTraceKind::kSync, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},
    {GpuTraceKind::kRuntime, CUPTI_ACTIVITY_KIND_RUNTIME},
    {GpuTraceKind::kDriver, CUPTI_ACTIVITY_KIND_DRIVER},
    {GpuTraceKind::kNvtx, CUPTI_ACTIVITY_KIND_MARKER},
};
constexpr size_t kBufferAlignment = 8;
// Firings listed in meta gpu_capture_triggers; later ones are only counted.
constexpr int64_t kMaxLoggedFirings = 100;

std::mutex g_activeMutex;  // serialises start/stop of captures
std::atomic<CuptiCapture*> g_active{nullptr};
std::atomic<bool> g_callbacksRegistered{false};  // CUPTI holds our buffer callbacks

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

// The callback ids of `domain` (below `count`) whose function names isLaunchApiName accepts, or
// all of them.
std::vector<CUpti_CallbackId> apiCallbackIds(CUpti_CallbackDomain domain, uint32_t count,
                                             bool launchesOnly) {
  std::vector<CUpti_CallbackId> ids;
  for (CUpti_CallbackId cbid = 1; cbid < count; ++cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr &&
        (!launchesOnly || isLaunchApiName(name))) {
      ids.push_back(cbid);
    }
  }
  return ids;
}

}  // namespace

CuptiCapture::CuptiCapture(storage::TraceWriter* writer, const GpuCaptureOptions& options)
    : m_writer(writer),
      m_options(options),
      m_flight(options.mode.isFlightRecorder() ? std::make_unique<gpu::FlightRecorderWriter>(writer)
                                               : nullptr),
      m_builder(m_flight ? static_cast<storage::TraceWriter*>(m_flight.get()) : writer,
                options.rank),
      m_triggers(options.mode.triggers),
      m_window(options.mode.flightRecorderSteps) {
  // Capture windows toggle the kinds. Re-enabling the DRIVER kind after a window leaves a cost
  // on every later step that grows with each window (bench/RESULTS.md: about 0.55 ms per small
  // step per window on the H200); enabling the driver calls one callback id at a time does not,
  // but records nothing when first switched on in the middle of a run (a --trace-steps 10:15
  // window lost every cuBLAS launch's attribution, even with the ids switched on and off at the
  // start). Detaching CUPTI after each window removes that cost with everything else, so when
  // every window is followed by a detach (windows at least kDetachMinGapSteps apart) the kind is
  // used; otherwise windowed modes that capture step 0 record driver calls by callback id, the
  // others through the kind.
  const bool windowed = !options.mode.isEveryStep() && !options.mode.isFlightRecorder();
  const bool detachesAfterEveryWindow =
      options.detachBetweenWindows && options.mode.everySteps > kDetachMinGapSteps;
  const bool driverByCallback = options.kinds.has(GpuTraceKind::kDriver) && windowed &&
                                options.mode.capturesStep(0) && !detachesAfterEveryWindow;
  for (const auto& [kind, activity] : kActivityKinds) {
    if (kind == GpuTraceKind::kDriver && driverByCallback) continue;
    if (options.kinds.has(kind)) m_kinds.push_back(activity);
  }
  const bool launchApi = options.kinds.has(GpuTraceKind::kLaunchApi);
  if (launchApi && !options.kinds.has(GpuTraceKind::kRuntime)) {
    m_runtimeCbids = apiCallbackIds(CUPTI_CB_DOMAIN_RUNTIME_API,
                                          CUPTI_RUNTIME_TRACE_CBID_SIZE, /*launchesOnly=*/true);
  }
  if (driverByCallback || (launchApi && !options.kinds.has(GpuTraceKind::kDriver))) {
    m_driverCbids = apiCallbackIds(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE,
                                         /*launchesOnly=*/!driverByCallback);
  }
}

CuptiCapture::~CuptiCapture() {
  (void)stop();
}

Result<std::unique_ptr<GpuCapture>> CuptiCapture::start(storage::TraceWriter* writer,
                                                        const GpuCaptureOptions& options) {
  if (options.bufferBytes < 1024 || options.maxBuffers < 0) {
    return invalidArgument("GPU capture buffers: bufferBytes must be >= 1024 and maxBuffers >= 0");
  }
  if (options.flushIntervalMs < 0) {
    return invalidArgument("GPU capture flushIntervalMs " +
                           std::to_string(options.flushIntervalMs) + "; accepted: >= 0");
  }
  if (options.kinds.empty()) {
    return invalidArgument(std::string("GPU capture kinds: none selected; accepted: any of ") +
                           kGpuTraceKindNames);
  }
  const CaptureMode& mode = options.mode;
  if (mode.everySteps < 1 || mode.firstStep < 0 || mode.endStep <= mode.firstStep ||
      mode.flightRecorderSteps < 0 || mode.isFlightRecorder() != mode.triggers.any()) {
    return invalidArgument("GPU capture mode '" + mode.describe() + "': needs everySteps >= 1, "
                           "0 <= firstStep < endStep, and triggers exactly with a flight recorder");
  }
  std::lock_guard lock(g_activeMutex);
  if (g_active.load() != nullptr) {
    return failedPrecondition("a GPU capture is already running in this process");
  }
  std::unique_ptr<CuptiCapture> capture(new CuptiCapture(writer, options));
  // Without nvtx the engine's ranges stay out of CUPTI altogether (no injection, no cost).
  if (options.kinds.has(GpuTraceKind::kNvtx)) pointNvtxAtCupti();
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
  if (!g_callbacksRegistered.load()) {
    MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityRegisterCallbacks(&bufferRequested, &bufferCompleted));
    g_callbacksRegistered.store(true);
  }
  if (m_options.mode.capturesStep(0)) MOEWB_RETURN_IF_ERROR(setKindsEnabled(true));
  {
    std::lock_guard cuptiLock(m_cuptiMutex);
    MOEWB_RETURN_IF_ERROR(calibrate());
  }
  m_writer->setMeta("gpu_capture_mode", m_options.mode.describe());
  m_writer->setMeta("gpu_trace_kinds", m_options.kinds.describe());
  m_writer->setMeta("cupti_clock_offset_start_ns", std::to_string(m_clock.firstOffsetNs()));
  m_writer->setMeta("cupti_clock_offset_ns", std::to_string(m_clock.lastOffsetNs()));
  return Status::ok();
}

void CuptiCapture::disable() {
  if (Status status = setKindsEnabled(false); !status.isOk()) recordError(status);
}

// Enabling or disabling the kinds is what makes the steps outside a window cost nothing: no
// API callbacks, no kernel records, no buffers.
Status CuptiCapture::setKindsEnabled(bool on) {
  std::lock_guard lock(m_kindsMutex);
  Status first;  // the first failure; the other calls are still made
  auto keep = [&first](Status status) {
    if (first.isOk()) first = std::move(status);
  };
  if (on) {
    std::lock_guard cuptiLock(m_cuptiMutex);
    if (m_detached) MOEWB_RETURN_IF_ERROR(attachAgain());
  }
  if (on != m_cbidsEnabled) {
    const uint8_t flag = on ? 1 : 0;
    for (CUpti_CallbackId cbid : m_runtimeCbids) {
      keep(MOEWB_CUPTI_STATUS(cuptiActivityEnableRuntimeApi(cbid, flag)));
    }
    for (CUpti_CallbackId cbid : m_driverCbids) {
      keep(MOEWB_CUPTI_STATUS(cuptiActivityEnableDriverApi(cbid, flag)));
    }
    m_cbidsEnabled = on;
  }
  if (on) {
    MOEWB_RETURN_IF_ERROR(first);
    for (CUpti_ActivityKind kind : m_kinds) {
      if (std::find(m_enabled.begin(), m_enabled.end(), kind) != m_enabled.end()) continue;
      MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityEnable(kind));
      m_enabled.push_back(kind);
    }
    return Status::ok();
  }
  for (CUpti_ActivityKind kind : m_enabled) keep(MOEWB_CUPTI_STATUS(cuptiActivityDisable(kind)));
  m_enabled.clear();
  return first;
}

Status CuptiCapture::attachAgain() {
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityRegisterCallbacks(&bufferRequested, &bufferCompleted));
  g_callbacksRegistered.store(true);
  m_detached = false;
  return calibrate();
}

// The window's last step is finished (onStep runs after the engine synchronised) and its kinds
// are off: flush and parse what is left here, hand the records to the parser thread, detach.
Status CuptiCapture::detachBetweenWindows() {
  std::lock_guard kindsLock(m_kindsMutex);
  std::lock_guard cuptiLock(m_cuptiMutex);
  if (m_detached || !m_enabled.empty() || m_cbidsEnabled) return Status::ok();
  MOEWB_RETURN_IF_ERROR(flushAndCalibrate(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  std::vector<gpu::Record> records = parseQueued();
  {
    std::lock_guard queueLock(m_queueMutex);
    m_parsedAtDetach.insert(m_parsedAtDetach.end(), std::make_move_iterator(records.begin()),
                            std::make_move_iterator(records.end()));
  }
  MOEWB_RETURN_IF_ERROR(detachCupti());
  g_callbacksRegistered.store(false);  // cuptiFinalize dropped them
  m_detached = true;
  m_detaches.fetch_add(1);
  return Status::ok();
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

void CuptiCapture::setFirstStep(int64_t step) {
  if (m_options.mode.isFlightRecorder()) return;
  if (Status s = setKindsEnabled(m_options.mode.capturesStep(step)); !s.isOk()) recordError(s);
}

void CuptiCapture::onPhase(const engine::PhaseEvent& event) {
  if (m_options.mode.capturesStep(event.step)) m_builder.addPhase(event);
}

void CuptiCapture::onExpertLoad(const engine::ExpertLoadEvent& event) {
  if (m_flight) m_triggers.addExpertLoad(event);
}

void CuptiCapture::onStep(const engine::StepEvent& event) {
  const CaptureMode& mode = m_options.mode;
  std::optional<gpu::TriggerFiring> firing;
  if (m_flight) {
    firing = m_triggers.endStep(event);
  } else if (mode.capturesStep(event.step + 1) != mode.capturesStep(event.step)) {
    // The step's work is finished (the engine synchronises before onStep), so switching here
    // loses no record of this step and misses none of the next.
    const bool next = mode.capturesStep(event.step + 1);
    if (Status s = setKindsEnabled(next); !s.isOk()) recordError(s);
    if (!next && m_options.detachBetweenWindows && longGapAfter(mode, event.step)) {
      if (Status s = detachBetweenWindows(); !s.isOk()) recordError(s);
    }
  }
  if (!mode.capturesStep(event.step)) return;
  m_builder.addStep(event.step, event.startNs, event.endNs);
  m_stepsCaptured.fetch_add(1);
  // Not yet published to the parser thread: the window's last step publishes them all.
  if (!m_flight && flushAtWindowEnd(mode, event.step)) return;
  {
    std::lock_guard lock(m_queueMutex);
    m_lastStep = event.step;
    if (firing) m_firings.push_back(std::move(*firing));
  }
  m_wake.notify_one();
}

// ---- parser thread -----------------------------------------------------------------------

void CuptiCapture::parseCompleted() {
  std::vector<gpu::Record> records;
  {
    std::lock_guard cuptiLock(m_cuptiMutex);
    records = parseQueued();
  }
  std::vector<gpu::Record> atDetach;
  {
    std::lock_guard lock(m_queueMutex);
    atDetach.swap(m_parsedAtDetach);
  }
  if (!atDetach.empty()) m_builder.addRecords(std::move(atDetach));
  if (!records.empty()) m_builder.addRecords(std::move(records));
}

std::vector<gpu::Record> CuptiCapture::parseQueued() {
  std::vector<Completed> completed;
  {
    std::lock_guard lock(m_queueMutex);
    completed.swap(m_completed);
  }
  std::vector<gpu::Record> records;
  for (const Completed& c : completed) {
    if (Status parsed = m_parser.parse(c.buffer, c.validBytes, records); !parsed.isOk()) {
      recordError(parsed);
    }
    std::lock_guard lock(m_bufferMutex);
    m_freeBuffers.push_back(c.buffer);
    --m_buffersInUse;
  }
  return records;
}

Status CuptiCapture::calibrate() { return addCuptiClockPoint(m_clock); }

Status CuptiCapture::flushAndCalibrate(uint32_t flag) {
  if (m_detached) return Status::ok();  // nothing recorded since; a CUPTI call would re-attach
  // The flush calls bufferCompleted on this thread for every finished buffer.
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityFlushAll(flag));
  m_flushes.fetch_add(1);
  size_t dropped = 0;
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
  m_dropped.fetch_add(int64_t(dropped));
  MOEWB_RETURN_IF_ERROR(calibrate());
  m_writer->setMeta("cupti_clock_offset_ns", std::to_string(m_clock.lastOffsetNs()));
  return Status::ok();
}

void CuptiCapture::parserLoop() {
  // With a flush interval, finished steps wait until it has passed since the last flush.
  const auto interval = std::chrono::milliseconds(m_options.flushIntervalMs);
  auto lastFlush = std::chrono::steady_clock::now() - interval;
  while (true) {
    int64_t step = -1;
    bool stopping = false;
    {
      std::unique_lock lock(m_queueMutex);
      const auto due = lastFlush + interval;
      auto ready = [&] {
        const bool stepDue =
            m_lastStep > m_resolvedStep && std::chrono::steady_clock::now() >= due;
        return !m_completed.empty() || stepDue || m_stopping;
      };
      while (!ready()) {
        if (m_lastStep > m_resolvedStep) {
          m_wake.wait_until(lock, due);
        } else {
          m_wake.wait(lock);
        }
      }
      step = std::chrono::steady_clock::now() >= due ? m_lastStep : m_resolvedStep;
      stopping = m_stopping;
    }
    parseCompleted();
    if (stopping) {
      disable();
      {
        std::lock_guard cuptiLock(m_cuptiMutex);
        if (Status s = flushAndCalibrate(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); !s.isOk()) {
          recordError(s);
        }
      }
      parseCompleted();
      m_builder.resolveAll();
      writeFiredSteps(INT64_MAX);
      writeStats();
      return;
    }
    if (step > m_resolvedStep) {
      lastFlush = std::chrono::steady_clock::now();
      {
        std::lock_guard cuptiLock(m_cuptiMutex);
        if (Status s = flushAndCalibrate(0); !s.isOk()) recordError(s);
      }
      parseCompleted();
      m_builder.resolveThrough(step);
      m_resolvedStep = step;
      writeFiredSteps(step);
      writeStats();
    }
  }
}

// Flight recorder: writes the held steps of every firing up to `throughStep` (all resolved), then
// keeps only the last N steps.
void CuptiCapture::writeFiredSteps(int64_t throughStep) {
  if (!m_flight) return;
  // Firings of steps after `throughStep` (pushed since the parser read the step) wait: their
  // rows are not all resolved yet.
  std::vector<gpu::TriggerFiring> firings;
  {
    std::lock_guard lock(m_queueMutex);
    auto later = std::stable_partition(m_firings.begin(), m_firings.end(),
                                       [&](const auto& f) { return f.step <= throughStep; });
    firings.assign(std::make_move_iterator(m_firings.begin()), std::make_move_iterator(later));
    m_firings.erase(m_firings.begin(), later);
  }
  for (const gpu::TriggerFiring& firing : firings) {
    const auto [first, last] = m_window.onFiring(firing.step);
    m_flightStepsWritten += m_flight->writeSteps(first, last);
    if (++m_firingCount <= kMaxLoggedFirings) {
      m_firingLog += (m_firingLog.empty() ? "" : "\n") + firing.reason + " (wrote steps " +
                     std::to_string(first) + ".." + std::to_string(last) + ")";
      m_writer->setMeta("gpu_capture_triggers", m_firingLog);
    }
  }
  m_flight->dropBefore(m_window.oldestKept(throughStep));
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
  const GpuTraceKinds& kinds = m_options.kinds;
  m_writer->addStat({"gpu_trace_kinds", kinds.canAttribute() ? "info" : "warning",
                     int64_t(kinds.bits()),
                     "GPU trace kinds captured: " + kinds.describe() +
                         " (value: their bit mask); " + kinds.attributionNote()});
  stat("cupti_dropped_records", dropped, "data_loss",
       "activity records CUPTI dropped (no buffer space); the GPU rows are incomplete");
  stat("cupti_buffers_refused", refused, "data_loss",
       "CUPTI buffer requests refused because all capture buffers were in use");
  stat("cupti_incomplete_records", m_parser.incompleteRecords(), "warning",
       "activity records without timestamps, skipped");
  stat("gpu_records_unattributed", c.unattributed, "warning",
       "device records (kernels, copies, memsets, memory, syncs) whose API call was not captured "
       "(no step/layer/phase)");
  stat("nvtx_ranges_unmatched", c.unmatchedRanges, "warning",
       "engine NVTX ranges without a matching phase event (layer unknown)");
  stat("phase_events_unmatched", c.unmatchedPhases, "info",
       "engine phase events without a matching NVTX range");
  stat("nvtx_ranges_unclosed", c.unclosedRanges, "warning",
       "NVTX ranges still open when the capture stopped");
  if (!m_options.mode.isEveryStep() && !m_flight) {
    m_writer->addStat({"cupti_detaches", "info", m_detaches.load(),
                       "times CUPTI was detached after a capture window, so the steps between "
                       "windows ran without its hooks"});
  }
  m_writer->addStat({"cupti_flushes", "info", m_flushes.load(),
                     "times CUPTI's buffers were flushed (after each captured step; once at the "
                     "end of a window of at most 16 steps; at capture end); a flush can hold the "
                     "engine's CUDA calls for milliseconds"});
  if (!m_options.mode.isEveryStep()) {
    m_writer->addStat({"gpu_steps_captured", "info", m_stepsCaptured.load(),
                       "steps whose GPU activity CUPTI recorded (" +
                           m_options.mode.describe() + ")"});
  }
  if (m_flight) {
    const std::string first = m_firingLog.substr(0, m_firingLog.find('\n'));
    m_writer->addStat({"flight_recorder_triggers", "info", m_firingCount,
                       m_firingCount == 0 ? "flight-recorder triggers that fired (none)"
                                          : "flight-recorder triggers that fired (first: " +
                                                first + ")"});
    m_writer->addStat({"flight_recorder_triggers_suppressed", "info", m_triggers.suppressed(),
                       "steps whose triggers held during the cooldown after a firing "
                       "(--trigger-cooldown), not written"});
    m_writer->addStat({"flight_recorder_steps_written", "info", m_flightStepsWritten,
                       "steps whose GPU rows the flight recorder wrote"});
    m_writer->addStat({"flight_recorder_rows_discarded", "info", m_flight->rowsDiscarded(),
                       "GPU rows the flight recorder dropped (steps no trigger asked for, work "
                       "outside steps)"});
  }
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
