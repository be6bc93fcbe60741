// Grouped SwiGLU experts: finite-difference gradients in double with an empty expert, grouped ==
// a plain per-expert loop (forward and backward, awkward sizes, groups over several row tiles),
// and identical results for any thread count.
#include "ops/experts/experts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

Tensor<int32_t> offsetsFromCounts(const std::vector<int32_t>& counts) {
  Tensor<int32_t> offsets({int64_t(counts.size()) + 1});
  for (size_t e = 0; e < counts.size(); ++e)
    offsets[int64_t(e) + 1] = offsets[int64_t(e)] + counts[e];
  return offsets;
}

TEST(Experts, GradientMatchesFiniteDifferencesWithAnEmptyExpert) {
  ThreadPool pool(2);
  Rng rng(31);
  const int64_t e = 4, d = 5, f = 6;
  Tensor<int32_t> offsets = offsetsFromCounts({3, 0, 2, 4});
  const int64_t rows = 9;
  Tensor<double> x = randomTensor<double>({rows, d}, rng);
  Tensor<double> gate = randomTensor<double>({e, f, d}, rng, 0.7);
  Tensor<double> up = randomTensor<double>({e, f, d}, rng, 0.7);
  Tensor<double> down = randomTensor<double>({e, d, f}, rng, 0.7);
  Tensor<double> dy = randomTensor<double>({rows, d}, rng);
  auto loss = [&] {
    ExpertsSaved<double> saved;
    return test::dot(expertsForward(pool, x, offsets, {gate, up, down}, saved), dy);
  };
  ExpertsSaved<double> saved;
  Tensor<double> y = expertsForward(pool, x, offsets, {gate, up, down}, saved);
  Tensor<double> dGate({e, f, d}), dUp({e, f, d}), dDown({e, d, f});
  Tensor<double> dx = expertsBackward(pool, dy, x, offsets, {gate, up, down}, saved,
                                      ExpertGrads<double>{dGate, dUp, dDown});
  expectGradientMatches("dx", x, dx, loss);
  expectGradientMatches("dGate", gate, dGate, loss);
  expectGradientMatches("dUp", up, dUp, loss);
  expectGradientMatches("dDown", down, dDown, loss);
  for (int64_t i = 0; i < f * d; ++i) {  // expert 1 saw no tokens
    EXPECT_EQ(dGate.row(1)[i], 0.0);
    EXPECT_EQ(dUp.row(1)[i], 0.0);
    EXPECT_EQ(dDown.row(1)[i], 0.0);
  }
}

// The oracle: a plain loop over experts and rows with scalar dot products.
struct LoopResult {
  std::vector<double> y, dx, dGate, dUp, dDown;
};

LoopResult perExpertLoop(const Tensor<float>& x, const Tensor<int32_t>& offsets,
                         const Tensor<float>& gate, const Tensor<float>& up,
                         const Tensor<float>& down, const Tensor<float>& dy) {
  const int64_t e = gate.dim(0), f = gate.dim(1), d = gate.dim(2), rows = x.dim(0);
  LoopResult out;
  out.y.assign(size_t(rows * d), 0);
  out.dx.assign(size_t(rows * d), 0);
  out.dGate.assign(size_t(e * f * d), 0);
  out.dUp.assign(size_t(e * f * d), 0);
  out.dDown.assign(size_t(e * d * f), 0);
  for (int64_t ex = 0; ex < e; ++ex) {
    for (int64_t r = offsets[ex]; r < offsets[ex + 1]; ++r) {
      const size_t fs = static_cast<size_t>(f);
      std::vector<double> g(fs), u(fs), h(fs), dh(fs);
      for (int64_t i = 0; i < f; ++i) {
        for (int64_t c = 0; c < d; ++c) {
          g[size_t(i)] += double(x.at(r, c)) * gate.row(ex)[i * d + c];
          u[size_t(i)] += double(x.at(r, c)) * up.row(ex)[i * d + c];
        }
        const double s = 1 / (1 + std::exp(-g[size_t(i)]));
        h[size_t(i)] = g[size_t(i)] * s * u[size_t(i)];
      }
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t i = 0; i < f; ++i) {
          out.y[size_t(r * d + c)] += h[size_t(i)] * down.row(ex)[c * f + i];
          dh[size_t(i)] += double(dy.at(r, c)) * down.row(ex)[c * f + i];
          out.dDown[size_t(ex * d * f + c * f + i)] += double(dy.at(r, c)) * h[size_t(i)];
        }
      }
      for (int64_t i = 0; i < f; ++i) {
        const double s = 1 / (1 + std::exp(-g[size_t(i)]));
        const double dg = dh[size_t(i)] * u[size_t(i)] * (s + g[size_t(i)] * s * (1 - s));
        const double du = dh[size_t(i)] * g[size_t(i)] * s;
        for (int64_t c = 0; c < d; ++c) {
          out.dx[size_t(r * d + c)] += dg * gate.row(ex)[i * d + c] + du * up.row(ex)[i * d + c];
          out.dGate[size_t(ex * f * d + i * d + c)] += dg * x.at(r, c);
          out.dUp[size_t(ex * f * d + i * d + c)] += du * x.at(r, c);
        }
      }
    }
  }
  return out;
}

void expectClose(const std::string& what, const Tensor<float>& got,
                 const std::vector<double>& want) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[int64_t(i)], want[i], 2e-5 * (1 + std::abs(want[i])))
        << what << "[" << i << "]";
  }
}

TEST(Experts, GroupedMatchesPerExpertLoopAndIsThreadCountInvariant) {
  Rng rng(32);
  const int64_t e = 5, d = 63, f = 37;
  Tensor<int32_t> offsets = offsetsFromCounts({1, 0, 130, 64, 7});  // tiles of 64 rows cross
  const int64_t rows = offsets[e];
  Tensor<float> x = randomTensor<float>({rows, d}, rng);
  Tensor<float> gate = randomTensor<float>({e, f, d}, rng, 0.2);
  Tensor<float> up = randomTensor<float>({e, f, d}, rng, 0.2);
  Tensor<float> down = randomTensor<float>({e, d, f}, rng, 0.2);
  Tensor<float> dy = randomTensor<float>({rows, d}, rng);
  const LoopResult want = perExpertLoop(x, offsets, gate, up, down, dy);
  Tensor<float> firstY, firstDx, firstDGate;
  for (int32_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ExpertsSaved<float> saved;
    Tensor<float> y = expertsForward(pool, x, offsets, {gate, up, down}, saved);
    Tensor<float> dGate({e, f, d}), dUp({e, f, d}), dDown({e, d, f});
    Tensor<float> dx = expertsBackward(pool, dy, x, offsets, {gate, up, down}, saved,
                                       ExpertGrads<float>{dGate, dUp, dDown});
    expectClose("y", y, want.y);
    expectClose("dx", dx, want.dx);
    expectClose("dGate", dGate, want.dGate);
    expectClose("dUp", dUp, want.dUp);
    expectClose("dDown", dDown, want.dDown);
    if (threads == 1) {
      firstY = y.clone();
      firstDx = dx.clone();
      firstDGate = dGate.clone();
    } else {
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y[i], firstY[i]);
      for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx[i], firstDx[i]);
      for (int64_t i = 0; i < dGate.numel(); ++i) ASSERT_EQ(dGate[i], firstDGate[i]);
    }
  }
}

}  // namespace
}  // namespace moewb::engine
