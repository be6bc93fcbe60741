// RMSNorm: values against the formula and finite-difference gradients of x and the gain.
#include "ops/rmsnorm/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

TEST(RmsNorm, MatchesFormula) {
  ThreadPool pool(2);
  Rng rng(3);
  Tensor<float> x = randomTensor<float>({3, 63}, rng, 3.0);  // [N, D]
  Tensor<float> gain = randomTensor<float>({63}, rng);
  Tensor<float> rstd;
  Tensor<float> y = rmsNormForward(pool, x, gain, 1e-5, rstd);
  for (int64_t i = 0; i < 3; ++i) {
    double sumSq = 0;
    for (int64_t j = 0; j < 63; ++j) sumSq += double(x.at(i, j)) * x.at(i, j);
    const double r = 1.0 / std::sqrt(sumSq / 63 + 1e-5);
    EXPECT_NEAR(rstd[i], r, 1e-5 * r);
    for (int64_t j = 0; j < 63; ++j) EXPECT_NEAR(y.at(i, j), x.at(i, j) * r * gain[j], 1e-5);
  }
}

TEST(RmsNorm, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  Rng rng(4);
  Tensor<double> x = randomTensor<double>({5, 7}, rng);  // [N, D]
  Tensor<double> gain = randomTensor<double>({7}, rng);
  Tensor<double> weights = randomTensor<double>({5, 7}, rng);
  auto loss = [&] {
    Tensor<double> rstd;
    return test::dot(rmsNormForward(pool, x, gain, 1e-5, rstd), weights);
  };
  Tensor<double> rstd;
  Tensor<double> y = rmsNormForward(pool, x, gain, 1e-5, rstd);
  Tensor<double> dGain({7});
  Tensor<double> dx = rmsNormBackward(pool, weights, x, gain, rstd, dGain);
  expectGradientMatches("dx", x, dx, loss);
  expectGradientMatches("dGain", gain, dGain, loss);
}

}  // namespace
}  // namespace moewb::engine
