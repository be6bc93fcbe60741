// CaptureMode: step selection and command-line validation of the GPU capture modes (see header).
#include "moewb/profiler/capture_mode.h"

#include "moewb/base/step_range.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace moewb::profiler {

namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

std::string ordinal(int64_t n) {
  const int64_t tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : n % 10 == 1              ? "st"
                       : n % 10 == 2              ? "nd"
                       : n % 10 == 3              ? "rd"
                                                  : "th";
  return std::to_string(n) + suffix;
}

Status positiveThreshold(const char* option, const std::optional<double>& value, double above,
                         const char* accepted) {
  if (!value || (std::isfinite(*value) && *value > above)) return Status::ok();
  return invalidArgument(std::string(option) + " " + number(*value) +
                         " is out of range; accepted: " + accepted);
}

}  // namespace

bool CaptureMode::capturesStep(int64_t step) const {
  if (isFlightRecorder()) return true;
  if (step < firstStep || step >= endStep) return false;
  return (step - firstStep) % everySteps == 0;
}

std::string CaptureMode::describe() const {
  if (isFlightRecorder()) {
    std::string text =
        "flight recorder (last " + std::to_string(flightRecorderSteps) + " steps; triggers:";
    if (triggers.expertLoad > 0) text += " expert max/mean load > " + number(triggers.expertLoad);
    if (triggers.stepMs > 0) text += " step time > " + number(triggers.stepMs) + " ms";
    if (triggers.memoryGiB > 0) text += " peak memory > " + number(triggers.memoryGiB) + " GiB";
    if (triggers.cooldownSteps > 0) {
      text += "; cooldown " + std::to_string(triggers.cooldownSteps) + " steps";
    }
    return text + ")";
  }
  std::string text = everySteps == 1 ? "every step" : "every " + ordinal(everySteps) + " step";
  if (firstStep != 0 || endStep != kNoEnd) {
    text += " of steps " + std::to_string(firstStep) + "..";
    if (endStep != kNoEnd) text += std::to_string(endStep - 1);
  }
  return text;
}

Result<CaptureMode> parseCaptureMode(const CaptureModeArgs& args) {
  CaptureMode mode;
  const char* given = args.traceEvery         ? "--trace-every"
                      : args.traceSteps       ? "--trace-steps"
                      : args.flightRecorder   ? "--flight-recorder"
                      : args.triggerLoad      ? "--trigger-load"
                      : args.triggerStepMs    ? "--trigger-step-ms"
                      : args.triggerMemoryGiB ? "--trigger-memory-gib"
                      : args.triggerCooldown  ? "--trigger-cooldown"
                                              : nullptr;
  if (given == nullptr) return mode;
  if (!args.gpuTrace) {
    return invalidArgument(std::string(given) +
                           " chooses which steps the GPU capture records; "
                           "it needs --gpu-trace");
  }
  if (args.traceEvery) {
    if (*args.traceEvery < 1) {
      return invalidArgument("--trace-every " + std::to_string(*args.traceEvery) +
                             " is out of range; accepted: N >= 1 (1 = every step)");
    }
    mode.everySteps = *args.traceEvery;
  }
  if (args.traceSteps) {
    MOEWB_ASSIGN_OR_RETURN(const StepRange window, parseStepRange(*args.traceSteps, "--trace-steps"));
    mode.firstStep = window.first;
    mode.endStep = window.end;
    if (args.plannedSteps >= 0 && mode.firstStep >= args.plannedSteps) {
      return invalidArgument("--trace-steps '" + *args.traceSteps +
                             "' captures nothing: the run "
                             "trains steps 0.." +
                             std::to_string(args.plannedSteps - 1) +
                             "; accepted: a window that starts before step " +
                             std::to_string(args.plannedSteps));
    }
  }
  MOEWB_RETURN_IF_ERROR(
      positiveThreshold("--trigger-load", args.triggerLoad, 1.0, "a max/mean expert load X > 1"));
  MOEWB_RETURN_IF_ERROR(
      positiveThreshold("--trigger-step-ms", args.triggerStepMs, 0.0, "a step time in ms Y > 0"));
  MOEWB_RETURN_IF_ERROR(positiveThreshold("--trigger-memory-gib", args.triggerMemoryGiB, 0.0,
                                          "a device memory size in GiB Z > 0"));
  mode.triggers = {args.triggerLoad.value_or(0), args.triggerStepMs.value_or(0),
                   args.triggerMemoryGiB.value_or(0)};
  if (args.triggerCooldown && !args.flightRecorder) {
    return invalidArgument("--trigger-cooldown needs --flight-recorder N (it spaces the flight "
                           "recorder's firings)");
  }
  if (args.triggerCooldown && *args.triggerCooldown < 0) {
    return invalidArgument("--trigger-cooldown " + std::to_string(*args.triggerCooldown) +
                           " is out of range; accepted: K >= 0 steps (0 = a firing may follow "
                           "every step)");
  }
  mode.triggers.cooldownSteps = args.triggerCooldown.value_or(0);
  if (!args.flightRecorder) {
    if (mode.triggers.any()) {
      const char* trigger = args.triggerLoad     ? "--trigger-load"
                            : args.triggerStepMs ? "--trigger-step-ms"
                                                 : "--trigger-memory-gib";
      return invalidArgument(std::string(trigger) +
                             " needs --flight-recorder N (the trigger "
                             "decides when the flight recorder's last N steps are written)");
    }
    return mode;
  }
  if (*args.flightRecorder < 1 || *args.flightRecorder > kMaxFlightRecorderSteps) {
    return invalidArgument("--flight-recorder " + std::to_string(*args.flightRecorder) +
                           " is out of range; accepted: 1 <= N <= " +
                           std::to_string(kMaxFlightRecorderSteps) + " steps kept in memory");
  }
  if (args.traceEvery || args.traceSteps) {
    return invalidArgument(std::string("--flight-recorder records every step and cannot be "
                                       "combined with ") +
                           (args.traceEvery ? "--trace-every" : "--trace-steps") +
                           "; accepted: either the flight recorder or --trace-every / "
                           "--trace-steps");
  }
  if (!mode.triggers.any()) {
    return invalidArgument("--flight-recorder " + std::to_string(*args.flightRecorder) +
                           " has no trigger and would never write; accepted: at least one of "
                           "--trigger-load X, --trigger-step-ms Y, --trigger-memory-gib Z");
  }
  mode.flightRecorderSteps = int32_t(*args.flightRecorder);
  return mode;
}

}  // namespace moewb::profiler
