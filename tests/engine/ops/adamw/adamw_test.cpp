// AdamW against hand-computed numbers, the warm-up schedule, and global-norm clipping.
#include "ops/adamw/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "train/optimizer.h"

namespace moewb::engine {
namespace {

TEST(AdamW, TwoStepsMatchHandComputation) {
  ThreadPool pool(1);
  double p[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double g1[2] = {0.5, 0.1}, g2[2] = {-0.3, 0.2};
  AdamWHyper hyper;
  hyper.lr = 0.1;
  hyper.beta1 = 0.9;
  hyper.beta2 = 0.999;
  hyper.eps = 1e-8;
  hyper.weightDecay = 0.01;
  hyper.step = 1;
  adamwUpdate(pool, p, g1, m, v, 2, hyper, true, 1.0);
  // Step 1: m = 0.1 g, v = 0.001 g^2, bias correction gives mHat = g, vHat = g^2.
  EXPECT_NEAR(p[0], 1.0 * (1 - 0.1 * 0.01) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p[1], -2.0 * (1 - 0.1 * 0.01) - 0.1 * 0.1 / (0.1 + 1e-8), 1e-15);
  const double p1[2] = {p[0], p[1]};
  hyper.step = 2;
  adamwUpdate(pool, p, g2, m, v, 2, hyper, true, 1.0);
  for (int i = 0; i < 2; ++i) {
    const double mi = 0.9 * (0.1 * g1[i]) + 0.1 * g2[i];
    const double vi = 0.999 * (0.001 * g1[i] * g1[i]) + 0.001 * g2[i] * g2[i];
    const double mHat = mi / (1 - 0.9 * 0.9), vHat = vi / (1 - 0.999 * 0.999);
    EXPECT_NEAR(m[i], mi, 1e-15);
    EXPECT_NEAR(v[i], vi, 1e-15);
    EXPECT_NEAR(p[i], p1[i] * (1 - 0.001) - 0.1 * mHat / (std::sqrt(vHat) + 1e-8), 1e-14);
  }
}

TEST(AdamW, NoDecayForGainsAndGradScaleApplies) {
  ThreadPool pool(1);
  float p[1] = {3.0f}, m[1] = {0}, v[1] = {0};
  const float g[1] = {2.0f};
  AdamWHyper hyper;
  hyper.lr = 0.5;
  hyper.weightDecay = 0.1;
  hyper.step = 1;
  adamwUpdate(pool, p, g, m, v, 1, hyper, false, 0.25);
  EXPECT_NEAR(m[0], (1 - 0.9) * 0.5f, 1e-7);  // scaled gradient 0.5
  EXPECT_NEAR(p[0], 3.0f - 0.5f * 0.5f / (0.5f + 1e-8f), 1e-6);
}

TEST(Optimizer, LinearWarmUpThenConstant) {
  OptimSection optim;
  optim.lr = 1e-3;
  optim.warmupSteps = 4;
  EXPECT_DOUBLE_EQ(learningRate(optim, 0), 0.25e-3);
  EXPECT_DOUBLE_EQ(learningRate(optim, 3), 1e-3);
  EXPECT_DOUBLE_EQ(learningRate(optim, 100), 1e-3);
  optim.warmupSteps = 0;
  EXPECT_DOUBLE_EQ(learningRate(optim, 0), 1e-3);
}

TEST(Optimizer, ClipsByGlobalNorm) {
  ThreadPool pool(2);
  std::vector<Parameter<double>> params(2);
  for (auto& param : params) {
    param.value = Tensor<double>({1});
    param.grad = Tensor<double>({1});
    param.adamM = Tensor<double>({1});
    param.adamV = Tensor<double>({1});
  }
  params[0].grad[0] = 3;
  params[1].grad[0] = 4;
  EXPECT_DOUBLE_EQ(globalGradNorm(pool, params), 5.0);
  OptimSection optim;
  optim.gradClip = 1.0;
  optim.warmupSteps = 0;
  OptimizerStepResult result = optimizerStep(pool, params, optim, 0, 5.0);
  EXPECT_DOUBLE_EQ(result.gradNorm, 5.0);
  EXPECT_NEAR(result.clipScale, 1.0 / 5.0, 1e-6);
  EXPECT_NEAR(params[0].adamM[0], 0.1 * 3 / 5.0, 1e-7);
  optim.gradClip = 10.0;
  EXPECT_EQ(optimizerStep(pool, params, optim, 1, 5.0).clipScale, 1.0);
}

}  // namespace
}  // namespace moewb::engine
