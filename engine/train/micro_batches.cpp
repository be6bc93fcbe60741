// Micro-batches of a step and the step's result from theirs (see micro_batches.h).
#include "train/micro_batches.h"

#include <algorithm>

#include "moewb/base/check.h"

namespace moewb::engine {
namespace {

// a[i] += b[i] over two [L][E] tables of the same shape (b may be empty: nothing to add).
void addCounts(std::vector<std::vector<int64_t>>& a, const std::vector<std::vector<int64_t>>& b) {
  if (b.empty()) return;
  MOEWB_CHECK(a.size() == b.size());
  for (size_t l = 0; l < a.size(); ++l) {
    MOEWB_CHECK(a[l].size() == b[l].size());
    for (size_t e = 0; e < a[l].size(); ++e) a[l][e] += b[l][e];
  }
}

}  // namespace

Batch sliceSequences(const Batch& batch, int64_t first, int64_t count) {
  MOEWB_CHECK(first >= 0 && count >= 0 && first + count <= batch.batchSize);
  Batch out;
  out.batchSize = count;
  out.seqLen = batch.seqLen;
  out.imagePatches = batch.imagePatches;
  const int64_t tokens = count * batch.seqLen, offset = first * batch.seqLen;
  out.inputs = Tensor<int32_t>({tokens});
  out.targets = Tensor<int32_t>({tokens});
  std::copy_n(batch.inputs.data() + offset, tokens, out.inputs.data());
  std::copy_n(batch.targets.data() + offset, tokens, out.targets.data());
  if (!batch.topics.empty()) {
    out.topics.assign(batch.topics.begin() + first, batch.topics.begin() + first + count);
  }
  if (batch.imagePatches > 0) {
    const int64_t width = batch.patches.numel() / (batch.batchSize * batch.imagePatches);
    const int64_t rows = count * batch.imagePatches;
    out.patches = Tensor<float>({rows, width});
    std::copy_n(batch.patches.data() + first * batch.imagePatches * width, rows * width,
                out.patches.data());
  }
  return out;
}

int64_t validTargets(const Batch& batch) {
  int64_t valid = 0;
  for (int64_t i = 0; i < batch.targets.numel(); ++i) valid += batch.targets[i] >= 0 ? 1 : 0;
  return valid;
}

std::vector<MicroBatch> splitMicroBatches(Batch batch, int64_t microBatchSize) {
  std::vector<MicroBatch> out;
  if (microBatchSize <= 0 || microBatchSize >= batch.batchSize) {
    out.push_back({std::move(batch), LossWeights{}});
    return out;
  }
  MOEWB_CHECK(batch.batchSize % microBatchSize == 0);
  const int64_t count = batch.batchSize / microBatchSize;
  const double stepValid = double(std::max<int64_t>(1, validTargets(batch)));
  for (int64_t m = 0; m < count; ++m) {
    MicroBatch micro;
    micro.batch = sliceSequences(batch, m * microBatchSize, microBatchSize);
    micro.weights.lm = double(validTargets(micro.batch)) / stepValid;
    micro.weights.aux = 1.0 / double(count);
    out.push_back(std::move(micro));
  }
  return out;
}

void addMicroBatchResult(ForwardResult& step, ForwardResult part, const LossWeights& weights,
                         bool first) {
  if (first) {
    step = std::move(part);
    step.loss *= weights.lm;
    return;
  }
  step.loss += weights.lm * part.loss;
  step.auxLoss += part.auxLoss;
  addCounts(step.expertCounts, part.expertCounts);
  addCounts(step.expertDropped, part.expertDropped);
  if (step.expertBias.empty()) step.expertBias = std::move(part.expertBias);
  if (step.nonFiniteAuxTerm.empty()) step.nonFiniteAuxTerm = std::move(part.nonFiniteAuxTerm);
}

int64_t stepTokens(const std::vector<MicroBatch>& batches) {
  int64_t tokens = 0;
  for (const MicroBatch& micro : batches) tokens += micro.batch.tokens();
  return tokens;
}

}  // namespace moewb::engine
