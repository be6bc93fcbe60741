// Lightning indexer and selection helpers: KL objective against hand-computed values, its
// gradient into every indexer weight against central differences with the target held fixed
// (causal and top-k selections), the score formula and the key LayerNorm, top-k tie-breaking and
// the transposed selection.
#include "ops/sparse_attention/indexer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"
#include "ops/sparse_attention/selection.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

TEST(IndexerKl, MatchesHandComputedCase) {
  ThreadPool pool(2);
  Tensor<int32_t> selected({3, 3});  // rows: {0}, {0, 1}, {0, 1, 2}
  const int32_t rows[3][3] = {{0, -1, -1}, {0, 1, -1}, {0, 1, 2}};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) selected.at(r, c) = rows[r][c];
  }
  Tensor<double> logits({3, 3}), target({3, 3});
  logits.at(0, 0) = 3.0;  // a single key: KL 0 whatever the logit
  target.at(0, 0) = 1.0;
  logits.at(1, 1) = std::log(2.0);  // softmax (1/3, 2/3) against (1/2, 1/2)
  target.at(1, 0) = target.at(1, 1) = 0.5;
  for (int c = 0; c < 3; ++c) logits.at(2, c) = c + 1;  // a zero target entry contributes 0
  target.at(2, 1) = 0.25;
  target.at(2, 2) = 0.75;
  logits.at(0, 2) = logits.at(1, 2) = 99;  // padding is ignored
  Tensor<double> probs;
  const double kl = indexerKlForward(pool, logits, target, selected, probs);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double row2 =
      0.25 * std::log(0.25 * z / std::exp(2.0)) + 0.75 * std::log(0.75 * z / std::exp(3.0));
  EXPECT_NEAR(kl, 0.5 * std::log(1.5) + 0.5 * std::log(0.75) + row2, 1e-14);
  EXPECT_NEAR(0.5 * std::log(1.125), 0.0588915, 1e-7);  // the row-1 term by hand
  EXPECT_EQ(probs.at(0, 0), 1.0);
  EXPECT_NEAR(probs.at(1, 0), 1.0 / 3, 1e-15);
  EXPECT_NEAR(probs.at(1, 1), 2.0 / 3, 1e-15);
  EXPECT_EQ(probs.at(1, 2), 0.0);
  const Tensor<double> dLogits = indexerKlBackward(pool, probs, target, selected, 2.0);
  EXPECT_NEAR(dLogits.at(1, 0), 2.0 * (1.0 / 3 - 0.5), 1e-15);
  EXPECT_NEAR(dLogits.at(1, 1), 2.0 * (2.0 / 3 - 0.5), 1e-15);
  EXPECT_EQ(dLogits.at(0, 0), 0.0);
  EXPECT_EQ(dLogits.at(1, 2), 0.0);
}

struct IndexerFixture {
  explicit IndexerFixture(uint64_t seed)
      : rng(seed),
        x(randomTensor<double>({dims.tokens(), dims.dModel}, rng)),
        wq(randomTensor<double>({dims.numHeads * dims.headDim, dims.dModel}, rng, 0.7)),
        wk(randomTensor<double>({dims.headDim, dims.dModel}, rng, 0.7)),
        gain(randomTensor<double>({dims.headDim}, rng, 0.2)),
        bias(randomTensor<double>({dims.headDim}, rng, 0.2)),
        ww(randomTensor<double>({dims.numHeads, dims.dModel}, rng, 0.7)) {
    for (int64_t i = 0; i < gain.numel(); ++i) gain[i] += 1.0;
  }
  IndexerWeights<double> weights() const { return {wq, wk, gain, bias, ww}; }

  IndexerDims dims{2, 6, 5, 2, 3, 1e-6};  // B, T, D, HI, dI
  Rng rng;
  Tensor<double> x;  // [N, D]
  Tensor<double> wq, wk, gain, bias, ww;
};

// A random distribution over each row's valid slots.
Tensor<double> randomTarget(const Tensor<int32_t>& selected, Rng& rng) {
  Tensor<double> target({selected.dim(0), selected.dim(1)});
  for (int64_t r = 0; r < selected.dim(0); ++r) {
    const int64_t count = selectedCount(selected.row(r), selected.dim(1));
    double sum = 0;
    for (int64_t s = 0; s < count; ++s) sum += target.at(r, s) = 0.1 + rng.uniform();
    for (int64_t s = 0; s < count; ++s) target.at(r, s) /= sum;
  }
  return target;
}

void expectKlGradientMatches(IndexerFixture& f, const Tensor<int32_t>& selected) {
  ThreadPool pool(2);
  const Tensor<double> target = randomTarget(selected, f.rng);
  const double scale = 0.3;
  auto loss = [&] {
    IndexerSaved<double> saved;
    indexerForward(pool, f.dims, f.x, f.weights(), saved);
    Tensor<double> probs;
    return scale * indexerKlForward(pool, indexerLogits(pool, f.dims, saved, selected), target,
                                    selected, probs);
  };
  IndexerSaved<double> saved;
  indexerForward(pool, f.dims, f.x, f.weights(), saved);
  Tensor<double> probs;
  indexerKlForward(pool, indexerLogits(pool, f.dims, saved, selected), target, selected, probs);
  const Tensor<double> dLogits = indexerKlBackward(pool, probs, target, selected, scale);
  Tensor<double> gq({6, 5});
  Tensor<double> gk({3, 5}), gGain({3}), gBias({3}), gw({2, 5});
  indexerBackward(pool, f.dims, f.x, saved, selected, dLogits, f.weights(),
                  IndexerGrads<double>{gq, gk, gGain, gBias, gw});
  expectGradientMatches("dWqI", f.wq, gq, loss);
  expectGradientMatches("dWkI", f.wk, gk, loss);
  expectGradientMatches("dGain", f.gain, gGain, loss);
  expectGradientMatches("dBias", f.bias, gBias, loss);
  expectGradientMatches("dWw", f.ww, gw, loss);
}

TEST(IndexerKl, GradientMatchesFiniteDifferencesOverCausalKeys) {
  IndexerFixture f(11);
  expectKlGradientMatches(f, causalSelection(f.dims.batch, f.dims.seqLen));
}

TEST(IndexerKl, GradientMatchesFiniteDifferencesOverTopK) {
  IndexerFixture f(12);
  ThreadPool pool(1);
  IndexerSaved<double> saved;
  indexerForward(pool, f.dims, f.x, f.weights(), saved);
  const Tensor<int32_t> selected = indexerTopK(pool, f.dims, saved, 3);  // held fixed
  ASSERT_EQ(selected.dim(1), 3);
  expectKlGradientMatches(f, selected);
}

TEST(Indexer, ScoresFollowTheFormulaAndKeysAreLayerNormed) {
  IndexerFixture f(13);
  ThreadPool pool(2);
  IndexerSaved<double> saved;
  indexerForward(pool, f.dims, f.x, f.weights(), saved);
  const int64_t hi = 2, di = 3, tl = f.dims.seqLen;
  for (int64_t n = 0; n < f.dims.tokens(); ++n) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < di; ++i) mean += saved.kHat.at(n, i) / di;
    for (int64_t i = 0; i < di; ++i) var += saved.kHat.at(n, i) * saved.kHat.at(n, i) / di;
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-4);
    for (int64_t i = 0; i < di; ++i) {
      EXPECT_NEAR(saved.k.at(n, i), saved.kHat.at(n, i) * f.gain[i] + f.bias[i], 1e-14);
    }
  }
  const Tensor<int32_t> selected = causalSelection(f.dims.batch, tl);
  const Tensor<double> logits = indexerLogits(pool, f.dims, saved, selected);
  for (int64_t n = 0; n < f.dims.tokens(); ++n) {
    const int64_t t = n % tl;
    for (int64_t s = 0; s <= t; ++s) {
      double expected = 0;
      for (int64_t j = 0; j < hi; ++j) {
        double a = 0, w = 0;
        for (int64_t i = 0; i < di; ++i) a += saved.q.at(n, j * di + i) * saved.k.at(n - t + s, i);
        for (int64_t i = 0; i < f.dims.dModel; ++i) w += f.x.at(n, i) * f.ww.at(j, i);
        expected += w / std::sqrt(2.0) / std::sqrt(3.0) * std::max(a, 0.0);
      }
      EXPECT_NEAR(logits.at(n, s), expected, 1e-12);
    }
  }
}

TEST(Selection, TopKBreaksTiesTowardLowerPositions) {
  const double scores[5] = {1, 2, 2, 0, 2};
  int32_t out[4];
  topKRow(scores, 5, 2, out, 3);
  EXPECT_EQ(std::vector<int32_t>(out, out + 3), (std::vector<int32_t>{1, 2, -1}));
  topKRow(scores, 5, 3, out, 3);
  EXPECT_EQ(std::vector<int32_t>(out, out + 3), (std::vector<int32_t>{1, 2, 4}));
  topKRow(scores, 2, 3, out, 4);  // fewer keys than k: all of them
  EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{0, 1, -1, -1}));
  const float flat[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  topKRow(flat, 4, 1, out, 1);
  EXPECT_EQ(out[0], 0);
}

TEST(Selection, TransposeListsQueriesPerKeyInOrder) {
  Tensor<int32_t> selected({4, 2});  // B = 2, T = 2: rows {0}, {0, 1}, {0}, {1}
  const int32_t rows[4][2] = {{0, -1}, {0, 1}, {0, -1}, {1, -1}};
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 2; ++c) selected.at(r, c) = rows[r][c];
  }
  const SelectionTranspose byKey = transposeSelection(selected, 2);
  EXPECT_EQ(byKey.keyStart, (std::vector<int64_t>{0, 2, 3, 4, 5}));
  EXPECT_EQ(byKey.entries, (std::vector<int64_t>{0, 2, 3, 4, 6}));
  const Tensor<int32_t> causal = causalSelection(1, 3);
  EXPECT_EQ(selectedCount(causal.row(0), 3), 1);
  EXPECT_EQ(selectedCount(causal.row(2), 3), 3);
  EXPECT_EQ(causal.at(1, 1), 1);
  EXPECT_EQ(causal.at(1, 2), -1);
}

}  // namespace
}  // namespace moewb::engine
