// TrainingState: everything the next optimizer step of a run depends on, in the shapes of the
// one-rank model, whatever the layout that produced it (one rank, or a group of ranks with any
// EP / FSDP / replicate split). Made by gathering a rank group (parallel/shard_state.h), turned
// back into a group of the same or another layout by scattering it; a rank-group checkpoint is
// this state written with checkpoint/checkpoint.h's saveCheckpoint (params, the expert biases as
// "state.*", stepsDone as the next step).
// What is not here because it is a pure function of what is: the data position (the synthetic
// batch of a step is a function of the seed, the config and the step index), the learning rate
// (of the step index), the full parameter copies an FSDP rank gathers before each use.
// Costs: one copy of every parameter, its gradient and two AdamW moments (4x the weights).
#pragma once

#include <cstdint>
#include <vector>

#include "model/cpu/parameter.h"
#include "model/moe/expert_bias.h"

namespace moewb::engine {

struct TrainingState {
  // One entry per parameter of the one-rank model, in model order (modelParameterLayout), each
  // with its full shape: value, grad (the last step's gradient as the optimizer saw it: summed
  // over ranks and scaled, before clipping; zeros before the first step), adamM, adamV.
  std::vector<Parameter<float>> params;
  std::vector<ExpertBias> expertBiases;  // [L] the aux-loss-free bias (empty when unused)
  int64_t stepsDone = 0;                 // optimizer steps done: the index of the next step
};

}  // namespace moewb::engine
