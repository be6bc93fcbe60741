// libmoewb_inject.so's entry point: the CUDA driver loads the library named by
// CUDA_INJECTION64_PATH when the program initialises CUDA and calls InitializeInjection (see
// inject_session.h). This is the only symbol the library exports (inject.map).
#include <cstdio>

#include "inject/inject_session.h"

// Returns 1 (the driver ignores the value). A process moewb capture did not start records
// nothing; a failure to start prints one line and leaves the program running untraced.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  auto settings = moewb::profiler::inject::settingsFromEnvironment();
  if (!settings.isOk()) {
    if (settings.status().code() != moewb::StatusCode::kFailedPrecondition) {
      std::fprintf(stderr, "moewb capture: %s\n", settings.status().message().c_str());
    }
    return 1;
  }
  moewb::Status started = moewb::profiler::inject::startSession(*settings);
  if (!started.isOk()) {
    std::fprintf(stderr, "moewb capture: tracing not started: %s\n", started.toString().c_str());
  }
  return 1;
}
