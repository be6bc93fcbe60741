// crossEntropyForwardCuda / crossEntropyBackwardCuda against ops/cross_entropy (double), bf16 and
// fp32 logits, ignored targets (negative and >= V), in-place backward, and a batch with no valid
// target (loss 0, zero gradient).
#include "ops/cross_entropy/cross_entropy_cuda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "ops/cross_entropy/cross_entropy.h"

namespace moewb::engine::cuda {
namespace {

using CrossEntropyCudaTest = CudaTest;

struct CeShape {
  int64_t n, vocab;
};

void runCase(CudaContext& context, CeShape s, bool fp32Logits, bool inPlace, bool noneValid,
             uint64_t seed) {
  ThreadPool pool(1);
  Tensor<float> logits = roundedToBf16(randomTensor({s.n, s.vocab}, seed, 3.0));
  Tensor<int32_t> targets({s.n});
  Tensor<int32_t> refTargets({s.n});  // the reference CHECKs targets < V: map those to -1
  for (int64_t i = 0; i < s.n; ++i) {
    int32_t y = int32_t((i * 131 + 7) % s.vocab);
    if (i % 9 == 2) y = -100;
    if (i % 13 == 5) y = int32_t(s.vocab + i);
    if (noneValid) y = -1;
    targets[i] = y;
    refTargets[i] = y >= s.vocab ? -1 : y;
  }
  const float upstream = 0.75f;
  MOEWB_ASSIGN_OR_FAIL(auto dTargets, toDevice(context, targets, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dLse, poisonedFloat(context, {s.n}));
  MOEWB_ASSIGN_OR_FAIL(auto dTokenLoss, poisonedFloat(context, {s.n}));
  MOEWB_ASSIGN_OR_FAIL(auto dLossValue, poisonedFloat(context, {1}));
  Tensor<int32_t> minusOne({1});
  minusOne[0] = -1;
  MOEWB_ASSIGN_OR_FAIL(auto dValid, toDevice(context, minusOne, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_FAIL(auto dGrad, poisonedBf16(context, {s.n, s.vocab}));
  if (fp32Logits) {
    MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDevice(context, logits, MemoryCategory::kActivations));
    MOEWB_ASSERT_OK(crossEntropyForwardCuda(context.stream(), dLogits.data(), dTargets.data(), s.n,
                                            s.vocab, dLse.data(), dTokenLoss.data(),
                                            dLossValue.data(), dValid.data()));
    MOEWB_ASSERT_OK(crossEntropyBackwardCuda(context.stream(), dLogits.data(), dTargets.data(),
                                             dLse.data(), dValid.data(), upstream, s.n, s.vocab,
                                             dGrad.data()));
  } else {
    MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDeviceBf16(context, logits, MemoryCategory::kActivations));
    MOEWB_ASSERT_OK(crossEntropyForwardCuda(context.stream(), dLogits.data(), dTargets.data(), s.n,
                                            s.vocab, dLse.data(), dTokenLoss.data(),
                                            dLossValue.data(), dValid.data()));
    bf16* out = inPlace ? dLogits.data() : dGrad.data();
    MOEWB_ASSERT_OK(crossEntropyBackwardCuda(context.stream(), dLogits.data(), dTargets.data(),
                                             dLse.data(), dValid.data(), upstream, s.n, s.vocab,
                                             out));
    if (inPlace) dGrad = std::move(dLogits);
  }

  Tensor<double> lseWant;
  Tensor<double> logitsD = toDouble(logits);
  const double lossWant = crossEntropyForward<double>(pool, logitsD, refTargets, lseWant);
  Tensor<double> gradWant =
      crossEntropyBackward<double>(pool, logitsD, refTargets, lseWant, upstream);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context, dLse));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lossGot, toHost(context, dLossValue));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> validGot, toHost(context, dValid));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> gradGot, toHostFloat(context, dGrad));
  EXPECT_EQ(validGot[0], int32_t(validTargets(refTargets)));
  EXPECT_LT(relativeError(lseGot, toFloat(lseWant)), 1e-5);
  EXPECT_NEAR(lossGot[0], lossWant, 1e-5 * std::max(1.0, std::fabs(lossWant)));
  if (noneValid) {
    for (int64_t i = 0; i < gradGot.numel(); ++i) ASSERT_EQ(gradGot[i], 0.0f) << i;
  } else {
    EXPECT_LT(relativeError(gradGot, toFloat(gradWant)), 1e-2);
  }
}

TEST_F(CrossEntropyCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 7000;
  for (CeShape s : {CeShape{1, 5}, CeShape{63, 1000}, CeShape{130, 3001}}) {
    for (bool fp32 : {false, true}) {
      SCOPED_TRACE(testing::Message() << s.n << "x" << s.vocab << (fp32 ? " fp32" : " bf16"));
      runCase(context(), s, fp32, false, false, ++seed);
    }
    SCOPED_TRACE(testing::Message() << s.n << "x" << s.vocab << " in place");
    runCase(context(), s, false, true, false, ++seed);
  }
}

TEST_F(CrossEntropyCudaTest, NoValidTargetGivesZeroLossAndGradient) {
  runCase(context(), CeShape{17, 40}, false, false, true, 7100);
}

}  // namespace
}  // namespace moewb::engine::cuda
