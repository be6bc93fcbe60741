// The whole MoE FFN (router -> permute -> experts -> combine, plus the aux loss): finite-
// difference gradients in double for top_k = 1, 2 and E, and the expert counts it reports.
#include "model/cpu/moe_ffn.h"

#include <gtest/gtest.h>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

void checkMoeFfnGradients(int32_t topK, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  const int64_t n = 7, d = 5, e = 4, f = 6;
  Tensor<double> x = randomTensor<double>({n, d}, rng);
  Tensor<double> router = randomTensor<double>({e, d}, rng, 1.0);
  Tensor<double> gate = randomTensor<double>({e, f, d}, rng, 0.6);
  Tensor<double> up = randomTensor<double>({e, f, d}, rng, 0.6);
  Tensor<double> down = randomTensor<double>({e, d, f}, rng, 0.6);
  Tensor<double> dy = randomTensor<double>({n, d}, rng);
  const MoeOptions options{topK, 0.2};
  const MoeWeights<double> weights{router, gate, up, down};
  auto loss = [&] {
    MoeSaved<double> saved;
    const double value = test::dot(moeFfnForward(pool, x, weights, options, saved), dy);
    return value + saved.aux.loss;
  };
  MoeSaved<double> saved;
  moeFfnForward(pool, x, weights, options, saved);
  int64_t total = 0;
  for (int64_t c : saved.aux.counts) total += c;
  EXPECT_EQ(total, n * topK);
  Tensor<double> dRouter({e, d}), dGate({e, f, d}), dUp({e, f, d}), dDown({e, d, f});
  Tensor<double> dx = moeFfnBackward(pool, dy, x, weights, options, saved,
                                     MoeGrads<double>{dRouter, dGate, dUp, dDown});
  const std::string k = " k=" + std::to_string(topK);
  expectGradientMatches("dx" + k, x, dx, loss);
  expectGradientMatches("dRouter" + k, router, dRouter, loss);
  expectGradientMatches("dGate" + k, gate, dGate, loss);
  expectGradientMatches("dUp" + k, up, dUp, loss);
  expectGradientMatches("dDown" + k, down, dDown, loss);
}

TEST(MoeFfn, GradientsMatchFiniteDifferencesTopK1) {
  checkMoeFfnGradients(1, 51);
}
TEST(MoeFfn, GradientsMatchFiniteDifferencesTopK2) {
  checkMoeFfnGradients(2, 52);
}
TEST(MoeFfn, GradientsMatchFiniteDifferencesTopKAll) {
  checkMoeFfnGradients(4, 53);
}

}  // namespace
}  // namespace moewb::engine
