// One point of the CUPTI -> steady clock calibration, shared by the engine's capture and the
// injected profiler of `moewb capture`.
#pragma once

#include "gpu/clock_calibration.h"
#include "moewb/base/status.h"

namespace moewb::profiler::cupti {

// Adds to `clock` the tightest of five steady-clock brackets around one cuptiGetTimestamp (the
// CUPTI time and the bracket's middle). Errors: kInternal naming the failed CUPTI call.
Status addCuptiClockPoint(gpu::ClockCalibration& clock);

}  // namespace moewb::profiler::cupti
