// The Switch load-balancing loss over the global batch (ENGINE-MATH §5.9: router statistics are
// reduced over all ranks that saw tokens). Each rank routes its own N_r tokens; the loss of the
// global batch is alpha E sum_e f_e P_e with f_e = sum_r count_{r,e} / (k N) and
// P_e = sum_r sum_t p_{t,e} / N (N = sum_r N_r). After this call every rank holds that loss and the
// global f_e, so the unchanged auxLossBackward (dL/dp = alpha E f_e / N_r) times the trainer's
// 1 / world_size loss weight (N_r = N / world_size) gives the gradient of the global loss.
// Costs: two all-reduces of E elements. Failures throw CollectiveError.
#pragma once

#include "comm/communicator.h"
#include "model/cpu/moe_ffn.h"

namespace moewb::engine {

// Replaces saved.switchAux (loss, fraction) and saved.aux.switchLoss / loss with their global
// values over `world`; saved.aux.counts stays this rank's (the per-rank expert load).
void globalizeSwitchLoss(Communicator& world, double alpha, MoeSaved<float>& saved);

}  // namespace moewb::engine
