// Cross-entropy: value against the formula (also with huge logits) and finite-difference
// gradient in double.
#include "ops/cross_entropy/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

TEST(CrossEntropy, MatchesFormulaAndSurvivesHugeLogits) {
  ThreadPool pool(2);
  Tensor<float> logits({2, 3});
  const float values[] = {1000.0f, 1001.0f, 999.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 6; ++i) logits[i] = values[i];
  Tensor<int32_t> targets({2});
  targets[0] = 0;
  targets[1] = 2;
  Tensor<float> lse;
  const double loss = crossEntropyForward(pool, logits, targets, lse);
  const double lse0 = 1001.0 + std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));
  const double expected = ((lse0 - 1000.0) + std::log(3.0)) / 2;
  EXPECT_NEAR(loss, expected, 1e-4);
  Tensor<float> dLogits = crossEntropyBackward(pool, logits, targets, lse, 1.0);
  for (int t = 0; t < 2; ++t) {
    float sum = 0;
    for (int v = 0; v < 3; ++v) sum += dLogits.at(t, v);
    EXPECT_NEAR(sum, 0.0f, 1e-4f);  // fp32 logits near 1000 carry ~6e-5 absolute error
    EXPECT_TRUE(std::isfinite(dLogits.at(t, 0)));
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  Rng rng(41);
  Tensor<double> logits = randomTensor<double>({4, 7}, rng, 2.0);  // [N, V]
  Tensor<int32_t> targets({4});
  const int32_t ids[] = {3, 0, 6, 3};
  for (int i = 0; i < 4; ++i) targets[i] = ids[i];
  auto loss = [&] {
    Tensor<double> lse;
    return crossEntropyForward(pool, logits, targets, lse);
  };
  Tensor<double> lse;
  crossEntropyForward(pool, logits, targets, lse);
  Tensor<double> dLogits = crossEntropyBackward(pool, logits, targets, lse, 1.0);
  expectGradientMatches("dLogits", logits, dLogits, loss);
}

}  // namespace
}  // namespace moewb::engine
