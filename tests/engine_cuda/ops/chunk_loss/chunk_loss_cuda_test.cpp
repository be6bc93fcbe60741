// chunkLossForwardCuda / chunkLossBackwardCuda against ops/chunk_loss (double): loss, z-loss,
// lse, dh and dWv (added into random initial values), with several chunks (last partial), the
// automatic chunk size, soft-cap and z-loss, ignored targets, and no valid target.
#include "ops/chunk_loss/chunk_loss_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/chunk_loss/chunk_loss.h"

namespace moewb::engine::cuda {
namespace {

using ChunkLossCudaTest = CudaTest;

struct ChunkCase {
  int64_t n, d, vocab, chunkTokens;
  double softCap, zLossCoef;
  bool noneValid;
};

void runCase(CudaContext& context, const ChunkCase& c, uint64_t seed) {
  ThreadPool pool(1);
  Tensor<float> h = roundedToBf16(randomTensor({c.n, c.d}, seed));
  Tensor<float> wv =
      roundedToBf16(randomTensor({c.vocab, c.d}, seed + 1, 3.0 / std::sqrt(double(c.d))));
  Tensor<float> dWv0 = randomTensor({c.vocab, c.d}, seed + 2, 0.01);
  Tensor<int32_t> targets({c.n});
  for (int64_t i = 0; i < c.n; ++i) {
    targets[i] = int32_t((i * 53 + 5) % c.vocab);
    if (i % 6 == 1 || c.noneValid) targets[i] = kDefaultIgnoreIndex;
  }
  const float dLoss = 0.8f;
  ChunkLossCudaOptions options;
  options.chunkTokens = c.chunkTokens;
  options.loss.softCap = c.softCap;
  options.loss.zLossCoef = c.zLossCoef;

  MOEWB_ASSIGN_OR_FAIL(auto dH, toDeviceBf16(context, h, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dWv, toDeviceBf16(context, wv, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dTargets, toDevice(context, targets, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dGradWv, toDevice(context, dWv0, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dLossOut, poisonedFloat(context, {2}));
  MOEWB_ASSIGN_OR_FAIL(auto dDh, poisonedBf16(context, {c.n, c.d}));
  ChunkLossSavedCuda saved;
  MOEWB_ASSERT_OK(chunkLossForwardCuda(context, dH.data(), dWv.data(), dTargets.data(), c.n, c.d,
                                       c.vocab, options, saved, dLossOut.data(),
                                       dLossOut.data() + 1));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context, saved.lse));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> validGot, toHost(context, saved.validCount));
  MOEWB_ASSERT_OK(chunkLossBackwardCuda(context, saved, dLoss, dDh.data(), dGradWv.data()));

  ChunkLossOptions refOptions;
  refOptions.chunkTokens = c.chunkTokens;
  refOptions.loss = options.loss;
  ChunkLossSaved<double> refSaved;
  const LinearLossResult want =
      chunkLossForward<double>(pool, toDouble(h), toDouble(wv), targets, refOptions, refSaved);
  Tensor<double> dWvWant = toDouble(dWv0);
  Tensor<double> dhWant = chunkLossBackward<double>(pool, refSaved, dLoss, dWvWant);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lossGot, toHost(context, dLossOut));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dhGot, toHostFloat(context, dDh));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dWvGot, toHost(context, dGradWv));
  EXPECT_EQ(validGot[0], want.validTokens);
  EXPECT_NEAR(lossGot[0], want.loss, 1e-5 * std::max(1.0, std::fabs(want.loss)));
  EXPECT_NEAR(lossGot[1], want.zLoss, 1e-5 * std::max(1.0, std::fabs(want.zLoss)));
  if (c.noneValid) {
    for (int64_t i = 0; i < dhGot.numel(); ++i) ASSERT_EQ(dhGot[i], 0.0f) << i;
    for (int64_t i = 0; i < dWvGot.numel(); ++i) ASSERT_EQ(dWvGot[i], dWv0[i]) << i;
    return;
  }
  // The reference's lse: recompute it in double from h and wv (ChunkLossSaved keeps only grads).
  Tensor<float> lseWant({c.n});
  for (int64_t t = 0; t < c.n; ++t) {
    double m = -INFINITY, s = 0;
    std::vector<double> z(size_t(c.vocab));
    for (int64_t v = 0; v < c.vocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < c.d; ++j) dot += double(h[t * c.d + j]) * double(wv[v * c.d + j]);
      z[size_t(v)] = c.softCap > 0 ? c.softCap * std::tanh(dot / c.softCap) : dot;
      m = std::max(m, z[size_t(v)]);
    }
    for (double zv : z) s += std::exp(zv - m);
    lseWant[t] = float(m + std::log(s));
  }
  EXPECT_LT(relativeError(lseGot, lseWant), 1e-5);
  EXPECT_LT(relativeError(dhGot, toFloat(dhWant)), 1e-2);
  EXPECT_LT(relativeError(minus(dWvGot, dWv0), minus(toFloat(dWvWant), dWv0)), 1e-2);
}

TEST_F(ChunkLossCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 9700;
  const ChunkCase cases[] = {
      {1, 8, 5, 0, 0.0, 0.0, false},
      {63, 48, 1000, 16, 0.0, 0.0, false},  // 4 chunks, the last partial
      {63, 48, 1000, 0, 5.0, 1e-3, false},  // automatic chunk size, soft-cap, z-loss
      {130, 64, 3001, 50, 0.0, 1e-2, false},
  };
  for (const ChunkCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.n << "x" << c.d << " V" << c.vocab << " chunk " << c.chunkTokens << " cap "
                 << c.softCap << " z " << c.zLossCoef);
    runCase(context(), c, seed += 10);
  }
}

TEST_F(ChunkLossCudaTest, NoValidTargetGivesZeroLossAndGradients) {
  runCase(context(), ChunkCase{17, 16, 40, 8, 0.0, 0.0, true}, 9900);
}

}  // namespace
}  // namespace moewb::engine::cuda
