// Trials: one real short training run of a candidate config (run::TrainingRun, traced into its
// own file) measured from the engine's step events, and the precision gate that compares a
// candidate's first steps with its reference's.
//
// Measurement: a step's time is the span from the earliest start to the latest end over its
// ranks; the trial's step time is the median over all steps but the first (which pays one-time
// costs; a one-step trial uses it), its tokens/s the tokens of a step over that time, its peak the
// largest peakBytes of any step and rank, its loss the last step's loss (mean over ranks). Runs on
// the calling thread; a trial costs what its training run costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/tuner/study_store.h"

namespace moewb::tuner {

// Trains `config` for `steps` steps into the trace `tracePath` (replaced when it exists) and
// fills the measured fields of a TrialRecord (steps, stepTimeMs, tokensPerSecond, peakBytes,
// finalLoss, losses, gradNorms, stepMs, tracePath, startedAt, endedAt; verdict ok). Errors from
// the run (creating the trace, a failed step) are returned as they are.
Result<TrialRecord> runTrial(const engine::ValidConfig& config, int64_t steps,
                             const std::string& tracePath);

// How far a candidate may drift from its reference over the gate's steps. A negative tolerance
// means "the backend's default" (gateToleranceFor).
struct GateTolerance {
  int64_t steps = 4;        // steps compared (from step 0, same seed and batches)
  double lossRel = -1;      // |loss - ref| / |ref| per step
  double gradNormRel = -1;  // |norm - ref| / |ref| per step
};

// `tolerance` with its negative fields replaced by the defaults of `config`'s backend: fp32 on
// the CPU (loss 1e-5, gradient norm 1e-4: equivalent settings agree to ~1e-9 there) and bf16 on
// the GPU (loss 1e-3, gradient norm 1e-2, the targets of docs/TUNER.md).
GateTolerance gateToleranceFor(const engine::RunConfig& config, GateTolerance tolerance);

// Compares the per-step losses and gradient norms of `candidate` with `reference` over the first
// min(tolerance.steps, both lengths) steps. Returns "" when every step is within tolerance,
// otherwise a message naming the first step, quantity, both values and the tolerance. A
// non-finite value always fails; fewer than one comparable step fails with a message too.
std::string precisionFinding(const TrialRecord& reference, const TrialRecord& candidate,
                             const GateTolerance& tolerance);

}  // namespace moewb::tuner
