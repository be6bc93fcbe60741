// Fused LM-head losses: Chunk Loss and CCE against the dense path (linear + ops/cross_entropy) on
// awkward sizes with ignored tokens, against a naive soft-cap/z-loss formula, finite differences
// in double, CCE gradient filtering, peak tensor memory and thread-count determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "grad_check.h"
#include "ops/cce/cce.h"
#include "ops/chunk_loss/chunk_loss.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/linear/linear.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::fillNormal;
using test::randomTensor;

template <typename T>
struct Problem {
  Tensor<T> h;              // [N, D]
  Tensor<T> wv;             // [V, D]
  Tensor<int32_t> targets;  // [N]
};

// Random problem; every `ignoreEvery`-th token (from token 2 on) is ignored (0: none).
template <typename T>
Problem<T> makeProblem(int64_t n, int64_t d, int64_t vocab, uint64_t seed, int64_t ignoreEvery,
                       double hStd = 1.0, double wStd = 0.5) {
  Rng rng(seed);
  Problem<T> p{randomTensor<T>({n, d}, rng, hStd), randomTensor<T>({vocab, d}, rng, wStd),
               Tensor<int32_t>({n})};
  for (int64_t t = 0; t < n; ++t) {
    const bool ignored = ignoreEvery > 0 && t % ignoreEvery == 2;
    p.targets[t] = ignored ? kDefaultIgnoreIndex : int32_t(rng.uniformInt(vocab));
  }
  return p;
}

struct Grads {
  double loss = 0;
  Tensor<float> dh;   // [N, D]
  Tensor<float> dWv;  // [V, D]
};

// The dense path as the model runs it today (logits = h Wv^T, ops/cross_entropy), on the valid
// tokens only since the dense op has no ignore index; ignored rows of dh stay zero.
Grads denseOracle(ThreadPool& pool, const Problem<float>& p) {
  const int64_t n = p.h.dim(0), d = p.h.dim(1), vocab = p.wv.dim(0);
  std::vector<int64_t> valid;
  for (int64_t t = 0; t < n; ++t) {
    if (p.targets[t] != kDefaultIgnoreIndex) valid.push_back(t);
  }
  const int64_t m = int64_t(valid.size());
  Grads g{0, Tensor<float>({n, d}), Tensor<float>({vocab, d})};
  if (m == 0) return g;
  Tensor<float> hv({m, d});  // [M, D]
  Tensor<int32_t> yv({m});   // [M]
  for (int64_t i = 0; i < m; ++i) {
    std::copy(p.h.row(valid[size_t(i)]), p.h.row(valid[size_t(i)]) + d, hv.row(i));
    yv[i] = p.targets[valid[size_t(i)]];
  }
  Tensor<float> logits({m, vocab});  // [M, V]
  linearForward(pool, hv.data(), p.wv.data(), logits.data(), m, d, vocab);
  Tensor<float> lse;
  g.loss = crossEntropyForward(pool, logits, yv, lse);
  Tensor<float> dLogits = crossEntropyBackward(pool, logits, yv, lse, 1.0);
  Tensor<float> dhv({m, d});
  linearBackwardData(pool, dLogits.data(), p.wv.data(), dhv.data(), m, d, vocab);
  linearBackwardWeight(pool, dLogits.data(), hv.data(), g.dWv.data(), m, d, vocab);
  for (int64_t i = 0; i < m; ++i) std::copy(dhv.row(i), dhv.row(i) + d, g.dh.row(valid[size_t(i)]));
  return g;
}

template <typename T>
Grads runChunk(ThreadPool& pool, const Problem<T>& p, const ChunkLossOptions& options,
               double dLoss = 1.0) {
  ChunkLossSaved<T> saved;
  const LinearLossResult r = chunkLossForward(pool, p.h, p.wv, p.targets, options, saved);
  Tensor<T> dWv({p.wv.dim(0), p.wv.dim(1)});
  Tensor<T> dh = chunkLossBackward(pool, saved, dLoss, dWv);
  return {r.objective(), std::move(dh), std::move(dWv)};
}

Grads runCce(ThreadPool& pool, const Problem<float>& p, const CceOptions& options,
             CceStats* stats = nullptr) {
  CceSaved<float> saved;
  const LinearLossResult r = cceForward(pool, p.h, p.wv, p.targets, options, saved);
  Tensor<float> dWv({p.wv.dim(0), p.wv.dim(1)});
  Tensor<float> dh = cceBackward(pool, p.h, p.wv, p.targets, options, saved, 1.0, dWv, stats);
  return {r.objective(), std::move(dh), std::move(dWv)};
}

// max |got - want| / max |want| (0 when both are all zero).
template <typename T>
double relError(const Tensor<T>& got, const Tensor<T>& want) {
  EXPECT_TRUE(got.sameShape(want));
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

template <typename T>
bool bitwiseEqual(const Tensor<T>& a, const Tensor<T>& b) {
  return a.sameShape(b) && std::memcmp(a.data(), b.data(), size_t(a.bytes())) == 0;
}

void expectMatches(const std::string& what, const Grads& got, const Grads& want) {
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::max(1.0, std::abs(want.loss))) << what;
  EXPECT_LE(relError(got.dh, want.dh), 1e-5) << what << " dh";
  EXPECT_LE(relError(got.dWv, want.dWv), 1e-5) << what << " dWv";
}

TEST(LinearLoss, ChunkAndCceMatchDenseOnAwkwardSizes) {
  ThreadPool pool(2);
  const struct {
    int64_t tokens, vocab;
  } sizes[] = {{1, 1}, {1, 50}, {1, 257}, {37, 1}, {37, 50}, {37, 257}};
  for (const auto& size : sizes) {
    const Problem<float> p = makeProblem<float>(size.tokens, 24, size.vocab, 7 + size.vocab,
                                                /*ignoreEvery=*/5);
    const Grads dense = denseOracle(pool, p);
    for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(5), int64_t(16), int64_t(64)}) {
      ChunkLossOptions options;
      options.chunkTokens = chunk;
      expectMatches("chunk N=" + std::to_string(size.tokens) + " V=" + std::to_string(size.vocab) +
                        " Nc=" + std::to_string(chunk),
                    runChunk(pool, p, options), dense);
    }
    const struct {
      int64_t tokenBlock, vocabBlock, groupTokens;
    } blocks[] = {{64, 256, 1024}, {8, 16, 8}, {5, 7, 12}, {1, 1, 3}, {16, 48, 1024}};
    for (const auto& block : blocks) {
      CceOptions options;
      options.tokenBlock = block.tokenBlock;
      options.vocabBlock = block.vocabBlock;
      options.groupTokens = block.groupTokens;
      options.filterEps = 0;
      expectMatches("cce N=" + std::to_string(size.tokens) + " V=" + std::to_string(size.vocab) +
                        " Tb=" + std::to_string(block.tokenBlock) +
                        " Vb=" + std::to_string(block.vocabBlock) +
                        " group=" + std::to_string(block.groupTokens),
                    runCce(pool, p, options), dense);
    }
  }
}

TEST(LinearLoss, AllTokensIgnoredGivesZero) {
  ThreadPool pool(2);
  Problem<float> p = makeProblem<float>(9, 6, 13, 3, 0);
  p.targets.fill(kDefaultIgnoreIndex);
  const Grads chunk = runChunk(pool, p, ChunkLossOptions{});
  const Grads cce = runCce(pool, p, CceOptions{});
  for (const Grads* g : {&chunk, &cce}) {
    EXPECT_EQ(g->loss, 0.0);
    for (int64_t i = 0; i < g->dh.numel(); ++i) EXPECT_EQ(g->dh[i], 0.0f);
    for (int64_t i = 0; i < g->dWv.numel(); ++i) EXPECT_EQ(g->dWv[i], 0.0f);
  }
}

// Naive loss in double straight from linear_loss.h: returns {mean CE, mean z-loss}.
std::pair<double, double> naiveLoss(const Problem<double>& p, const LinearLossOptions& o) {
  const int64_t n = p.h.dim(0), d = p.h.dim(1), vocab = p.wv.dim(0);
  double ce = 0, z = 0;
  int64_t valid = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (p.targets[t] == o.ignoreIndex) continue;
    std::vector<double> logits(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += p.h.at(t, j) * p.wv.at(v, j);
      logits[size_t(v)] = o.softCap > 0 ? o.softCap * std::tanh(dot / o.softCap) : dot;
    }
    double sum = 0;
    for (double l : logits) sum += std::exp(l);
    const double lse = std::log(sum);
    ce += lse - logits[size_t(p.targets[t])];
    z += o.zLossCoef * lse * lse;
    ++valid;
  }
  return {ce / double(valid), z / double(valid)};
}

TEST(LinearLoss, SoftCapAndZLossMatchNaiveFormula) {
  ThreadPool pool(2);
  const Problem<double> p = makeProblem<double>(11, 7, 19, 5, 4, 1.0, 1.5);
  LinearLossOptions loss;
  loss.softCap = 2.5;
  loss.zLossCoef = 0.03;
  const auto [ce, z] = naiveLoss(p, loss);
  ChunkLossOptions chunkOptions;
  chunkOptions.chunkTokens = 4;
  chunkOptions.loss = loss;
  ChunkLossSaved<double> chunkSaved;
  const LinearLossResult chunk =
      chunkLossForward(pool, p.h, p.wv, p.targets, chunkOptions, chunkSaved);
  CceOptions cceOptions;
  cceOptions.tokenBlock = 3;
  cceOptions.vocabBlock = 5;
  cceOptions.loss = loss;
  CceSaved<double> cceSaved;
  const LinearLossResult cce = cceForward(pool, p.h, p.wv, p.targets, cceOptions, cceSaved);
  for (const LinearLossResult* r : {&chunk, &cce}) {
    EXPECT_NEAR(r->loss, ce, 1e-12);
    EXPECT_NEAR(r->zLoss, z, 1e-12);
    EXPECT_GT(r->zLoss, 0.0);
    EXPECT_EQ(r->validTokens, 8);
  }
}

// Finite differences of the objective (times dLoss) in double, for both ops, with and without
// soft-cap and z-loss.
TEST(LinearLoss, GradientsMatchFiniteDifferences) {
  ThreadPool pool(2);
  const double dLoss = 1.7;
  for (const bool extras : {false, true}) {
    Problem<double> p = makeProblem<double>(6, 5, 11, 17, 4, 1.0, 1.0);
    LinearLossOptions loss;
    if (extras) {
      loss.softCap = 2.0;
      loss.zLossCoef = 0.05;
    }
    ChunkLossOptions chunkOptions;
    chunkOptions.chunkTokens = 4;
    chunkOptions.loss = loss;
    CceOptions cceOptions;
    cceOptions.tokenBlock = 4;
    cceOptions.vocabBlock = 3;
    cceOptions.loss = loss;
    auto chunkObjective = [&] {
      ChunkLossSaved<double> saved;
      return dLoss * chunkLossForward(pool, p.h, p.wv, p.targets, chunkOptions, saved).objective();
    };
    auto cceObjective = [&] {
      CceSaved<double> saved;
      return dLoss * cceForward(pool, p.h, p.wv, p.targets, cceOptions, saved).objective();
    };
    const std::string tag = extras ? " (soft-cap, z-loss)" : "";
    {
      ChunkLossSaved<double> saved;
      chunkLossForward(pool, p.h, p.wv, p.targets, chunkOptions, saved);
      Tensor<double> dWv({11, 5});
      Tensor<double> dh = chunkLossBackward(pool, saved, dLoss, dWv);
      expectGradientMatches("chunk dh" + tag, p.h, dh, chunkObjective);
      expectGradientMatches("chunk dWv" + tag, p.wv, dWv, chunkObjective);
    }
    {
      CceSaved<double> saved;
      cceForward(pool, p.h, p.wv, p.targets, cceOptions, saved);
      Tensor<double> dWv({11, 5});
      Tensor<double> dh = cceBackward(pool, p.h, p.wv, p.targets, cceOptions, saved, dLoss, dWv);
      expectGradientMatches("cce dh" + tag, p.h, dh, cceObjective);
      expectGradientMatches("cce dWv" + tag, p.wv, dWv, cceObjective);
    }
  }
}

TEST(LinearLoss, BackwardAccumulatesIntoWeightGrad) {
  ThreadPool pool(2);
  const Problem<float> p = makeProblem<float>(10, 8, 30, 23, 3);
  Rng rng(5);
  const Tensor<float> start = randomTensor<float>({30, 8}, rng);
  const Grads fresh = runChunk(pool, p, ChunkLossOptions{});
  {
    ChunkLossSaved<float> saved;
    chunkLossForward(pool, p.h, p.wv, p.targets, ChunkLossOptions{}, saved);
    Tensor<float> dWv = start.clone();
    chunkLossBackward(pool, saved, 1.0, dWv);
    for (int64_t i = 0; i < dWv.numel(); ++i) EXPECT_EQ(dWv[i], start[i] + fresh.dWv[i]);
  }
  {
    CceOptions options;
    options.vocabBlock = 7;
    CceSaved<float> saved;
    cceForward(pool, p.h, p.wv, p.targets, options, saved);
    Tensor<float> dWv = start.clone();
    cceBackward(pool, p.h, p.wv, p.targets, options, saved, 1.0, dWv);
    for (int64_t i = 0; i < dWv.numel(); ++i) {
      EXPECT_NEAR(dWv[i], start[i] + fresh.dWv[i], 1e-6f * (1 + std::abs(start[i])));
    }
  }
}

// Peaked logits (|Wv| large) make most softmax entries < 2^-28, so whole tiles get skipped.
TEST(LinearLoss, CceFilteredGradientIsCloseToExact) {
  ThreadPool pool(2);
  const Problem<float> p = makeProblem<float>(64, 32, 512, 31, 7, 1.0, 4.0);
  CceOptions exact;
  exact.tokenBlock = 4;
  exact.vocabBlock = 16;
  exact.filterEps = 0;
  exact.groupTokens = 24;
  CceStats exactStats;
  const Grads reference = runCce(pool, p, exact, &exactStats);
  EXPECT_EQ(exactStats.skippedTiles, 0);
  EXPECT_EQ(exactStats.tiles, 16 * 32);

  CceOptions filtered = exact;
  filtered.filterEps = kCceFilterAuto;
  EXPECT_EQ(cceFilterThreshold<float>(filtered), 0x1.0p-28);
  CceStats stats;
  const Grads dhOnly = runCce(pool, p, filtered, &stats);
  EXPECT_GT(stats.skippedTiles, stats.tiles / 10);
  EXPECT_LT(stats.skippedTiles, stats.tiles);
  EXPECT_EQ(dhOnly.loss, reference.loss);
  EXPECT_LT(relError(dhOnly.dh, reference.dh), 1e-3);
  EXPECT_TRUE(bitwiseEqual(dhOnly.dWv, reference.dWv));  // dWv stays exact by default

  filtered.filterWeightGrad = true;
  const Grads both = runCce(pool, p, filtered, &stats);
  EXPECT_LT(relError(both.dh, reference.dh), 1e-3);
  EXPECT_LT(relError(both.dWv, reference.dWv), 1e-3);
  EXPECT_TRUE(bitwiseEqual(both.dh, dhOnly.dh));
}

// Tensor bytes allocated during fn beyond those live before it.
template <typename Fn>
int64_t peakExtraBytes(Fn&& fn) {
  const int64_t base = TensorMemory::currentBytes();
  TensorMemory::resetPeak();
  fn();
  return TensorMemory::peakBytes() - base;
}

TEST(LinearLoss, CceNeverAllocatesFullLogits) {
  ThreadPool pool(2);
  const int64_t n = 2048, d = 32, vocab = 4096;
  const int64_t logitBytes = n * vocab * int64_t(sizeof(float));
  const Problem<float> p = makeProblem<float>(n, d, vocab, 41, 9);
  Tensor<float> dWv({vocab, d});
  const int64_t cce = peakExtraBytes([&] {
    CceSaved<float> saved;
    cceForward(pool, p.h, p.wv, p.targets, CceOptions{}, saved);
    Tensor<float> dh = cceBackward(pool, p.h, p.wv, p.targets, CceOptions{}, saved, 1.0, dWv);
  });
  // lse + 2 tasks' 64x256 scratch + the 1024x256 strip + dh: about 1.4 MB against 32 MB of
  // logits.
  EXPECT_LT(cce, logitBytes / 16);
  RecordProperty("cce_peak_extra_bytes", std::to_string(cce));

  ChunkLossOptions chunkOptions;
  chunkOptions.chunkTokens = 64;
  const int64_t chunk = peakExtraBytes([&] {
    ChunkLossSaved<float> saved;
    chunkLossForward(pool, p.h, p.wv, p.targets, chunkOptions, saved);
    Tensor<float> dh = chunkLossBackward(pool, saved, 1.0, dWv);
  });
  EXPECT_LE(chunk, (64 * vocab + n * d + vocab * d) * int64_t(sizeof(float)) + 4096);
  EXPECT_LT(chunk, logitBytes / 8);

  // The measurement does see the dense path's [N, V] logits.
  const int64_t dense = peakExtraBytes([&] { denseOracle(pool, p); });
  EXPECT_GE(dense, logitBytes);
}

TEST(LinearLoss, ResultsDoNotDependOnThreadCount) {
  const Problem<float> p = makeProblem<float>(203, 16, 301, 47, 6);
  ChunkLossOptions chunkOptions;
  chunkOptions.chunkTokens = 70;
  chunkOptions.loss.softCap = 5;
  chunkOptions.loss.zLossCoef = 1e-3;
  CceOptions cceOptions;
  cceOptions.tokenBlock = 16;
  cceOptions.vocabBlock = 32;
  cceOptions.groupTokens = 40;
  cceOptions.filterWeightGrad = true;
  cceOptions.loss = chunkOptions.loss;
  ThreadPool one(1);
  const Grads chunk1 = runChunk(one, p, chunkOptions);
  const Grads cce1 = runCce(one, p, cceOptions);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    const Grads chunk = runChunk(pool, p, chunkOptions);
    const Grads cce = runCce(pool, p, cceOptions);
    EXPECT_EQ(chunk.loss, chunk1.loss);
    EXPECT_TRUE(bitwiseEqual(chunk.dh, chunk1.dh)) << threads;
    EXPECT_TRUE(bitwiseEqual(chunk.dWv, chunk1.dWv)) << threads;
    EXPECT_EQ(cce.loss, cce1.loss);
    EXPECT_TRUE(bitwiseEqual(cce.dh, cce1.dh)) << threads;
    EXPECT_TRUE(bitwiseEqual(cce.dWv, cce1.dWv)) << threads;
  }
}

TEST(LinearLoss, ChunkAutoSizeFollowsLigerHeuristic) {
  EXPECT_EQ(chunkLossAutoTokens(2048, 32768, 128), 64);    // 2048 / 256 = 8 -> clamped to 64
  EXPECT_EQ(chunkLossAutoTokens(8192, 32768, 1024), 256);  // 8192 / 32 = 256
  EXPECT_EQ(chunkLossAutoTokens(37, 50, 24), 37);          // 37 / 3 -> 16 -> at least min(64, N)
  EXPECT_EQ(chunkLossAutoTokens(1, 257, 24), 1);
}

}  // namespace
}  // namespace moewb::engine
