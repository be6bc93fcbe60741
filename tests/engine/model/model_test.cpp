// Model<T>: seeded init, parameter layout, and a finite-difference check in double of the whole
// tiny model's loss (mean CE + aux) with respect to a sample of every parameter tensor.
#include "model/cpu/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "train/synthetic_data.h"
#include "grad_check.h"

namespace moewb::engine {
namespace {

ModelDims tinyDims() {
  ModelDims dims;
  dims.vocabSize = 11;
  dims.dModel = 8;
  dims.numLayers = 2;
  dims.numHeads = 2;
  dims.seqLen = 5;
  dims.batchSize = 2;
  dims.numExperts = 4;
  dims.topK = 2;
  dims.dFf = 6;
  dims.initStd = 0.5;
  dims.auxLossCoef = 0.05;
  return dims;
}

Batch tinyBatch(const ModelDims& dims) {
  RunConfig config;
  config.data.batchSize = int32_t(dims.batchSize);
  config.data.numTopics = 3;
  return SyntheticData(config.data, int32_t(dims.vocabSize), int32_t(dims.seqLen), 99).batch(0);
}

TEST(Model, SameSeedSameWeightsAndGainsStartAtOne) {
  ThreadPool pool(1);
  Model<float> a(tinyDims(), pool), b(tinyDims(), pool), c(tinyDims(), pool);
  a.initialize(5);
  b.initialize(5);
  c.initialize(6);
  bool anyDifferent = false;
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    const auto& pa = a.parameters()[i];
    for (int64_t j = 0; j < pa.value.numel(); ++j) {
      ASSERT_EQ(pa.value[j], b.parameters()[i].value[j]) << pa.name;
      anyDifferent |= pa.value[j] != c.parameters()[i].value[j];
      if (!pa.decay) {
        ASSERT_EQ(pa.value[j], 1.0f) << pa.name;
      }
    }
  }
  EXPECT_TRUE(anyDifferent);
  // V D (embedding) + L (2 D + 4 D^2 + E D + 3 E F D) + D + V D (head)
  const int64_t expected = 11 * 8 + 2 * (2 * 8 + 4 * 64 + 4 * 8 + 3 * 4 * 6 * 8) + 8 + 11 * 8;
  EXPECT_EQ(a.parameterCount(), expected);
}

TEST(Model, LossGradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  const ModelDims dims = tinyDims();
  Model<double> model(dims, pool);
  model.initialize(7);
  const Batch batch = tinyBatch(dims);
  const ForwardResult first = model.forward(batch, nullptr);
  EXPECT_GT(first.auxLoss, 0.0);
  model.zeroGrads();
  model.backward(nullptr);
  auto loss = [&] {
    const double value = model.forward(batch, nullptr).totalLoss();
    return value;
  };
  Rng pick(8);
  for (auto& param : model.parameters()) {
    Tensor<double> grad = param.grad.clone();
    std::vector<int64_t> indices;
    for (int i = 0; i < 6; ++i) indices.push_back(pick.uniformInt(param.value.numel()));
    test::expectGradientMatches(param.name, param.value, grad, loss, indices, 1e-5, 2e-6);
  }
}

TEST(Model, ForwardReportsExpertCountsPerLayer) {
  ThreadPool pool(2);
  ModelDims dims = tinyDims();
  dims.initStd = 0.02;  // small weights: near-uniform predictions
  Model<float> model(dims, pool);
  model.initialize(3);
  const ForwardResult result = model.forward(tinyBatch(dims), nullptr);
  ASSERT_EQ(result.expertCounts.size(), size_t(dims.numLayers));
  for (const auto& counts : result.expertCounts) {
    ASSERT_EQ(counts.size(), size_t(dims.numExperts));
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    EXPECT_EQ(total, dims.tokens() * dims.topK);
  }
  EXPECT_NEAR(result.loss, std::log(11.0), 0.5);
}

}  // namespace
}  // namespace moewb::engine
