// Dispatch plan (expert-major, stable, empty experts), permute / combine values, the identity-
// experts invariant, and finite-difference gradients of permute -> combine.
#include <gtest/gtest.h>

#include "grad_check.h"
#include "ops/combine/combine.h"
#include "ops/permute/permute.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

Tensor<int32_t> routing(std::initializer_list<std::initializer_list<int32_t>> rows) {
  Tensor<int32_t> top({int64_t(rows.size()), int64_t(rows.begin()->size())});
  int64_t i = 0;
  for (const auto& row : rows) {
    for (int32_t e : row) top[i++] = e;
  }
  return top;
}

TEST(Dispatch, PlanIsExpertMajorAndStableWithEmptyExperts) {
  // 4 tokens, k = 2, 5 experts; expert 3 receives nothing.
  Tensor<int32_t> top = routing({{2, 0}, {0, 4}, {2, 1}, {4, 0}});
  Dispatch plan = buildDispatch(top, 5);
  const int32_t counts[] = {3, 1, 2, 0, 2};
  const int32_t offsets[] = {0, 3, 4, 6, 6, 8};
  for (int e = 0; e < 5; ++e) EXPECT_EQ(plan.counts[e], counts[e]);
  for (int e = 0; e < 6; ++e) EXPECT_EQ(plan.offsets[e], offsets[e]);
  const int32_t rowToken[] = {0, 1, 3, 2, 0, 2, 1, 3};
  const int32_t rowSlot[] = {1, 0, 1, 1, 0, 0, 1, 0};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(plan.rowToken[r], rowToken[r]) << r;
    EXPECT_EQ(plan.rowSlot[r], rowSlot[r]) << r;
    EXPECT_EQ(plan.slotRow.at(rowToken[r], rowSlot[r]), r);
  }
}

TEST(Dispatch, IdentityExpertsReturnInputScaledBySummedWeights) {
  ThreadPool pool(2);
  Rng rng(21);
  const int64_t n = 37, k = 3, e = 6, d = 11;
  Tensor<int32_t> top({n, k});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j)
      top.at(t, j) = int32_t((t * 7 + j * 2) % (e - 1));  // expert 5 empty
  }
  Tensor<float> x = randomTensor<float>({n, d}, rng);
  Tensor<float> w = randomTensor<float>({n, k}, rng);  // arbitrary, not normalised
  Dispatch plan = buildDispatch(top, e);
  EXPECT_EQ(plan.counts[5], 0);
  Tensor<float> xPerm = permuteForward(pool, x, plan);  // identity experts: yPerm = xPerm
  Tensor<float> y = combineForward(pool, xPerm, w, plan);
  for (int64_t t = 0; t < n; ++t) {
    const float scale = w.at(t, 0) + w.at(t, 1) + w.at(t, 2);
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(y.at(t, c), x.at(t, c) * scale, 1e-5f);
  }
}

TEST(Dispatch, PermuteCombineGradientsMatchFiniteDifferences) {
  ThreadPool pool(2);
  Rng rng(22);
  const int64_t n = 5, k = 2, d = 3;
  Tensor<int32_t> top = routing({{1, 0}, {3, 1}, {0, 3}, {1, 3}, {0, 1}});  // expert 2 empty
  Dispatch plan = buildDispatch(top, 4);
  Tensor<double> x = randomTensor<double>({n, d}, rng);
  Tensor<double> w = randomTensor<double>({n, k}, rng);
  Tensor<double> rowScale = randomTensor<double>({n * k, d}, rng);  // a stand-in "expert"
  Tensor<double> dy = randomTensor<double>({n, d}, rng);
  auto expert = [&](const Tensor<double>& xPerm) {
    Tensor<double> yPerm({n * k, d});
    for (int64_t i = 0; i < yPerm.numel(); ++i) yPerm[i] = xPerm[i] * rowScale[i];
    return yPerm;
  };
  auto loss = [&] {
    return test::dot(combineForward(pool, expert(permuteForward(pool, x, plan)), w, plan), dy);
  };
  Tensor<double> yPerm = expert(permuteForward(pool, x, plan));
  Tensor<double> dYPerm, dW;
  combineBackward(pool, dy, yPerm, w, plan, dYPerm, dW);
  Tensor<double> dXPerm({n * k, d});
  for (int64_t i = 0; i < dXPerm.numel(); ++i) dXPerm[i] = dYPerm[i] * rowScale[i];
  Tensor<double> dx = permuteBackward(pool, dXPerm, plan);
  expectGradientMatches("dx", x, dx, loss);
  expectGradientMatches("dTopWeight", w, dW, loss);
}

}  // namespace
}  // namespace moewb::engine
