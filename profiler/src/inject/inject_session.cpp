// InjectSession: CUPTI in a foreign program, periodic and at-exit writes (see the header).
#include "inject/inject_session.h"

#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cupti/activity_parser.h"
#include "cupti/cupti_check.h"
#include "cupti/cupti_clock.h"
#include "gpu/clock_calibration.h"
#include "gpu/gpu_trace_builder.h"
#include "moewb/base/units.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler::inject {

namespace {

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_MEMORY2,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_MARKER,
};
constexpr size_t kBufferAlignment = 8;

const char* envOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : fallback;
}

class Session {
 public:
  Session(const InjectSettings& settings, std::unique_ptr<storage::TraceWriter> writer)
      : m_settings(settings), m_writer(std::move(writer)), m_builder(m_writer.get(), 0) {
    m_builder.setForeignProgram();
  }

  Status start();
  void stopAtExit();
  // After a failed start: closes and deletes the trace file.
  void discard() {
    (void)m_writer->close();
    for (const char* suffix : {"", "-wal", "-shm"})
      std::remove((m_settings.outPath + suffix).c_str());
  }

  static void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords);
  static void CUPTIAPI bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                       size_t size, size_t validSize);

 private:
  struct Completed {
    uint8_t* buffer;
    size_t validBytes;
  };

  void timerLoop();
  // Flushes CUPTI, parses what it handed over and writes what started before `cutoffNs`.
  void drain(uint32_t flushFlag, int64_t cutoffNs, bool all);
  Status calibrate();
  void writeStats();
  void recordError(const Status& status);

  InjectSettings m_settings;
  std::unique_ptr<storage::TraceWriter> m_writer;
  RunId m_run;
  gpu::ClockCalibration m_clock;  // written by the draining thread only
  cupti::ActivityParser m_parser{&m_clock};
  gpu::GpuTraceBuilder m_builder;

  std::mutex m_queueMutex;  // guards m_completed
  std::vector<Completed> m_completed;
  std::atomic<int64_t> m_dropped{0};
  std::atomic<int64_t> m_refused{0};

  std::mutex m_drainMutex;  // one drain at a time (timer thread or exit)
  std::mutex m_timerMutex;
  std::condition_variable m_timerWake;
  bool m_stopping = false;  // guarded by m_timerMutex
  std::thread m_timer;
  Status m_error;  // guarded by m_drainMutex
};

Session* g_session = nullptr;  // set once; lives until the process ends

void CUPTIAPI Session::bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *maxNumRecords = 0;
  *size = 0;
  *buffer = nullptr;
  if (g_session == nullptr) return;
  const size_t bytes = size_t(g_session->m_settings.bufferBytes);
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, bytes));
  if (*buffer == nullptr) {
    g_session->m_refused.fetch_add(1);
    return;
  }
  *size = bytes;
}

void CUPTIAPI Session::bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                       size_t, size_t validSize) {
  if (g_session == nullptr) {
    std::free(buffer);
    return;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, streamId, &dropped) == CUPTI_SUCCESS) {
    g_session->m_dropped.fetch_add(int64_t(dropped));
  }
  if (buffer == nullptr) return;
  std::lock_guard lock(g_session->m_queueMutex);
  g_session->m_completed.push_back({buffer, validSize});
}

Status Session::calibrate() { return cupti::addCuptiClockPoint(m_clock); }

Status Session::start() {
  storage::RunRow run;
  run.name = m_settings.runName;
  std::string quoted;  // a TOML basic string
  for (char c : m_settings.command) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c == '\n' ? ' ' : c;
  }
  run.configToml = "# moewb capture of an external program\ncommand = \"" + quoted + "\"\n";
  run.backend = "external";
  run.worldSize = 1;
  run.startNs = steadyNowNs();
  run.startUnixNs = unixNowNs();
  run.status = "running";
  m_run = m_writer->addRun(run);
  m_writer->setMeta("capture", "moewb capture (CUPTI injection)");
  m_writer->setMeta("capture_pid", std::to_string(getpid()));
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityRegisterCallbacks(&bufferRequested, &bufferCompleted));
  for (CUpti_ActivityKind kind : kKinds) MOEWB_CUPTI_RETURN_IF_ERROR(cuptiActivityEnable(kind));
  MOEWB_RETURN_IF_ERROR(calibrate());
  m_writer->setMeta("cupti_clock_offset_start_ns", std::to_string(m_clock.firstOffsetNs()));
  MOEWB_RETURN_IF_ERROR(m_writer->flush());
  m_timer = std::thread([this] { timerLoop(); });
  return Status::ok();
}

void Session::recordError(const Status& status) {
  if (m_error.isOk() && !status.isOk()) m_error = status;
}

void Session::drain(uint32_t flushFlag, int64_t cutoffNs, bool all) {
  std::lock_guard drainLock(m_drainMutex);
  // The flush calls bufferCompleted on this thread for every finished buffer.
  recordError(MOEWB_CUPTI_STATUS(cuptiActivityFlushAll(flushFlag)));
  recordError(calibrate());
  std::vector<Completed> completed;
  {
    std::lock_guard lock(m_queueMutex);
    completed.swap(m_completed);
  }
  for (const Completed& c : completed) {
    std::vector<gpu::Record> records;
    recordError(m_parser.parse(c.buffer, c.validBytes, records));
    m_builder.addRecords(std::move(records));
    std::free(c.buffer);
  }
  if (all) {
    m_builder.resolveAll();
  } else {
    m_builder.resolveBefore(cutoffNs);
  }
  m_writer->setMeta("cupti_clock_offset_ns", std::to_string(m_clock.lastOffsetNs()));
  writeStats();
  recordError(m_writer->flush());
}

void Session::timerLoop() {
  const auto period = std::chrono::milliseconds(m_settings.flushPeriodMs);
  std::unique_lock lock(m_timerMutex);
  while (!m_timerWake.wait_for(lock, period, [this] { return m_stopping; })) {
    lock.unlock();
    // Records of calls older than one period have reached CUPTI's buffers by now.
    drain(0, steadyNowNs() - m_settings.flushPeriodMs * 1'000'000, false);
    lock.lock();
  }
}

void Session::stopAtExit() {
  {
    std::lock_guard lock(m_timerMutex);
    m_stopping = true;
  }
  m_timerWake.notify_all();
  if (m_timer.joinable()) m_timer.join();
  for (CUpti_ActivityKind kind : kKinds) (void)cuptiActivityDisable(kind);
  drain(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 0, true);
  std::lock_guard drainLock(m_drainMutex);
  m_writer->finishRun(m_run, m_error.isOk() ? "completed" : "failed",
                      m_error.isOk() ? "" : m_error.message(), steadyNowNs());
  const Status closed = m_writer->close();
  if (!m_error.isOk() || !closed.isOk()) {
    std::fprintf(stderr, "moewb capture: %s\n",
                 (m_error.isOk() ? closed : m_error).toString().c_str());
  }
}

void Session::writeStats() {
  const gpu::BuilderCounters& c = m_builder.counters();
  auto stat = [&](const char* name, int64_t value, const char* badSeverity,
                  const char* description) {
    m_writer->addStat({name, value > 0 ? badSeverity : "info", value, description});
  };
  stat("cupti_records", c.records, "info", "GPU activity records received from CUPTI");
  stat("cupti_dropped_records", m_dropped.load(), "data_loss",
       "activity records CUPTI dropped (no buffer space); the GPU rows are incomplete");
  stat("cupti_buffers_refused", m_refused.load(), "data_loss",
       "CUPTI buffer requests refused (out of memory)");
  stat("cupti_incomplete_records", m_parser.incompleteRecords(), "warning",
       "activity records without timestamps, skipped");
  stat("gpu_records_unattributed", c.unattributed, "warning",
       "device records (kernels, copies, memsets, memory, syncs) whose API call was not captured "
       "(no phase)");
  stat("nvtx_ranges_unclosed", c.unclosedRanges, "warning",
       "NVTX ranges still open when the program exited");
}

pid_t g_sessionPid = 0;  // a child forked after cuInit inherits the session but must not write

void stopSessionAtExit() {
  if (g_session != nullptr && getpid() == g_sessionPid) g_session->stopAtExit();
}

Result<int64_t> positiveNumber(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || text[0] == '\0') return fallback;
  char* rest = nullptr;
  const long long value = std::strtoll(text, &rest, 10);
  if (*rest != '\0' || value <= 0) {
    return invalidArgument(std::string(name) + "='" + text + "' is not a positive integer");
  }
  return int64_t(value);
}

}  // namespace

Result<InjectSettings> settingsFromEnvironment() {
  const char* pid = std::getenv("MOEWB_CAPTURE_PID");
  if (pid == nullptr || std::to_string(getpid()) != pid) {
    return failedPrecondition("not the process moewb capture started (MOEWB_CAPTURE_PID)");
  }
  InjectSettings settings;
  settings.outPath = envOr("MOEWB_CAPTURE_OUT", "");
  if (settings.outPath.empty()) return failedPrecondition("MOEWB_CAPTURE_OUT is not set");
  settings.runName = envOr("MOEWB_CAPTURE_NAME", "external program");
  settings.command = envOr("MOEWB_CAPTURE_COMMAND", "");
  MOEWB_ASSIGN_OR_RETURN(settings.flushPeriodMs, positiveNumber("MOEWB_CAPTURE_FLUSH_MS", 1000));
  MOEWB_ASSIGN_OR_RETURN(int64_t bufferMib, positiveNumber("MOEWB_CAPTURE_BUFFER_MIB", 8));
  settings.bufferBytes = bufferMib << 20;
  return settings;
}

namespace {

// moewb capture pointed NVTX at the libcupti it found; when this process loaded another copy
// (PyTorch brings its own libcupti, and its SONAME wins), NVTX must reach that copy, the one our
// activity kinds are enabled in. Effective when the program has not made an NVTX call yet.
void pointNvtxAtLoadedCupti() {
  const char* automatic = std::getenv("MOEWB_CAPTURE_NVTX_AUTO");
  if (automatic == nullptr || std::string(automatic) != "1") return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) != 0 &&
      info.dli_fname != nullptr) {
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 1);
  }
}

}  // namespace

Status startSession(const InjectSettings& settings) {
  static std::mutex startMutex;
  std::lock_guard lock(startMutex);
  if (g_session != nullptr) return Status::ok();
  storage::WriterOptions options;
  options.overwrite = true;  // moewb capture already refused an existing file without --force
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<storage::TraceWriter> writer,
                         storage::TraceWriter::create(settings.outPath, options));
  // Never freed: CUPTI may call back until the process ends.
  auto* session = new Session(settings, std::move(writer));
  g_session = session;
  if (Status started = session->start(); !started.isOk()) {
    for (CUpti_ActivityKind kind : kKinds) (void)cuptiActivityDisable(kind);
    g_session = nullptr;
    session->discard();  // no half-written trace: moewb capture then says none was written
    return started;
  }
  pointNvtxAtLoadedCupti();
  g_sessionPid = getpid();
  std::atexit(stopSessionAtExit);
  return Status::ok();
}

}  // namespace moewb::profiler::inject
