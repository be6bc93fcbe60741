// Expert-side variants (ENGINE-MATH §5.6-5.8): SiTU-GLU values and derivatives in the clipping
// region (|g| >> beta1, |u| >> beta2), grouped experts and the dense shared FFN with SiTU under
// finite differences, n shared experts == one fused FFN of width n F_s, and the shared-expert
// and latent MoE layers (incl. the post-aggregation RMSNorm and the scatter-add of the k gathered
// copies of u) against finite differences and the per-expert-loop oracle.
#include <gtest/gtest.h>

#include <cmath>

#include "moe_test_util.h"
#include "ops/experts/experts.h"
#include "ops/experts/glu_activation.h"
#include "ops/dense_ffn/dense_ffn.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

GluParams situ() {
  return GluParams{GluKind::kSitu, 4.0, 25.0};
}

TEST(Situ, ValuesFollowTheFormulaAndClip) {
  const double g[] = {-30.0, -3.0, 0.0, 2.0, 40.0};
  const double u[] = {-200.0, -10.0, 1.0, 30.0, 500.0};
  double h[5], hSwiglu[5];
  gluForward(situ(), g, u, h, 5);
  gluForward(GluParams{}, g, u, hSwiglu, 5);
  for (int i = 0; i < 5; ++i) {
    const double s = 1 / (1 + std::exp(-g[i]));
    EXPECT_NEAR(h[i], 4 * std::tanh(g[i] / 4) * s * 25 * std::tanh(u[i] / 25), 1e-12);
  }
  EXPECT_NEAR(h[4], 4.0 * 25.0, 1e-3);          // both branches saturate
  EXPECT_GT(std::abs(hSwiglu[4] - h[4]), 1e4);  // far from SwiGLU there
  // Larger betas tend to SwiGLU.
  const GluParams wide{GluKind::kSitu, 1e4, 1e6};
  double hWide[5];
  gluForward(wide, g, u, hWide, 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(hWide[i], hSwiglu[i], 1e-3 * (1 + std::abs(hSwiglu[i])));
}

TEST(Situ, DerivativesMatchFiniteDifferencesInTheClippingRegion) {
  Rng rng(301);
  const int64_t n = 200;
  Tensor<double> g = randomTensor<double>({n}, rng, 8.0);   // |g| up to ~20 >> beta1 = 4
  Tensor<double> u = randomTensor<double>({n}, rng, 40.0);  // |u| up to ~100 >> beta2 = 25
  Tensor<double> r = randomTensor<double>({n}, rng);
  int clipped = 0;
  for (int64_t i = 0; i < n; ++i) clipped += std::abs(g[i]) > 8 && std::abs(u[i]) > 50;
  EXPECT_GE(clipped, 5);
  auto loss = [&] {
    Tensor<double> h({n});
    gluForward(situ(), g.data(), u.data(), h.data(), n);
    return test::dot(h, r);
  };
  Tensor<double> dg = r.clone(), du({n});
  gluBackward(situ(), g.data(), u.data(), dg.data(), du.data(), n);
  expectGradientMatches("situ dg", g, dg, loss, {}, 1e-6, 1e-7);
  expectGradientMatches("situ du", u, du, loss, {}, 1e-6, 1e-7);
}

TEST(Situ, GroupedExpertsGradientsMatchFiniteDifferencesWithLargeInputs) {
  ThreadPool pool(2);
  Rng rng(302);
  const int64_t e = 3, d = 4, f = 5;
  Tensor<int32_t> offsets({e + 1});
  const int32_t bounds[] = {0, 3, 3, 7};  // expert 1 empty
  for (int i = 0; i < 4; ++i) offsets[i] = bounds[i];
  Tensor<double> x = randomTensor<double>({7, d}, rng, 6.0);
  Tensor<double> gate = randomTensor<double>({e, f, d}, rng, 1.5);  // g ~ N(0, 18^2)
  Tensor<double> up = randomTensor<double>({e, f, d}, rng, 6.0);    // u ~ N(0, 72^2)
  Tensor<double> down = randomTensor<double>({e, d, f}, rng, 0.5);
  Tensor<double> dy = randomTensor<double>({7, d}, rng);
  auto loss = [&] {
    ExpertsSaved<double> saved;
    return test::dot(expertsForward(pool, x, offsets, {gate, up, down}, saved, situ()), dy);
  };
  ExpertsSaved<double> saved;
  expertsForward(pool, x, offsets, {gate, up, down}, saved, situ());
  int clipped = 0;
  for (int64_t i = 0; i < saved.gatePre.numel(); ++i) {
    clipped += std::abs(saved.gatePre[i]) > 8 && std::abs(saved.upPre[i]) > 50;
  }
  EXPECT_GE(clipped, 3);
  Tensor<double> dGate({e, f, d}), dUp({e, f, d}), dDown({e, d, f});
  Tensor<double> dx = expertsBackward(pool, dy, x, offsets, {gate, up, down}, saved,
                                      ExpertGrads<double>{dGate, dUp, dDown}, situ());
  expectGradientMatches("situ experts dx", x, dx, loss);
  expectGradientMatches("situ experts dGate", gate, dGate, loss);
  expectGradientMatches("situ experts dUp", up, dUp, loss);
  expectGradientMatches("situ experts dDown", down, dDown, loss);
}

void checkDenseFfn(const GluParams& act, double inputScale, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  const int64_t n = 5, d = 4, f = 6;
  Tensor<double> x = randomTensor<double>({n, d}, rng, inputScale);
  Tensor<double> gate = randomTensor<double>({f, d}, rng, 1.0);
  Tensor<double> up = randomTensor<double>({f, d}, rng, 3.0);
  Tensor<double> down = randomTensor<double>({d, f}, rng, 0.5);
  Tensor<double> dy = randomTensor<double>({n, d}, rng);
  auto loss = [&] {
    DenseFfnSaved<double> saved;
    Tensor<double> y({n, d});
    denseFfnForward(pool, x, {gate, up, down}, act, saved, y);
    return test::dot(y, dy);
  };
  DenseFfnSaved<double> saved;
  Tensor<double> y({n, d});
  denseFfnForward(pool, x, {gate, up, down}, act, saved, y);
  Tensor<double> dGate({f, d}), dUp({f, d}), dDown({d, f}), dx({n, d});
  denseFfnBackward(pool, dy, x, {gate, up, down}, act, saved, {dGate, dUp, dDown}, dx);
  const std::string what = act.kind == GluKind::kSitu ? "situ" : "swiglu";
  expectGradientMatches("dense " + what + " dx", x, dx, loss);
  expectGradientMatches("dense " + what + " dGate", gate, dGate, loss);
  expectGradientMatches("dense " + what + " dUp", up, dUp, loss);
  expectGradientMatches("dense " + what + " dDown", down, dDown, loss);
}

TEST(SharedExperts, DenseFfnGradientsMatchFiniteDifferences) {
  checkDenseFfn(GluParams{}, 1.0, 303);
  checkDenseFfn(situ(), 8.0, 304);  // reaches the clipping region
}

TEST(SharedExperts, FusedWidthEqualsTheSumOfSeparateExperts) {
  ThreadPool pool(2);
  Rng rng(305);
  const int64_t n = 9, d = 6, fs = 4, shared = 3;
  Tensor<double> x = randomTensor<double>({n, d}, rng);
  Tensor<double> gate = randomTensor<double>({shared * fs, d}, rng);
  Tensor<double> up = randomTensor<double>({shared * fs, d}, rng);
  Tensor<double> down = randomTensor<double>({d, shared * fs}, rng);
  DenseFfnSaved<double> saved;
  Tensor<double> fused({n, d});
  denseFfnForward(pool, x, {gate, up, down}, situ(), saved, fused);
  Tensor<double> sum({n, d});
  for (int64_t j = 0; j < shared; ++j) {  // expert j: hidden rows j fs .. (j+1) fs - 1
    Tensor<double> g({fs, d}), u({fs, d}), dn({d, fs});
    for (int64_t i = 0; i < fs * d; ++i) {
      g[i] = gate[j * fs * d + i];
      u[i] = up[j * fs * d + i];
    }
    for (int64_t c = 0; c < d; ++c) {
      for (int64_t i = 0; i < fs; ++i) dn.at(c, i) = down.at(c, j * fs + i);
    }
    DenseFfnSaved<double> s;
    denseFfnForward(pool, x, {g, u, dn}, situ(), s, sum);
  }
  for (int64_t i = 0; i < fused.numel(); ++i) EXPECT_NEAR(fused[i], sum[i], 1e-12);
}

MoeOptions sharedOptions() {
  MoeOptions o;
  o.topK = 2;
  o.auxLossCoef = 0.1;
  o.numSharedExperts = 2;
  o.sharedDFf = 3;
  return o;
}

TEST(SharedExperts, MoeLayerMatchesFiniteDifferencesAndOracle) {
  const MoeOptions o = sharedOptions();
  test::expectMatchesOracle("shared", o, 7, 5, 4, 6, 306);
  ThreadPool pool(2);
  Rng rng(307);
  test::MoeParams<double> p(o, 5, 4, 6);
  p.randomize(rng, 0.6, 1.0);
  Tensor<double> x = randomTensor<double>({7, 5}, rng);
  Tensor<double> dy = randomTensor<double>({7, 5}, rng);
  test::expectMoeGradientsMatch("shared", pool, x, p, dy);
}

MoeOptions latentOptions(int32_t topK) {
  MoeOptions o;
  o.topK = topK;
  o.auxLossCoef = 0.1;
  o.latentDim = 3;
  return o;
}

TEST(LatentMoe, GradientsMatchFiniteDifferencesIncludingNormAndScatterAdd) {
  for (int32_t k : {1, 2, 4}) {  // k = E: every token's u is gathered 4 times
    ThreadPool pool(2);
    Rng rng(308 + uint64_t(k));
    const MoeOptions o = latentOptions(k);
    test::MoeParams<double> p(o, 6, 4, 5);
    p.randomize(rng, 0.6, 1.0);
    Tensor<double> x = randomTensor<double>({7, 6}, rng);
    Tensor<double> dy = randomTensor<double>({7, 6}, rng);
    test::expectMoeGradientsMatch("latent k=" + std::to_string(k), pool, x, p, dy);
  }
}

TEST(LatentMoe, MatchesOracleAndExpertsSeeLatentWidth) {
  for (int32_t k : {1, 2, 4})
    test::expectMatchesOracle("latent k=" + std::to_string(k), latentOptions(k), 7, 6, 4, 5, 311);
  ThreadPool pool(1);
  Rng rng(312);
  const MoeOptions o = latentOptions(2);
  test::MoeParams<double> p(o, 6, 4, 5);
  p.randomize(rng, 0.6, 1.0);
  Tensor<double> x = randomTensor<double>({7, 6}, rng);
  MoeSaved<double> saved;
  Tensor<double> y = moeFfnForward(pool, x, p.weights(), o, saved);
  EXPECT_EQ(saved.xPerm.dim(1), 3);  // permute carries D_lat
  EXPECT_EQ(saved.latentIn.dim(1), 3);
  EXPECT_EQ(y.dim(1), 6);
  for (int64_t t = 0; t < 7; ++t) {  // RMSNorm_lat: unit RMS (up to eps) before the gain
    double ms = 0, msIn = 0;
    for (int64_t c = 0; c < 3; ++c) {
      const double v = saved.latentOut.at(t, c) / p.latentNorm[c];
      ms += v * v / 3;
      msIn += saved.latentPre.at(t, c) * saved.latentPre.at(t, c) / 3;
    }
    EXPECT_NEAR(ms, msIn / (msIn + o.latentNormEps), 1e-12);
  }
}

TEST(LatentMoe, K3StyleLayerMatchesFiniteDifferencesAndOracle) {
  // Sigmoid router with route scale, SiTU in the routed and shared experts, latent + shared.
  MoeOptions o = latentOptions(2);
  o.routerScore = RouterScore::kSigmoid;
  o.routeScale = 2.5;
  o.activation = GluKind::kSitu;
  o.situBeta1 = 2.0;  // small betas so the test inputs reach the clipping region
  o.situBeta2 = 1.5;
  o.numSharedExperts = 2;
  o.sharedDFf = 2;
  o.zLossCoef = 0.01;
  test::expectMatchesOracle("k3", o, 8, 6, 4, 5, 313, 2.0, 0.8);
  ThreadPool pool(2);
  Rng rng(314);
  test::MoeParams<double> p(o, 6, 4, 5);
  p.randomize(rng, 0.8, 1.0);
  Tensor<double> x = randomTensor<double>({8, 6}, rng, 2.0);
  Tensor<double> dy = randomTensor<double>({8, 6}, rng);
  ExpertBias bias = makeExpertBias(4);
  bias.bias = {0.3f, -0.2f, 0.0f, 0.1f};
  test::expectMoeGradientsMatch("k3", pool, x, p, dy, &bias);
}

}  // namespace
}  // namespace moewb::engine
