// CaptureMode: which steps a GPU capture (GpuCapture, `moewb run --gpu-trace`) records, and the
// flight recorder's triggers. Host events (steps, phases, expert load) are traced every step
// whatever the mode; the mode only decides about CUPTI's GPU records.
//
// Modes: every step (the default); every N-th step and/or a step window [firstStep, endStep), in
// which the capture enables CUPTI's activity kinds only around the chosen steps (disabled in
// between, so CUPTI costs nothing there); and a flight recorder that records every step, keeps
// the GPU rows of the last N steps in memory and writes them only when a trigger fires at the
// end of a step (expert max/mean load of any layer, step time or peak device memory above a
// threshold). parseCaptureMode turns command-line values into a mode with messages that name
// the option and what is accepted. All of it is plain arithmetic, no CUDA.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "moewb/base/status.h"
#include "moewb/profiler/gpu_trace_kinds.h"

namespace moewb::profiler {

// Flight-recorder thresholds; 0 = that trigger is off.
struct CaptureTriggers {
  double expertLoad = 0;  // fire when max/mean tokens per expert of any layer exceeds this
  double stepMs = 0;      // fire when a step (host wall time) takes longer than this, ms
  double memoryGiB = 0;   // fire when the step's peak device memory exceeds this, GiB
  int64_t cooldownSteps = 0;  // after a firing, ignore the triggers for this many steps
  bool any() const { return expertLoad > 0 || stepMs > 0 || memoryGiB > 0; }
};

struct CaptureMode {
  static constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();
  int64_t everySteps = 1;  // capture steps with (step - firstStep) % everySteps == 0
  int64_t firstStep = 0;   // window [firstStep, endStep) of 0-based steps
  int64_t endStep = kNoEnd;
  int32_t flightRecorderSteps = 0;  // > 0: flight recorder keeping that many steps
  CaptureTriggers triggers;         // flight recorder only

  bool isFlightRecorder() const { return flightRecorderSteps > 0; }
  bool isEveryStep() const {
    return !isFlightRecorder() && everySteps == 1 && firstStep == 0 && endStep == kNoEnd;
  }
  // Whether CUPTI records `step` (always for the flight recorder, which filters afterwards).
  bool capturesStep(int64_t step) const;
  // "every step", "every 10th step of steps 100..199", "flight recorder (last 8 steps; ...)".
  std::string describe() const;
};

// Command-line values as given; std::nullopt = option not given.
struct CaptureModeArgs {
  bool gpuTrace = false;                   // --gpu-trace
  std::optional<int64_t> traceEvery;       // --trace-every N
  std::optional<std::string> traceSteps;   // --trace-steps A:B
  std::optional<int64_t> flightRecorder;   // --flight-recorder N
  std::optional<double> triggerLoad;       // --trigger-load X
  std::optional<double> triggerStepMs;     // --trigger-step-ms Y
  std::optional<double> triggerMemoryGiB;  // --trigger-memory-gib Z
  std::optional<int64_t> triggerCooldown;  // --trigger-cooldown K
  int64_t plannedSteps = -1;               // steps the run will train (-1 = unknown)
  GpuTraceKinds gpuTraceKinds;             // --gpu-trace-kinds LIST, parsed (default: all);
                                           // not part of the mode (GpuCaptureOptions::kinds)
};

// Largest --flight-recorder N accepted (the held rows of N steps live in host memory).
constexpr int64_t kMaxFlightRecorderSteps = 10'000;

// Validates `args` and returns the mode. kInvalidArgument naming the option, the value and what
// is accepted when: a mode option comes without --gpu-trace; N < 1; A:B is not 0 <= A < B (a
// single A means A:A+1) or starts at or after plannedSteps; a trigger comes without
// --flight-recorder or is not > 0 (--trigger-load: > 1, as max/mean is never below 1);
// --trigger-cooldown comes without --flight-recorder or is < 0; the flight recorder has no
// trigger or is combined with --trace-every / --trace-steps.
Result<CaptureMode> parseCaptureMode(const CaptureModeArgs& args);

}  // namespace moewb::profiler
