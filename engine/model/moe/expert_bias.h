// ExpertBias: the aux-loss-free load-balancing bias of one MoE layer (ENGINE-MATH §5.3,
// DeepSeek-V3). It is model state, not a trained parameter: the optimizer never sees it, it
// changes the router's selection only (never a weight or a gradient), and it moves by a fixed
// step after each optimizer step:
//   b_e += rate * sign(mean_e'(count_e') - count_e)        (sign(0) = 0)
// where count_e is the number of (token, expert) assignments the router selected (before any
// capacity drop) during the step's training forwards. Order per step: forward(s) ->
// accumulateExpertCounts (training only; not for eval or activation recompute) -> backward ->
// optimizer -> updateExpertBias. With several ranks, sum pendingCounts over all ranks that saw
// tokens before the update. Costs O(E). Not thread-safe; the training thread owns it.
#pragma once

#include <cstdint>
#include <vector>

namespace moewb::engine {

struct ExpertBias {
  std::vector<float> bias;             // [E] b_e (fp32), selection only; starts at 0
  std::vector<int64_t> pendingCounts;  // [E] assignments selected since the last update
};

// A zero bias with no pending counts for `numExperts` experts.
ExpertBias makeExpertBias(int64_t numExperts);

// pendingCounts += counts ([E], e.g. MoeLossStats::counts of one forward).
void accumulateExpertCounts(ExpertBias& state, const std::vector<int64_t>& counts);

// Applies the sign update with step `rate` (gamma, e.g. 1e-3) and clears pendingCounts. Does
// nothing to the bias when no counts are pending.
void updateExpertBias(ExpertBias& state, double rate);

}  // namespace moewb::engine
