// Router variants (ENGINE-MATH §5.1, §5.2): sigmoid + normalise with route scale and a
// selection-only bias, group-limited selection (hand-built cases, both score functions),
// finite-difference gradients in double of the weights and of the Switch / sequence-level aux
// losses and the z-loss.
#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"
#include "ops/router/router.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

double sigmoidOf(double v) {
  return 1 / (1 + std::exp(-v));
}

Tensor<double> rowOf(std::initializer_list<double> values) {
  Tensor<double> t({1, int64_t(values.size())});
  int64_t i = 0;
  for (double v : values) t[i++] = v;
  return t;
}

TEST(SigmoidRouter, WeightsAreScaledNormalisedScoresAndBiasOnlySelects) {
  ThreadPool pool(1);
  Tensor<double> logits = rowOf({0.0, 1.0, -1.0, 0.5});  // [1, 4]
  RouterConfig config;
  config.score = RouterScore::kSigmoid;
  config.topK = 2;
  config.routeScale = 2.5;
  RouterOutput<double> plain = routerForward(pool, logits, config);
  EXPECT_EQ(plain.topExpert[0], 1);
  EXPECT_EQ(plain.topExpert[1], 3);
  const std::vector<float> bias = {0.0f, 0.0f, 3.0f, 0.0f};  // lifts expert 2 into the top 2
  RouterOutput<double> biased = routerForward(pool, logits, config, &bias);
  ASSERT_EQ(biased.topExpert[0], 2);
  ASSERT_EQ(biased.topExpert[1], 1);
  const double s1 = sigmoidOf(1.0), s2 = sigmoidOf(-1.0);
  EXPECT_NEAR(biased.topWeight[0], 2.5 * s2 / (s1 + s2), 1e-15);  // no bias in the weight
  EXPECT_NEAR(biased.topWeight[1], 2.5 * s1 / (s1 + s2), 1e-15);
  double total = 0;
  for (int j = 0; j < 4; ++j) total += sigmoidOf(logits[j]);
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(biased.scores[j], sigmoidOf(logits[j]), 1e-15);
    EXPECT_NEAR(biased.probs[j], sigmoidOf(logits[j]) / total, 1e-15);  // bias-free too
  }
  // A bias change that keeps the selection changes nothing else, bit for bit.
  const std::vector<float> shifted = {0.25f, 0.5f, 3.5f, 0.25f};
  RouterOutput<double> again = routerForward(pool, logits, config, &shifted);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(again.topExpert[i], biased.topExpert[i]);
    EXPECT_EQ(again.topWeight[i], biased.topWeight[i]);
  }
  for (int j = 0; j < 4; ++j) EXPECT_EQ(again.probs[j], biased.probs[j]);
}

TEST(GroupLimitedRouter, KeepsTheGroupsWithTheBestTopTwoSums) {
  ThreadPool pool(1);
  // 4 groups of 2: sums of the top 2 are 0, 2, 1.8, -2. The best single expert (0) is in a
  // losing group.
  Tensor<double> logits = rowOf({5.0, -5.0, 1.0, 1.0, 0.9, 0.9, -1.0, -1.0});
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    RouterConfig config;
    config.score = score;
    config.topK = 2;
    RouterOutput<double> open = routerForward(pool, logits, config);
    EXPECT_EQ(open.topExpert[0], 0);
    config.numGroups = 4;
    config.topKGroups = 2;
    RouterOutput<double> limited = routerForward(pool, logits, config);
    EXPECT_EQ(limited.topExpert[0], 2);  // tie with 3, lower id first
    EXPECT_EQ(limited.topExpert[1], 3);
    config.topK = 4;  // all experts of groups 1 and 2
    RouterOutput<double> four = routerForward(pool, logits, config);
    EXPECT_EQ(four.topExpert[0], 2);
    EXPECT_EQ(four.topExpert[1], 3);
    EXPECT_EQ(four.topExpert[2], 4);
    EXPECT_EQ(four.topExpert[3], 5);
  }
  // The bias takes part in the group score: lifting group 3 makes it win.
  RouterConfig config;
  config.topK = 2;
  config.numGroups = 4;
  config.topKGroups = 1;
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 3.0f, 3.5f};
  RouterOutput<double> biased = routerForward(pool, logits, config, &bias);
  EXPECT_EQ(biased.topExpert[0], 7);
  EXPECT_EQ(biased.topExpert[1], 6);
}

struct VariantCase {
  RouterScore score;
  int32_t topK;
  int32_t groups;
  int32_t topKGroups;
  double routeScale;
  bool bias;
};

void checkWeightGradients(const VariantCase& c, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  const int64_t n = 7, e = 6;
  Tensor<double> logits = randomTensor<double>({n, e}, rng, 2.0);  // [N, E]
  Tensor<double> dTopWeight = randomTensor<double>({n, c.topK}, rng);
  std::vector<float> bias(static_cast<size_t>(e));
  for (float& b : bias) b = float(rng.normal());
  RouterConfig config{c.score, c.topK, c.routeScale, c.groups, c.topKGroups};
  const std::vector<float>* b = c.bias ? &bias : nullptr;
  const RouterOutput<double> route = routerForward(pool, logits, config, b);
  auto loss = [&] {
    return test::dot(routerForward(pool, logits, config, b).topWeight, dTopWeight);
  };
  Tensor<double> dLogits({n, e});
  routerTopKBackward(pool, route, dTopWeight, dLogits);
  const std::string what = std::string(c.score == RouterScore::kSigmoid ? "sigmoid" : "softmax") +
                           " k=" + std::to_string(c.topK) + " G=" + std::to_string(c.groups);
  expectGradientMatches("dLogits(weights) " + what, logits, dLogits, loss);
  // Each row's weights sum to the route scale.
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0;
    for (int32_t i = 0; i < c.topK; ++i) sum += route.topWeight.at(t, i);
    EXPECT_NEAR(sum, c.routeScale, 1e-12);
  }
  // Switch aux loss through p (softmax or s / sum s).
  const AuxLossStats stats = auxLossForward(route, 0.3);
  auto auxLoss = [&] { return auxLossForward(routerForward(pool, logits, config, b), 0.3).loss; };
  Tensor<double> dAux({n, e});
  auxLossBackward(pool, route, stats, 0.3, dAux);
  expectGradientMatches("dLogits(aux) " + what, logits, dAux, auxLoss);
}

TEST(RouterVariants, SigmoidGradientsMatchFiniteDifferences) {
  checkWeightGradients({RouterScore::kSigmoid, 1, 1, 1, 2.5, true}, 101);
  checkWeightGradients({RouterScore::kSigmoid, 2, 1, 1, 2.5, true}, 102);
  checkWeightGradients({RouterScore::kSigmoid, 6, 1, 1, 2.5, false}, 103);
}

TEST(RouterVariants, GroupLimitedAndScaledGradientsMatchFiniteDifferences) {
  checkWeightGradients({RouterScore::kSigmoid, 2, 3, 2, 1.0, true}, 104);
  checkWeightGradients({RouterScore::kSoftmax, 3, 3, 2, 1.7, true}, 105);
  checkWeightGradients({RouterScore::kSoftmax, 2, 6, 2, 1.0, false}, 106);  // groups of one
}

TEST(SeqAuxLoss, EqualsSwitchLossForOneSequenceAndMatchesHandFormula) {
  ThreadPool pool(1);
  Rng rng(111);
  const int64_t n = 9, e = 4, len = 3;
  Tensor<double> logits = randomTensor<double>({n, e}, rng, 1.5);
  const RouterOutput<double> route = routerTopK(pool, logits, 2);
  EXPECT_NEAR(seqAuxLossForward(route, 0.2, n).loss, auxLossForward(route, 0.2).loss, 1e-15);
  double expected = 0;
  for (int64_t s = 0; s < n / len; ++s) {
    for (int j = 0; j < e; ++j) {
      double count = 0, meanP = 0;
      for (int64_t t = s * len; t < (s + 1) * len; ++t) {
        count += (route.topExpert.at(t, 0) == j) + (route.topExpert.at(t, 1) == j);
        meanP += route.probs.at(t, j) / len;
      }
      expected += 0.2 * e * (count / (2 * len)) * meanP / double(n / len);
    }
  }
  EXPECT_NEAR(seqAuxLossForward(route, 0.2, len).loss, expected, 1e-15);
}

TEST(SeqAuxLoss, GradientMatchesFiniteDifferences) {
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    ThreadPool pool(2);
    Rng rng(112);
    const int64_t n = 12, e = 5, len = 4;
    Tensor<double> logits = randomTensor<double>({n, e}, rng, 2.0);
    RouterConfig config;
    config.score = score;
    config.topK = 2;
    const RouterOutput<double> route = routerForward(pool, logits, config);
    const SeqAuxLossStats stats = seqAuxLossForward(route, 0.7, len);
    auto loss = [&] {
      return seqAuxLossForward(routerForward(pool, logits, config), 0.7, len).loss;
    };
    Tensor<double> dLogits({n, e});
    seqAuxLossBackward(pool, route, stats, 0.7, dLogits);
    expectGradientMatches(score == RouterScore::kSoftmax ? "softmax seq aux" : "sigmoid seq aux",
                          logits, dLogits, loss);
  }
}

TEST(ZLoss, ValueAndGradientMatchTheFormula) {
  ThreadPool pool(2);
  Rng rng(113);
  const int64_t n = 6, e = 5;
  Tensor<double> logits = randomTensor<double>({n, e}, rng, 3.0);
  double expected = 0;
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(logits.at(t, j));
    expected += 0.05 * std::log(sum) * std::log(sum) / n;
  }
  EXPECT_NEAR(zLossForward(pool, logits, 0.05), expected, 1e-14);
  Tensor<double> dLogits({n, e});
  zLossBackward(pool, logits, 0.05, dLogits);
  expectGradientMatches("z-loss", logits, dLogits,
                        [&] { return zLossForward(pool, logits, 0.05); });
}

}  // namespace
}  // namespace moewb::engine
