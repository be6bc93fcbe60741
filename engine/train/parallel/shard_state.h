// The training state of a rank group, rank by rank (RankShards), and its conversion to and from
// the layout-independent TrainingState (training_state.h): the gather and scatter behind a live
// re-shard of the parallel layout (rank_group_runner.h) and, later, rank-group checkpoints.
//
// Where a parameter lives in a layout (parallel.world_size W, parallel.ep, the FSDP degree F =
// parallel.fsdp or W / replicate), for rank r (placeOf, the one statement of the rule that
// splitParallelGroups follows):
//   dense parameter:  flattened, zero-padded and cut into F chunks (fsdpChunkElements); rank r
//                     holds chunk r % F, and so do its replicas r +- F, r +- 2F, ...
//   routed experts    (parallel.ep > 1; with ep = 1 they are placed as dense parameters):
//                     EP shard s = r % ep holds experts [s E / ep, (s + 1) E / ep), i.e. the
//                     contiguous slice s of the full [E, ...] tensor; that slice is flattened and
//                     cut into W / ep chunks over the ranks holding the same experts (expert-data
//                     parallel group); rank r holds chunk r / ep.
// Every chunk carries the value, the gradient and both AdamW moments; padding is zero.
// Pure functions, no collectives; safe from any thread. Costs: one copy of the whole state.
#pragma once

#include <cstdint>
#include <vector>

#include "model/cpu/parameter.h"
#include "model/moe/expert_bias.h"
#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "train/training_state.h"

namespace moewb::engine {

// Rank r's place in the groups of a layout (consecutive ranks, as splitParallelGroups splits).
struct ParallelPlace {
  int32_t expertShard = 0;   // r % ep: which slice of the experts it holds; its EP group rank
  int32_t expertDpRank = 0;  // r / ep: its rank among the ranks holding the same experts
  int32_t expertDpSize = 1;  // world_size / ep
  int32_t fsdpRank = 0;      // r % F: the dense chunk it holds; its FSDP group rank
  int32_t fsdpSize = 1;      // F, the FSDP degree
  int32_t replica = 0;       // r / F: its rank among the replicas of that chunk
};

// The place of `rank` (0 <= rank < world_size) in the layout `parallel` (a validated one).
ParallelPlace placeOf(const ParallelSection& parallel, int32_t rank);

// What one rank of a group holds of the training state.
struct RankShards {
  // One per trainable parameter of the model, in model order: value, grad, adamM, adamV, each
  // [chunk] (see above), with the parameter's name and decay flag.
  std::vector<Parameter<float>> shards;
  std::vector<ExpertBias> expertBiases;  // [L] equal on every rank
  int64_t stepsDone = 0;                 // equal on every rank
};

// The one-rank state of the group `ranks` ([world_size], rank order) trained with `config`'s
// layout and model. Errors: kFailedPrecondition when the model has frozen parameters (LoRA);
// kInternal when a rank's shards do not fit the layout, or the ranks disagree where they must
// agree (the replicas of a dense chunk, the expert biases, the step count), naming the tensor or
// the rank.
Result<TrainingState> assembleTrainingState(const RunConfig& config,
                                            const std::vector<RankShards>& ranks);

// The one-rank state of `config`'s model with every tensor zero, its expert biases fresh (zeros,
// when moe.bias_update_rate > 0) and stepsDone 0: the shapes a rank-group checkpoint is read
// into. Errors: kFailedPrecondition when the model has frozen parameters (LoRA).
Result<TrainingState> emptyTrainingState(const RunConfig& config);

// What rank `rank` of a group with `config`'s layout holds of `state`. Errors:
// kInvalidArgument naming the first parameter whose name or shape differs from `config`'s model,
// or a bias table of another size.
Result<RankShards> shardsOfRank(const RunConfig& config, const TrainingState& state,
                                int32_t rank);

}  // namespace moewb::engine
