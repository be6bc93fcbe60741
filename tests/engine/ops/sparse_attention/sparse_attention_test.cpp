// Gated sparse attention layer: the fast path against the naive dense oracle (dense stage, top-k
// on awkward sizes, top-k >= T equal to dense), finite-difference gradients in double for x and
// every weight in both stages, gradient routing (LM loss never reaches the indexer, the indexer
// loss never reaches the rest), causality, and bitwise determinism across thread counts.
#include "ops/sparse_attention/sparse_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "grad_check.h"
#include "sparse_attention_fixture.h"
#include "sparse_attention_naive.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;
using test::SparseParams;

SparseAttentionDims smallDims(int64_t seqLen, SparseStage stage, int64_t topK, int64_t kvHeads) {
  SparseAttentionDims dims;
  dims.batch = 2;
  dims.seqLen = seqLen;
  dims.dModel = 8;
  dims.numHeads = 4;
  dims.kvHeads = kvHeads;
  dims.headDim = 3;
  dims.indexerHeads = 3;
  dims.indexerDim = 4;
  dims.topK = topK;
  dims.stage = stage;
  dims.indexerLossCoef = 0.5;
  return dims;
}

std::string describe(const SparseAttentionDims& dims) {
  return "T=" + std::to_string(dims.seqLen) + " topK=" + std::to_string(dims.topK) +
         " Hkv=" + std::to_string(dims.kvHeads) +
         (dims.stage == SparseStage::kSparse ? " sparse" : " dense");
}

// The fast path in double and float against the naive oracle, with the outputs poisoned first.
void expectMatchesNaive(ThreadPool& pool, const SparseAttentionDims& dims, uint64_t seed) {
  SCOPED_TRACE(describe(dims));
  Rng rng(seed);
  SparseParams<double> pd(dims);
  pd.randomize(rng, 0.5);
  SparseParams<float> pf(dims);
  pf.copyFrom(pd);
  Tensor<double> xd = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<float> xf({dims.tokens(), dims.dModel});
  for (int64_t i = 0; i < xd.numel(); ++i) xf[i] = float(xd[i]);
  const test::NaiveSparseResult expected = test::naiveSparseAttention(dims, xd, pd.weights());
  SparseAttentionSaved<double> sd;
  SparseAttentionSaved<float> sf;
  sd.indexerKl = sf.indexerKl = std::nan("");
  Tensor<double> yd = sparseAttentionForward(pool, dims, xd, pd.weights(), sd);
  Tensor<float> yf = sparseAttentionForward(pool, dims, xf, pf.weights(), sf);
  ASSERT_EQ(yd.numel(), int64_t(expected.y.size()));
  for (int64_t i = 0; i < yd.numel(); ++i) {
    EXPECT_NEAR(yd[i], expected.y[size_t(i)], 1e-12 * (1 + std::abs(expected.y[size_t(i)])));
    EXPECT_NEAR(yf[i], expected.y[size_t(i)], 2e-5 * (1 + std::abs(expected.y[size_t(i)])));
  }
  EXPECT_NEAR(sd.indexerKl, expected.indexerKl, 1e-12 * (1 + expected.indexerKl));
  EXPECT_NEAR(sf.indexerKl, expected.indexerKl, 2e-5 * (1 + expected.indexerKl));
  EXPECT_DOUBLE_EQ(sd.indexerLoss, dims.indexerLossCoef * sd.indexerKl);
  // The selection lists exactly the naive mask's keys.
  const int64_t width = sd.selected.dim(1), tl = dims.seqLen;
  for (int64_t n = 0; n < dims.tokens(); ++n) {
    std::vector<uint8_t> row(size_t(tl), 0);
    for (int64_t slot = 0; slot < width && sd.selected.at(n, slot) >= 0; ++slot) {
      row[size_t(sd.selected.at(n, slot))] = 1;
      EXPECT_EQ(sf.selected.at(n, slot), sd.selected.at(n, slot));
    }
    for (int64_t s = 0; s < tl; ++s) EXPECT_EQ(row[size_t(s)], expected.mask[size_t(n * tl + s)]);
  }
}

TEST(SparseAttention, DenseStageMatchesNaiveDenseAttention) {
  ThreadPool pool(2);
  for (int64_t seqLen : {1, 5, 17}) {
    for (int64_t kvHeads : {1, 2, 4}) {
      expectMatchesNaive(pool, smallDims(seqLen, SparseStage::kDenseWarmup, 1, kvHeads),
                         uint64_t(seqLen * 10 + kvHeads));
    }
  }
}

TEST(SparseAttention, TopKMatchesNaiveMaskedAttentionOnAwkwardSizes) {
  ThreadPool pool(3);
  for (int64_t seqLen : {1, 5, 17}) {
    for (int64_t topK : {1, 3, 16, 40}) {
      for (int64_t kvHeads : {1, 2}) {
        expectMatchesNaive(pool, smallDims(seqLen, SparseStage::kSparse, topK, kvHeads),
                           uint64_t(100 + seqLen * 100 + topK * 3 + kvHeads));
      }
    }
  }
}

TEST(SparseAttention, TopKCoveringAllKeysEqualsDenseStageBitwise) {
  ThreadPool pool(2);
  for (int64_t seqLen : {1, 5, 17}) {
    for (int64_t topK : {seqLen, seqLen + 3}) {
      SCOPED_TRACE("T=" + std::to_string(seqLen) + " topK=" + std::to_string(topK));
      const SparseAttentionDims sparse = smallDims(seqLen, SparseStage::kSparse, topK, 2);
      const SparseAttentionDims dense = smallDims(seqLen, SparseStage::kDenseWarmup, topK, 2);
      Rng rng(uint64_t(seqLen + topK));
      SparseParams<float> p(sparse);
      p.randomize(rng, 0.5);
      Tensor<float> x = randomTensor<float>({sparse.tokens(), sparse.dModel}, rng);
      SparseAttentionSaved<float> ss, sd;
      Tensor<float> ys = sparseAttentionForward(pool, sparse, x, p.weights(), ss);
      Tensor<float> yd = sparseAttentionForward(pool, dense, x, p.weights(), sd);
      ASSERT_TRUE(ys.sameShape(yd));
      for (int64_t i = 0; i < ys.numel(); ++i) EXPECT_EQ(ys[i], yd[i]) << i;
      EXPECT_EQ(ss.indexerKl, sd.indexerKl);
    }
  }
}

// Gradients of F = dy . y (for x, wq, wk, wv, wo, wgate, sink) and of saved.indexerLoss (for the
// indexer weights) against central differences.
void expectGradientsMatch(const SparseAttentionDims& dims, uint64_t seed) {
  SCOPED_TRACE(describe(dims));
  ThreadPool pool(2);
  Rng rng(seed);
  SparseParams<double> p(dims);
  p.randomize(rng, 0.6);
  Tensor<double> x = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<double> dy = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  auto lmLoss = [&] {
    SparseAttentionSaved<double> saved;
    return test::dot(sparseAttentionForward(pool, dims, x, p.weights(), saved), dy);
  };
  auto indexerLoss = [&] {
    SparseAttentionSaved<double> saved;
    sparseAttentionForward(pool, dims, x, p.weights(), saved);
    return saved.indexerLoss;
  };
  SparseParams<double> g(dims);
  SparseAttentionSaved<double> saved;
  sparseAttentionForward(pool, dims, x, p.weights(), saved);
  ASSERT_GT(saved.indexerLoss, 0.0);
  Tensor<double> dx = sparseAttentionBackward(pool, dims, dy, x, p.weights(), saved, g.grads());
  expectGradientMatches("dx", x, dx, lmLoss);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    expectGradientMatches("d" + p.names[i], p.tensors[i], g.tensors[i],
                          p.isIndexer(i) ? std::function<double()>(indexerLoss) : lmLoss);
  }
}

TEST(SparseAttention, GradientsMatchFiniteDifferencesDenseStage) {
  SparseAttentionDims dims = smallDims(5, SparseStage::kDenseWarmup, 2, 2);
  dims.dModel = 6;
  expectGradientsMatch(dims, 21);
  dims.kvHeads = 1;
  dims.batch = 1;
  dims.seqLen = 7;
  expectGradientsMatch(dims, 22);
}

TEST(SparseAttention, GradientsMatchFiniteDifferencesSparseStage) {
  SparseAttentionDims dims = smallDims(5, SparseStage::kSparse, 2, 2);
  dims.dModel = 6;
  expectGradientsMatch(dims, 23);
  dims.kvHeads = 1;
  dims.topK = 3;
  dims.seqLen = 7;
  expectGradientsMatch(dims, 24);
}

TEST(SparseAttention, LmLossGivesNoGradientToIndexerAndIndexerLossNoneToTheRest) {
  ThreadPool pool(2);
  for (SparseStage stage : {SparseStage::kDenseWarmup, SparseStage::kSparse}) {
    SparseAttentionDims dims = smallDims(9, stage, 3, 2);
    Rng rng(31);
    SparseParams<double> p(dims);
    p.randomize(rng, 0.5);
    Tensor<double> x = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
    Tensor<double> dy = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
    Tensor<double> noDy({dims.tokens(), dims.dModel});
    SparseAttentionSaved<double> saved;
    sparseAttentionForward(pool, dims, x, p.weights(), saved);
    SparseParams<double> withLoss(dims), lmOnly(dims), lossOnly(dims);
    Tensor<double> dx1 =
        sparseAttentionBackward(pool, dims, dy, x, p.weights(), saved, withLoss.grads());
    dims.indexerLossCoef = 0;
    Tensor<double> dx2 =
        sparseAttentionBackward(pool, dims, dy, x, p.weights(), saved, lmOnly.grads());
    dims.indexerLossCoef = 0.5;
    sparseAttentionBackward(pool, dims, noDy, x, p.weights(), saved, lossOnly.grads());
    for (int64_t i = 0; i < dx1.numel(); ++i) EXPECT_EQ(dx1[i], dx2[i]);
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      SCOPED_TRACE(p.names[i]);
      double lmNorm = 0, lossNorm = 0;
      for (int64_t j = 0; j < p.tensors[i].numel(); ++j) {
        lmNorm += std::abs(lmOnly.tensors[i][j]);
        lossNorm += std::abs(lossOnly.tensors[i][j]);
        // Each parameter receives its gradient from exactly one of the two losses.
        EXPECT_EQ(withLoss.tensors[i][j], lmOnly.tensors[i][j] + lossOnly.tensors[i][j]);
      }
      EXPECT_EQ(p.isIndexer(i) ? lmNorm : lossNorm, 0.0);
      EXPECT_GT(p.isIndexer(i) ? lossNorm : lmNorm, 0.0);
    }
  }
}

TEST(SparseAttention, OutputAtTIgnoresLaterTokensAndOtherSequences) {
  ThreadPool pool(2);
  for (SparseStage stage : {SparseStage::kDenseWarmup, SparseStage::kSparse}) {
    const SparseAttentionDims dims = smallDims(11, stage, 3, 1);
    Rng rng(41);
    SparseParams<double> p(dims);
    p.randomize(rng, 0.5);
    Tensor<double> x = randomTensor<double>({dims.tokens(), dims.dModel}, rng);
    SparseAttentionSaved<double> before, after;
    Tensor<double> y0 = sparseAttentionForward(pool, dims, x, p.weights(), before);
    const int64_t t0 = 4, tl = dims.seqLen, width = dims.selectionWidth();
    for (int64_t t = t0 + 1; t < tl; ++t) {
      for (int64_t j = 0; j < dims.dModel; ++j) x.at(t, j) += 1.5;
    }
    Tensor<double> y1 = sparseAttentionForward(pool, dims, x, p.weights(), after);
    for (int64_t n = 0; n < dims.tokens(); ++n) {
      double diff = 0;
      for (int64_t j = 0; j < dims.dModel; ++j) diff += std::abs(y1.at(n, j) - y0.at(n, j));
      if (n < tl && n > t0) {
        EXPECT_GT(diff, 1e-6) << "token " << n;
      } else {
        EXPECT_EQ(diff, 0.0) << "token " << n;
      }
      // Rows list min(t+1, W) ascending causal keys; key and sink probabilities sum to one.
      const int64_t t = n % tl, count = std::min(t + 1, width);
      double mass = 0;
      for (int64_t slot = 0; slot < width; ++slot) {
        const int32_t s = before.selected.at(n, slot);
        EXPECT_EQ(s >= 0, slot < count);
        if (slot > 0 && s >= 0) {
          EXPECT_GT(s, before.selected.at(n, slot - 1));
        }
        EXPECT_LE(s, t);
        mass += before.probs[(n * dims.numHeads) * width + slot];
      }
      EXPECT_NEAR(mass + before.sinkProbs.at(n, 0), 1.0, 1e-12);
    }
  }
}

TEST(SparseAttention, ResultsAreBitwiseIdenticalForAnyThreadCount) {
  for (SparseStage stage : {SparseStage::kDenseWarmup, SparseStage::kSparse}) {
    SparseAttentionDims dims = smallDims(45, stage, 7, 2);
    dims.batch = 3;
    dims.dModel = 16;
    dims.headDim = 4;
    dims.indexerDim = 8;
    Rng rng(51);
    SparseParams<float> p(dims);
    p.randomize(rng, 0.4);
    Tensor<float> x = randomTensor<float>({dims.tokens(), dims.dModel}, rng);
    Tensor<float> dy = randomTensor<float>({dims.tokens(), dims.dModel}, rng);
    std::vector<Tensor<float>> outputs;  // per thread count: y, dx, then every gradient
    std::vector<double> losses;
    for (int32_t threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      SparseAttentionSaved<float> saved;
      SparseParams<float> g(dims);
      outputs.push_back(sparseAttentionForward(pool, dims, x, p.weights(), saved));
      outputs.push_back(sparseAttentionBackward(pool, dims, dy, x, p.weights(), saved, g.grads()));
      for (auto& t : g.tensors) outputs.push_back(std::move(t));
      losses.push_back(saved.indexerLoss);
    }
    const size_t perRun = outputs.size() / 3;
    for (size_t run = 1; run < 3; ++run) {
      EXPECT_EQ(losses[run], losses[0]);
      for (size_t i = 0; i < perRun; ++i) {
        const Tensor<float>& a = outputs[i];
        const Tensor<float>& b = outputs[run * perRun + i];
        ASSERT_TRUE(a.sameShape(b));
        EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(a.bytes())), 0) << "output " << i;
      }
    }
  }
}

TEST(SparseAttention, ParameterShapesAndInit) {
  SparseAttentionDims dims = smallDims(5, SparseStage::kSparse, 2, 2);
  const auto shapes = sparseAttentionParameterShapes(dims);
  ASSERT_EQ(shapes.size(), 11u);
  EXPECT_EQ(shapes[0].name, "wq");
  EXPECT_EQ(shapes[0].shape, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(shapes[1].shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(shapes[3].shape, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(shapes[5].name, "sink");
  EXPECT_FALSE(shapes[5].decay);
  EXPECT_EQ(shapes[6].shape, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(shapes[10].shape, (std::vector<int64_t>{3, 8}));
  SparseParams<double> a(dims), b(dims);
  Rng rngA(3), rngB(3);
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    a.tensors[i].fill(7);
    initSparseAttentionParameter(a.names[i], a.tensors[i], 0.02, 4, rngA);
    initSparseAttentionParameter(b.names[i], b.tensors[i], 0.02, 4, rngB);
    for (int64_t j = 0; j < a.tensors[i].numel(); ++j) EXPECT_EQ(a.tensors[i][j], b.tensors[i][j]);
  }
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(a["sink"][j], 0.0);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(a["indexer.k_norm.gain"][j], 1.0);
    EXPECT_EQ(a["indexer.k_norm.bias"][j], 0.0);
  }
  auto rms = [](const Tensor<double>& t) { return std::sqrt(test::dot(t, t) / double(t.numel())); };
  EXPECT_NEAR(rms(a["wq"]), 0.02, 0.006);
  EXPECT_NEAR(rms(a["wo"]), 0.02 / std::sqrt(8.0), 0.002);
}

}  // namespace
}  // namespace moewb::engine
