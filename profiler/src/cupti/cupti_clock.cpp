// addCuptiClockPoint (see cupti_clock.h).
#include "cupti/cupti_clock.h"

#include <cstdint>

#include "cupti/cupti_check.h"
#include "moewb/base/units.h"

namespace moewb::profiler::cupti {

Status addCuptiClockPoint(gpu::ClockCalibration& clock) {
  constexpr int kBrackets = 5;
  int64_t bestWidth = INT64_MAX, bestCupti = 0, bestSteady = 0;
  for (int i = 0; i < kBrackets; ++i) {
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
  clock.add(bestCupti, bestSteady);
  return Status::ok();
}

}  // namespace moewb::profiler::cupti
