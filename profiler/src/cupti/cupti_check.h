// Checking macro for every CUPTI call of the profiler: a failed call becomes a kInternal Status
// naming the call, the file and line and CUPTI's own message (cuptiGetResultString).
#pragma once

#include <cupti.h>

#include "moewb/base/status.h"

namespace moewb::profiler::cupti {

// Status of a CUPTI result; ok for CUPTI_SUCCESS. `call` is the expression's text.
Status cuptiStatus(CUptiResult result, const char* call, const char* file, int line);

}  // namespace moewb::profiler::cupti

#define MOEWB_CUPTI_RETURN_IF_ERROR(expr) \
  MOEWB_RETURN_IF_ERROR(::moewb::profiler::cupti::cuptiStatus((expr), #expr, __FILE__, __LINE__))
// For CUPTI calls whose Status goes somewhere else than a return (callbacks, destructors).
#define MOEWB_CUPTI_STATUS(expr) \
  ::moewb::profiler::cupti::cuptiStatus((expr), #expr, __FILE__, __LINE__)
