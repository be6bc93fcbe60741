#include "cupti/cupti_check.h"

#include <string>

namespace moewb::profiler::cupti {

Status cuptiStatus(CUptiResult result, const char* call, const char* file, int line) {
  if (result == CUPTI_SUCCESS) return Status::ok();
  const char* message = nullptr;
  if (cuptiGetResultString(result, &message) != CUPTI_SUCCESS || message == nullptr) {
    message = "unknown CUPTI error";
  }
  return internalError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                       ": " + message + " (CUPTI error " + std::to_string(int(result)) + ")");
}

}  // namespace moewb::profiler::cupti
