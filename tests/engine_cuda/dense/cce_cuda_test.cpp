// cceForwardCuda / cceBackwardCuda against ops/cce (double, exact: no gradient filtering): lse,
// loss, z-loss, dh and dWv (added into random initial values), with several strips per token
// group and a partial last vocabulary block, soft-cap and z-loss on and off, ignored targets,
// and a batch with no valid target.
#include "ops/cce/cce_cuda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "ops/cce/cce.h"

namespace moewb::engine::cuda {
namespace {

using CceCudaTest = CudaTest;

struct CceCase {
  int64_t n, d, vocab, groupTokens, vocabBlock;
  double softCap, zLossCoef;
  bool noneValid;
};

Tensor<float> minus(const Tensor<float>& a, const Tensor<float>& b) {
  Tensor<float> out(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out[i] = a[i] - b[i];
  return out;
}

void runCase(CudaContext& context, const CceCase& c, uint64_t seed) {
  ThreadPool pool(1);
  Tensor<float> h = roundedToBf16(randomTensor({c.n, c.d}, seed));
  Tensor<float> wv =
      roundedToBf16(randomTensor({c.vocab, c.d}, seed + 1, 3.0 / std::sqrt(double(c.d))));
  Tensor<float> dWv0 = randomTensor({c.vocab, c.d}, seed + 2, 0.01);
  Tensor<int32_t> targets({c.n});
  for (int64_t i = 0; i < c.n; ++i) {
    targets[i] = int32_t((i * 37 + 11) % c.vocab);
    if (i % 7 == 3 || c.noneValid) targets[i] = kDefaultIgnoreIndex;
  }
  const float dLoss = 1.25f;
  CceCudaOptions options;
  options.groupTokens = c.groupTokens;
  options.vocabBlock = c.vocabBlock;
  options.loss.softCap = c.softCap;
  options.loss.zLossCoef = c.zLossCoef;

  MOEWB_ASSIGN_OR_FAIL(auto dH, toDeviceBf16(context, h, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dWv, toDeviceBf16(context, wv, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dTargets, toDevice(context, targets, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dGradWv, toDevice(context, dWv0, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dLossOut, poisonedFloat(context, {2}));
  MOEWB_ASSIGN_OR_FAIL(auto dDh, poisonedBf16(context, {c.n, c.d}));
  CceSavedCuda saved;
  MOEWB_ASSERT_OK(cceForwardCuda(context, dH.data(), dWv.data(), dTargets.data(), c.n, c.d, c.vocab,
                                 options, saved, dLossOut.data(), dLossOut.data() + 1));
  MOEWB_ASSERT_OK(cceBackwardCuda(context, dH.data(), dWv.data(), dTargets.data(), c.n, c.d,
                                  c.vocab, options, saved, dLoss, dDh.data(), dGradWv.data()));

  CceOptions refOptions;
  refOptions.filterEps = 0;  // exact
  refOptions.loss = options.loss;
  CceSaved<double> refSaved;
  Tensor<double> hd = toDouble(h), wvd = toDouble(wv);
  const LinearLossResult want = cceForward<double>(pool, hd, wvd, targets, refOptions, refSaved);
  Tensor<double> dWvWant = toDouble(dWv0);
  Tensor<double> dhWant =
      cceBackward<double>(pool, hd, wvd, targets, refOptions, refSaved, dLoss, dWvWant);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lossGot, toHost(context, dLossOut));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> validGot, toHost(context, saved.validCount));
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
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context, saved.lse));
  EXPECT_LT(relativeError(lseGot, toFloat(refSaved.lse)), 1e-5);
  EXPECT_LT(relativeError(dhGot, toFloat(dhWant)), 1e-2);
  EXPECT_LT(relativeError(minus(dWvGot, dWv0), minus(toFloat(dWvWant), dWv0)), 1e-2);
}

TEST_F(CceCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 9000;
  const CceCase cases[] = {
      {1, 8, 5, 4096, 4096, 0.0, 0.0, false},
      {63, 48, 1000, 16, 128, 0.0, 0.0, false},   // 4 token groups x 8 vocab blocks (last partial)
      {63, 48, 1000, 20, 333, 5.0, 1e-3, false},  // soft-cap and z-loss
      {130, 64, 3001, 4096, 4096, 0.0, 1e-2, false},
  };
  for (const CceCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.n << "x" << c.d << " V" << c.vocab << " group " << c.groupTokens << " block "
                 << c.vocabBlock << " cap " << c.softCap << " z " << c.zLossCoef);
    runCase(context(), c, seed += 10);
  }
}

TEST_F(CceCudaTest, NoValidTargetGivesZeroLossAndGradients) {
  runCase(context(), CceCase{17, 16, 40, 8, 16, 0.0, 0.0, true}, 9500);
}

}  // namespace
}  // namespace moewb::engine::cuda
