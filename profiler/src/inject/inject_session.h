// InjectSession: the profiler inside a foreign CUDA program (`moewb capture`). The CUDA driver
// loads libmoewb_inject.so (CUDA_INJECTION64_PATH) at cuInit and calls InitializeInjection, which
// starts one session: it creates the trace named by MOEWB_CAPTURE_OUT with a run row (name from
// MOEWB_CAPTURE_NAME, backend "external"), enables the CUPTI activity kinds of GpuCapture and
// attributes the records with GpuTraceBuilder in foreign-program mode (step -1, phase = the
// program's innermost NVTX range or "external").
//
// Threads: CUPTI's buffer callbacks only hand out malloc'ed buffers and queue completed ones; a
// timer thread every MOEWB_CAPTURE_FLUSH_MS (default 1000) flushes CUPTI, parses the queued
// buffers and writes every record older than one period, then commits; at process exit (atexit)
// the session stops the timer, disables CUPTI, force-flushes, writes everything, the stats and
// the run's end, and closes the file. A killed program leaves the rows of the last commit.
// Only the process whose pid is MOEWB_CAPTURE_PID records (children that also load the library,
// e.g. compile workers, stay silent), so one trace file has one writer.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/status.h"

namespace moewb::profiler::inject {

struct InjectSettings {
  std::string outPath;  // MOEWB_CAPTURE_OUT
  std::string runName;  // MOEWB_CAPTURE_NAME
  std::string command;  // MOEWB_CAPTURE_COMMAND, stored as the run's config text
  int64_t flushPeriodMs = 1000;
  int64_t bufferBytes = 8 << 20;
};

// Reads the settings from the environment. Errors: kFailedPrecondition when this process is not
// the one `moewb capture` started or MOEWB_CAPTURE_OUT is unset; kInvalidArgument for bad values.
Result<InjectSettings> settingsFromEnvironment();

// Starts the session of this process (once; later calls return ok). Errors name the failed
// CUPTI or SQLite call; on error nothing keeps running.
Status startSession(const InjectSettings& settings);

}  // namespace moewb::profiler::inject
