// KDA gate (both variants), short causal conv + SiLU and per-head L2 norm: values against the
// formulas, finite-difference gradients in double, conv causality per sequence.
#include "ops/kda/kda_gate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kda_test_util.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

double softplusRef(double x) {
  return std::log(1.0 + std::exp(x));
}
double sigmoidRef(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

void checkGate(KdaGateKind kind) {
  ThreadPool pool(2);
  Rng rng(kind == KdaGateKind::kDefault ? 3 : 4);
  const KdaGateParams params{kind, -5.0, 3, 4};
  const int64_t n = 70, width = 12;  // more rows than one row tile
  Tensor<double> f = randomTensor<double>({n, width}, rng, 2.0);
  Tensor<double> aLog = randomTensor<double>({3}, rng, 0.8);
  Tensor<double> dtBias = randomTensor<double>({width}, rng, 0.5);
  Tensor<double> r = randomTensor<double>({n, width}, rng);
  Tensor<double> g = kdaGateForward(pool, params, f, aLog, dtBias);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t c = 0; c < width; ++c) {
      const double a = std::exp(aLog[c / 4]), z = f.at(row, c) + dtBias[c];
      const double want =
          kind == KdaGateKind::kDefault ? -a * softplusRef(z) : -5.0 * sigmoidRef(a * z);
      EXPECT_NEAR(g.at(row, c), want, 1e-12);
      EXPECT_LT(g.at(row, c), 0.0);
      if (kind == KdaGateKind::kLowerBound) {
        EXPECT_GT(g.at(row, c), -5.0);
      }
    }
  }
  auto loss = [&] { return test::dot(kdaGateForward(pool, params, f, aLog, dtBias), r); };
  Tensor<double> dALog({3}), dDtBias({width});
  Tensor<double> df = kdaGateBackward(pool, params, r, f, g, aLog, dtBias, dALog, dDtBias);
  expectGradientMatches("df", f, df, loss);
  expectGradientMatches("dA_log", aLog, dALog, loss);
  expectGradientMatches("ddt_bias", dtBias, dDtBias, loss);
}

TEST(KdaGate, DefaultGateValuesAndGradients) {
  checkGate(KdaGateKind::kDefault);
}

TEST(KdaGate, LowerBoundGateValuesAndGradients) {
  checkGate(KdaGateKind::kLowerBound);
}

TEST(KdaGate, SoftplusIsStableForLargeInputs) {
  ThreadPool pool(1);
  const KdaGateParams params{KdaGateKind::kDefault, -5.0, 1, 2};
  Tensor<float> f({1, 2}), aLog({1}), dtBias({2});
  f[0] = 200.0f;
  f[1] = -200.0f;
  Tensor<float> g = kdaGateForward(pool, params, f, aLog, dtBias);
  EXPECT_FLOAT_EQ(g[0], -200.0f);
  EXPECT_LE(g[1], 0.0f);
  EXPECT_TRUE(std::isfinite(g[1]));
}

TEST(KdaShortConv, MatchesDirectSumAndGradients) {
  ThreadPool pool(2);
  Rng rng(9);
  const int64_t batch = 2, seqLen = 7, ch = 5, taps = 4, n = batch * seqLen;
  Tensor<double> x = randomTensor<double>({n, ch}, rng);
  Tensor<double> w = randomTensor<double>({ch, taps}, rng, 0.7);
  Tensor<double> r = randomTensor<double>({n, ch}, rng);
  Tensor<double> pre;
  Tensor<double> y = kdaShortConvForward(pool, batch, seqLen, x, w, pre);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seqLen; ++t) {
      for (int64_t c = 0; c < ch; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < taps; ++j) {
          const int64_t src = t - (taps - 1) + j;
          if (src >= 0) sum += w.at(c, j) * x.at(b * seqLen + src, c);
        }
        EXPECT_NEAR(pre.at(b * seqLen + t, c), sum, 1e-12);
        EXPECT_NEAR(y.at(b * seqLen + t, c), sum * sigmoidRef(sum), 1e-12);
      }
    }
  }
  auto loss = [&] {
    Tensor<double> p;
    return test::dot(kdaShortConvForward(pool, batch, seqLen, x, w, p), r);
  };
  Tensor<double> dw({ch, taps});
  Tensor<double> dx = kdaShortConvBackward(pool, batch, seqLen, r, x, w, pre, dw);
  expectGradientMatches("dx", x, dx, loss);
  expectGradientMatches("dw", w, dw, loss);
}

TEST(KdaShortConv, IsCausalWithinEachSequence) {
  ThreadPool pool(1);
  Rng rng(10);
  const int64_t batch = 2, seqLen = 9, ch = 3;
  Tensor<double> x = randomTensor<double>({batch * seqLen, ch}, rng);
  Tensor<double> w = randomTensor<double>({ch, 4}, rng);
  Tensor<double> pre;
  Tensor<double> before = kdaShortConvForward(pool, batch, seqLen, x, w, pre);
  x.at(4, 1) += 1.0;  // sequence 0, token 4, channel 1
  Tensor<double> after = kdaShortConvForward(pool, batch, seqLen, x, w, pre);
  for (int64_t row = 0; row < batch * seqLen; ++row) {
    for (int64_t c = 0; c < ch; ++c) {
      const bool mayChange = c == 1 && row >= 4 && row <= 7;  // taps reach 3 tokens ahead
      if (mayChange) {
        EXPECT_NE(after.at(row, c), before.at(row, c)) << row;
      } else {
        EXPECT_EQ(after.at(row, c), before.at(row, c)) << row << "," << c;
      }
    }
  }
}

TEST(KdaL2Norm, UnitNormsTimesScaleAndGradients) {
  ThreadPool pool(2);
  Rng rng(12);
  const int64_t n = 67, headDim = 5, heads = 3;
  const double scale = 0.5, eps = 1e-6;
  Tensor<double> x = randomTensor<double>({n, heads * headDim}, rng);
  Tensor<double> r = randomTensor<double>({n, heads * headDim}, rng);
  Tensor<double> rinv;
  Tensor<double> y = kdaL2NormForward(pool, headDim, scale, eps, x, rinv);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t h = 0; h < heads; ++h) {
      double sumSq = 0;
      for (int64_t d = 0; d < headDim; ++d)
        sumSq += y.at(row, h * headDim + d) * y.at(row, h * headDim + d);
      EXPECT_NEAR(std::sqrt(sumSq), scale, 1e-6);
    }
  }
  auto loss = [&] {
    Tensor<double> ri;
    return test::dot(kdaL2NormForward(pool, headDim, scale, eps, x, ri), r);
  };
  Tensor<double> dx = kdaL2NormBackward(pool, headDim, scale, r, x, rinv);
  expectGradientMatches("dx", x, dx, loss);
}

}  // namespace
}  // namespace moewb::engine
