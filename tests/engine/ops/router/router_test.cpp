// Router: top-k order and ties, selected-weight softmax, the aux loss value, and
// finite-difference gradients (weights and aux loss) for k = 1, 2 and E.
#include "ops/router/router.h"

#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

TEST(Router, TopKIsDescendingWithTiesToLowerIdAndWeightsAreSelectedSoftmax) {
  ThreadPool pool(1);
  Tensor<float> logits({2, 4});  // [N, E]
  const float row0[] = {0.5f, 2.0f, 2.0f, -1.0f};
  const float row1[] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (int j = 0; j < 4; ++j) {
    logits.at(0, j) = row0[j];
    logits.at(1, j) = row1[j];
  }
  RouterOutput<float> route = routerTopK(pool, logits, 3);
  EXPECT_EQ(route.topExpert.at(0, 0), 1);
  EXPECT_EQ(route.topExpert.at(0, 1), 2);
  EXPECT_EQ(route.topExpert.at(0, 2), 0);
  EXPECT_EQ(route.topExpert.at(1, 0), 0);
  EXPECT_EQ(route.topExpert.at(1, 2), 2);
  const double denom = 2 * std::exp(2.0) + std::exp(0.5);
  EXPECT_NEAR(route.topWeight.at(0, 0), std::exp(2.0) / denom, 1e-6);
  EXPECT_NEAR(route.topWeight.at(0, 2), std::exp(0.5) / denom, 1e-6);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(route.probs.at(1, j), 0.25f, 1e-7);
}

TEST(Router, AuxLossEqualsAlphaForUniformProbabilities) {
  ThreadPool pool(1);
  Tensor<double> logits({6, 4});  // all zero: p = 1/E, and f sums to 1
  RouterOutput<double> route = routerTopK(pool, logits, 2);
  AuxLossStats stats = auxLossForward(route, 0.01);
  EXPECT_NEAR(stats.loss, 0.01, 1e-15);
  int64_t total = 0;
  for (int64_t c : stats.counts) total += c;
  EXPECT_EQ(total, 12);
}

TEST(Router, AuxLossMatchesHandFormula) {
  ThreadPool pool(1);
  Rng rng(11);
  Tensor<double> logits = randomTensor<double>({5, 3}, rng);
  RouterOutput<double> route = routerTopK(pool, logits, 1);
  AuxLossStats stats = auxLossForward(route, 0.5);
  double expected = 0;
  for (int e = 0; e < 3; ++e) {
    double meanP = 0, count = 0;
    for (int t = 0; t < 5; ++t) {
      meanP += route.probs.at(t, e) / 5;
      count += route.topExpert[t] == e ? 1 : 0;
    }
    expected += (count / 5) * meanP;
  }
  EXPECT_NEAR(stats.loss, 0.5 * 3 * expected, 1e-14);
}

void checkRouterGradients(int32_t topK, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  const int64_t n = 6, e = 5;
  Tensor<double> logits = randomTensor<double>({n, e}, rng, 2.0);  // [N, E] (ties unlikely)
  Tensor<double> dTopWeight = randomTensor<double>({n, topK}, rng);
  const RouterOutput<double> route = routerTopK(pool, logits, topK);
  auto weightLoss = [&] { return test::dot(routerTopK(pool, logits, topK).topWeight, dTopWeight); };
  Tensor<double> dLogits({n, e});
  routerTopKBackward(pool, route, dTopWeight, dLogits);
  expectGradientMatches("dLogits(weights) k=" + std::to_string(topK), logits, dLogits, weightLoss);

  const double alpha = 0.3;
  const AuxLossStats stats = auxLossForward(route, alpha);
  auto auxLoss = [&] {
    // f (the counts) is a constant of the routing decision; FD steps do not change top-k.
    RouterOutput<double> r = routerTopK(pool, logits, topK);
    return auxLossForward(r, alpha).loss;
  };
  Tensor<double> dAux({n, e});
  auxLossBackward(pool, route, stats, alpha, dAux);
  expectGradientMatches("dLogits(aux) k=" + std::to_string(topK), logits, dAux, auxLoss);
}

TEST(Router, GradientsMatchFiniteDifferencesTopK2) {
  checkRouterGradients(2, 12);
}
TEST(Router, GradientsMatchFiniteDifferencesTopK1) {
  checkRouterGradients(1, 13);
}
TEST(Router, GradientsMatchFiniteDifferencesTopKAll) {
  checkRouterGradients(5, 14);
}

}  // namespace
}  // namespace moewb::engine
