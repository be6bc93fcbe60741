// Micro-batching (data.micro_batch_size): one optimizer step's batch cut into M micro-batches of
// consecutive sequences. Each runs its own forward and backward into the same gradients (zeroed
// once per step), then the gradient norm, clip and AdamW run once; counts of routed tokens
// accumulate over the micro-batches and the aux-loss-free bias moves once per step.
//
// Weights (LossWeights, model/cpu/parameter.h): the step's LM loss is the mean over its V valid
// targets, so micro-batch m (V_m valid targets) scales its LM gradient by V_m / V and the
// accumulated gradient is the whole batch's, up to rounding. The aux losses (switch, sequence,
// z-loss, the sparse indexer's KL) are computed per micro-batch and averaged (weight 1 / M), as
// Megatron-Core does: the switch loss and expert capacity see the micro-batch's routing, so with
// them the step is close to, not equal to, the unsplit one. The step reports the token-weighted
// mean of the micro-batches' LM losses, the mean of their aux losses and the sums of their expert
// counts and drops. With M = 1 the one micro-batch is the step's batch itself and every weight is
// exactly 1, so the step is bit for bit the unsplit one.
// Costs: one copy of the step's inputs (O(B T) ids, O(B P) patch rows) when M > 1. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/cpu/model.h"

namespace moewb::engine {

struct MicroBatch {
  Batch batch;          // [b*T] consecutive sequences of the step's batch
  LossWeights weights;  // its share of the step's objective
};

// Sequences [first, first + count) of `batch` as a batch of their own (inputs, targets, topics
// and image patches copied). `first` and `count` must lie inside the batch.
Batch sliceSequences(const Batch& batch, int64_t first, int64_t count);

// Targets the loss counts (>= 0, not kIgnoreTarget) in `batch`.
int64_t validTargets(const Batch& batch);

// `batch` cut into batch.batchSize / microBatchSize micro-batches of `microBatchSize` sequences
// in order, with their weights; one micro-batch holding `batch` itself (moved, weights {1, 1})
// when microBatchSize >= batch.batchSize or is 0. microBatchSize must divide batch.batchSize.
std::vector<MicroBatch> splitMicroBatches(Batch batch, int64_t microBatchSize);

// Folds micro-batch `part` (run with `weights`) into the step's result `step`: loss += lm *
// part.loss, auxLoss += part.auxLoss (already weighted), expert counts and drops added, the
// expert bias and the first non-finite aux term kept from the first part that has them. `first`:
// `part` is the step's first micro-batch (`step` is then replaced).
void addMicroBatchResult(ForwardResult& step, ForwardResult part, const LossWeights& weights,
                         bool first);

// Sequences in all of `batches` times the sequence length: the step's tokens.
int64_t stepTokens(const std::vector<MicroBatch>& batches);

}  // namespace moewb::engine
