// Causal attention: finite-difference gradients of x and all four projections in double, exact
// causality (outputs at t ignore inputs after t and other sequences), and float vs double.
#include "ops/attention/attention.h"

#include <gtest/gtest.h>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

struct AttentionFixture {
  explicit AttentionFixture(uint64_t seed, double weightStd = 0.6)
      : rng(seed),
        x(randomTensor<double>({dims.tokens(), dims.dModel()}, rng)),
        wq(randomTensor<double>({6, 6}, rng, weightStd)),
        wk(randomTensor<double>({6, 6}, rng, weightStd)),
        wv(randomTensor<double>({6, 6}, rng, weightStd)),
        wo(randomTensor<double>({6, 6}, rng, weightStd)) {}
  AttentionWeights<double> weights() const { return {wq, wk, wv, wo}; }

  AttentionDims dims{2, 5, 2, 3};  // B, T, H, K; D = 6
  Rng rng;
  Tensor<double> x;  // [N, D]
  Tensor<double> wq, wk, wv, wo;
};

TEST(Attention, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  AttentionFixture f(5);
  Tensor<double> weights = randomTensor<double>({f.dims.tokens(), 6}, f.rng);  // dL/dy
  auto loss = [&] {
    AttentionSaved<double> saved;
    return test::dot(attentionForward(pool, f.dims, f.x, f.weights(), saved), weights);
  };
  AttentionSaved<double> saved;
  Tensor<double> y = attentionForward(pool, f.dims, f.x, f.weights(), saved);
  Tensor<double> dwq({6, 6}), dwk({6, 6}), dwv({6, 6}), dwo({6, 6});
  Tensor<double> dx = attentionBackward(pool, f.dims, weights, f.x, f.weights(), saved,
                                        AttentionGrads<double>{dwq, dwk, dwv, dwo});
  expectGradientMatches("dx", f.x, dx, loss);
  expectGradientMatches("dWq", f.wq, dwq, loss);
  expectGradientMatches("dWk", f.wk, dwk, loss);
  expectGradientMatches("dWv", f.wv, dwv, loss);
  expectGradientMatches("dWo", f.wo, dwo, loss);
}

TEST(Attention, OutputAtTIgnoresLaterTokensAndOtherSequences) {
  ThreadPool pool(1);
  AttentionFixture f(6);
  AttentionSaved<double> saved;
  Tensor<double> before = attentionForward(pool, f.dims, f.x, f.weights(), saved);
  const int64_t t0 = 2, seqLen = f.dims.seqLen;
  for (int64_t t = t0 + 1; t < seqLen; ++t) {  // perturb sequence 0 after t0
    for (int64_t j = 0; j < 6; ++j) f.x.at(t, j) += 1.5;
  }
  Tensor<double> after = attentionForward(pool, f.dims, f.x, f.weights(), saved);
  for (int64_t n = 0; n < f.dims.tokens(); ++n) {
    const bool mayChange = n < seqLen && n > t0;
    double diff = 0;
    for (int64_t j = 0; j < 6; ++j) diff += std::abs(after.at(n, j) - before.at(n, j));
    if (mayChange) {
      EXPECT_GT(diff, 1e-6) << "token " << n;
    } else {
      EXPECT_EQ(diff, 0.0) << "token " << n;
    }
  }
  // Probabilities above the diagonal are exactly zero and rows sum to one.
  for (int64_t r = 0; r < seqLen; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < seqLen; ++c) {
      const double p = saved.probs[r * seqLen + c];
      if (c > r) {
        EXPECT_EQ(p, 0.0);
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST(Attention, FloatMatchesDouble) {
  ThreadPool pool(3);
  Rng rng(7);
  const AttentionDims dims{3, 17, 4, 5};  // awkward sizes; D = 20
  const int64_t n = dims.tokens(), d = dims.dModel();
  Tensor<double> xd = randomTensor<double>({n, d}, rng);
  Tensor<double> w[4] = {
      randomTensor<double>({d, d}, rng, 0.3), randomTensor<double>({d, d}, rng, 0.3),
      randomTensor<double>({d, d}, rng, 0.3), randomTensor<double>({d, d}, rng, 0.3)};
  Tensor<float> xf({n, d});
  Tensor<float> wf[4] = {Tensor<float>({d, d}), Tensor<float>({d, d}), Tensor<float>({d, d}),
                         Tensor<float>({d, d})};
  for (int64_t i = 0; i < xd.numel(); ++i) xf[i] = float(xd[i]);
  for (int k = 0; k < 4; ++k) {
    for (int64_t i = 0; i < w[k].numel(); ++i) wf[k][i] = float(w[k][i]);
  }
  AttentionSaved<double> sd;
  AttentionSaved<float> sf;
  Tensor<double> yd = attentionForward(pool, dims, xd, {w[0], w[1], w[2], w[3]}, sd);
  Tensor<float> yf = attentionForward(pool, dims, xf, {wf[0], wf[1], wf[2], wf[3]}, sf);
  for (int64_t i = 0; i < yd.numel(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-5 * (1 + std::abs(yd[i])));
}

}  // namespace
}  // namespace moewb::engine
