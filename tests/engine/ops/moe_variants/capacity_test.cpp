// Capacity and token dropping (ENGINE-MATH §5.5): the capacity formula, which pairs each policy
// drops on a hand-built case, the dispatch plan without the dropped pairs, the identity-experts
// invariant with drops, and the whole MoE layer with drops against the per-expert-loop oracle
// with the same mask (values and gradients) plus its own finite differences.
#include "ops/capacity/capacity.h"

#include <gtest/gtest.h>

#include "moe_test_util.h"
#include "ops/combine/combine.h"
#include "ops/permute/permute.h"

namespace moewb::engine {
namespace {

using test::randomTensor;

TEST(Capacity, FormulaIsCeilOfTokensTimesKOverExpertsTimesFactor) {
  EXPECT_EQ(expertCapacity(10, 2, 4, 1.0), 5);
  EXPECT_EQ(expertCapacity(10, 2, 4, 1.25), 7);  // ceil(6.25)
  EXPECT_EQ(expertCapacity(7, 1, 4, 1.0), 2);    // ceil(1.75)
  EXPECT_EQ(expertCapacity(10, 2, 4, 0.0), -1);  // dropless
  EXPECT_EQ(expertCapacity(10, 2, 4, -1.0), -1);
}

// 5 tokens, k = 2, 3 experts. Expert 0 gets 5 pairs, expert 1 three, expert 2 two.
struct HandCase {
  Tensor<int32_t> top{5, 2};
  Tensor<double> weight{5, 2};
  HandCase() {
    const int32_t ids[] = {0, 1, 0, 2, 1, 0, 0, 1, 2, 0};
    const double w[] = {0.6, 0.4, 0.7, 0.3, 0.55, 0.45, 0.9, 0.1, 0.8, 0.2};
    for (int i = 0; i < 10; ++i) {
      top[i] = ids[i];
      weight[i] = w[i];
    }
  }
};

void expectKeep(const CapacityMask& mask, std::initializer_list<int> keep) {
  int i = 0;
  for (int k : keep) {
    EXPECT_EQ(int(mask.keep[i]), k) << "pair " << i;
    ++i;
  }
}

TEST(Capacity, PositionPolicyKeepsTheEarliestTokens) {
  HandCase c;
  CapacityMask mask = capacityMask(c.top, c.weight, 3, 2, DropPolicy::kPosition);
  // Expert 0 keeps tokens 0, 1; expert 1 keeps tokens 0, 2; expert 2 keeps both.
  expectKeep(mask, {1, 1, 1, 1, 1, 0, 0, 0, 1, 0});
  EXPECT_EQ(mask.dropped, (std::vector<int64_t>{3, 1, 0}));
}

TEST(Capacity, ProbsPolicyKeepsTheLargestWeights) {
  HandCase c;
  CapacityMask mask = capacityMask(c.top, c.weight, 3, 2, DropPolicy::kProbs);
  // Expert 0 keeps 0.9 (token 3) and 0.7 (token 1); expert 1 keeps 0.55 (token 2), 0.4 (token 0).
  expectKeep(mask, {0, 1, 1, 1, 1, 0, 1, 0, 1, 0});
  EXPECT_EQ(mask.dropped, (std::vector<int64_t>{3, 1, 0}));
  // Ties go to the earlier token.
  Tensor<int32_t> top({3, 1});
  Tensor<double> w({3, 1});
  w.fill(0.5);
  CapacityMask tie = capacityMask(top, w, 1, 2, DropPolicy::kProbs);
  expectKeep(tie, {1, 1, 0});
}

TEST(Capacity, PlanSkipsDroppedPairsAndIdentityExpertsScaleByKeptWeights) {
  ThreadPool pool(2);
  Rng rng(201);
  HandCase c;
  CapacityMask mask = capacityMask(c.top, c.weight, 3, 2, DropPolicy::kProbs);
  Dispatch plan = buildDispatch(c.top, 3, &mask.keep);
  EXPECT_EQ(plan.rows(), 6);
  for (int e = 0; e < 3; ++e) EXPECT_EQ(plan.counts[e], 2);
  EXPECT_EQ(plan.slotRow.at(0, 0), -1);
  EXPECT_EQ(plan.slotRow.at(4, 1), -1);
  Tensor<double> x = randomTensor<double>({5, 4}, rng);
  Tensor<double> y = combineForward(pool, permuteForward(pool, x, plan), c.weight, plan);
  for (int64_t t = 0; t < 5; ++t) {
    double scale = 0;
    for (int j = 0; j < 2; ++j) scale += mask.keep.at(t, j) ? c.weight.at(t, j) : 0.0;
    for (int64_t col = 0; col < 4; ++col) EXPECT_NEAR(y.at(t, col), x.at(t, col) * scale, 1e-15);
  }
  // The backward gives dropped pairs no weight gradient and their token no expert gradient.
  Tensor<double> dy = randomTensor<double>({5, 4}, rng);
  Tensor<double> dYPerm, dW;
  combineBackward(pool, dy, permuteForward(pool, x, plan), c.weight, plan, dYPerm, dW);
  EXPECT_EQ(dW.at(0, 0), 0.0);
  EXPECT_EQ(dW.at(4, 1), 0.0);
  EXPECT_NE(dW.at(0, 1), 0.0);
}

MoeOptions capacityOptions(DropPolicy policy, double factor) {
  MoeOptions o;
  o.topK = 2;
  o.auxLossCoef = 0.1;
  o.capacityFactor = factor;
  o.dropPolicy = policy;
  return o;
}

TEST(CapacityMoe, DropsAreReportedAndRowsMatch) {
  ThreadPool pool(2);
  Rng rng(202);
  const int64_t n = 16, d = 6, e = 4, f = 5;
  for (DropPolicy policy : {DropPolicy::kProbs, DropPolicy::kPosition}) {
    const MoeOptions o = capacityOptions(policy, 0.75);
    test::MoeParams<double> p(o, d, e, f);
    p.randomize(rng, 0.6, 2.0);
    Tensor<double> x = randomTensor<double>({n, d}, rng);
    MoeSaved<double> saved;
    moeFfnForward(pool, x, p.weights(), o, saved);
    EXPECT_EQ(saved.aux.capacity, 6);  // ceil(16 * 2 / 4 * 0.75)
    int64_t dropped = 0, routed = 0;
    for (int64_t j = 0; j < e; ++j) {
      dropped += saved.aux.dropped[size_t(j)];
      routed += saved.aux.counts[size_t(j)];
      EXPECT_EQ(saved.aux.counts[size_t(j)] - saved.aux.dropped[size_t(j)],
                std::min<int64_t>(6, saved.aux.counts[size_t(j)]));
    }
    EXPECT_EQ(routed, n * 2);
    EXPECT_GT(dropped, 0);
    EXPECT_EQ(saved.plan.rows(), n * 2 - dropped);
  }
}

TEST(CapacityMoe, MatchesPerExpertLoopWithTheSameMaskAndFiniteDifferences) {
  for (DropPolicy policy : {DropPolicy::kProbs, DropPolicy::kPosition}) {
    const std::string what = policy == DropPolicy::kProbs ? "probs" : "position";
    const MoeOptions o = capacityOptions(policy, 0.6);
    test::expectMatchesOracle("capacity " + what, o, 10, 5, 4, 6, 203);
    ThreadPool pool(2);
    Rng rng(204);
    test::MoeParams<double> p(o, 5, 4, 6);
    p.randomize(rng, 0.6, 2.0);
    Tensor<double> x = randomTensor<double>({10, 5}, rng);
    Tensor<double> dy = randomTensor<double>({10, 5}, rng);
    test::expectMoeGradientsMatch("capacity " + what, pool, x, p, dy);
  }
}

}  // namespace
}  // namespace moewb::engine
