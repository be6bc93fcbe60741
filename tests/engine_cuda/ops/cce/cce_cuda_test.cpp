// cceForwardCuda / cceBackwardCuda against ops/cce (double, exact: no gradient filtering): lse,
// loss, z-loss, dh and dWv (added into random initial values), with several strips per token
// group and a partial last vocabulary block, soft-cap and z-loss on and off, ignored targets,
// and a batch with no valid target; and the filtered backward (filterEps) against the filtered
// reference, on the tile-skipping GEMMs and on the zeroing path.
#include "ops/cce/cce_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cce/cce.h"

namespace moewb::engine::cuda {
namespace {

using CceCudaTest = CudaTest;

struct CceCase {
  int64_t n, d, vocab, groupTokens, vocabBlock;
  double softCap, zLossCoef;
  bool noneValid;
};

void runCase(CudaContext& context, const CceCase& c, uint64_t seed) {
  ThreadPool pool(1);
  Tensor<float> h = roundedToBf16(randomTensor({c.n, c.d}, seed));
  Tensor<float> wv =
      roundedToBf16(randomTensor({c.vocab, c.d}, seed + 1, 3.0 / std::sqrt(double(c.d))));
  Tensor<float> dWv0 = randomTensor({c.vocab, c.d}, seed + 2, 0.01);
  Tensor<int32_t> targets({c.n});
  for (int64_t i = 0; i < c.n; ++i) {
    targets[i] = int32_t((i * 37 + 11) % c.vocab);
    if (i % 7 == 3 || c.noneValid) targets[i] = kDefaultIgnoreIndex;
  }
  const float dLoss = 1.25f;
  CceCudaOptions options;
  options.groupTokens = c.groupTokens;
  options.vocabBlock = c.vocabBlock;
  options.loss.softCap = c.softCap;
  options.loss.zLossCoef = c.zLossCoef;

  MOEWB_ASSIGN_OR_FAIL(auto dH, toDeviceBf16(context, h, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dWv, toDeviceBf16(context, wv, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dTargets, toDevice(context, targets, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dGradWv, toDevice(context, dWv0, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dLossOut, poisonedFloat(context, {2}));
  MOEWB_ASSIGN_OR_FAIL(auto dDh, poisonedBf16(context, {c.n, c.d}));
  CceSavedCuda saved;
  MOEWB_ASSERT_OK(cceForwardCuda(context, dH.data(), dWv.data(), dTargets.data(), c.n, c.d, c.vocab,
                                 options, saved, dLossOut.data(), dLossOut.data() + 1));
  MOEWB_ASSERT_OK(cceBackwardCuda(context, dH.data(), dWv.data(), dTargets.data(), c.n, c.d,
                                  c.vocab, options, saved, dLoss, dDh.data(), dGradWv.data()));

  CceOptions refOptions;
  refOptions.filterEps = 0;  // exact
  refOptions.loss = options.loss;
  CceSaved<double> refSaved;
  Tensor<double> hd = toDouble(h), wvd = toDouble(wv);
  const LinearLossResult want = cceForward<double>(pool, hd, wvd, targets, refOptions, refSaved);
  Tensor<double> dWvWant = toDouble(dWv0);
  Tensor<double> dhWant =
      cceBackward<double>(pool, hd, wvd, targets, refOptions, refSaved, dLoss, dWvWant);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lossGot, toHost(context, dLossOut));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> validGot, toHost(context, saved.validCount));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dhGot, toHostFloat(context, dDh));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dWvGot, toHost(context, dGradWv));
  EXPECT_EQ(validGot[0], want.validTokens);
  EXPECT_NEAR(lossGot[0], want.loss, 1e-5 * std::max(1.0, std::fabs(want.loss)));
  EXPECT_NEAR(lossGot[1], want.zLoss, 1e-5 * std::max(1.0, std::fabs(want.zLoss)));
  if (c.noneValid) {
    for (int64_t i = 0; i < dhGot.numel(); ++i) ASSERT_EQ(dhGot[i], 0.0f) << i;
    for (int64_t i = 0; i < dWvGot.numel(); ++i) ASSERT_EQ(dWvGot[i], dWv0[i]) << i;
    return;
  }
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context, saved.lse));
  EXPECT_LT(relativeError(lseGot, toFloat(refSaved.lse)), 1e-5);
  EXPECT_LT(relativeError(dhGot, toFloat(dhWant)), 1e-2);
  EXPECT_LT(relativeError(minus(dWvGot, dWv0), minus(toFloat(dWvWant), dWv0)), 1e-2);
}

TEST_F(CceCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 9000;
  const CceCase cases[] = {
      {1, 8, 5, 4096, 4096, 0.0, 0.0, false},
      {63, 48, 1000, 16, 128, 0.0, 0.0, false},   // 4 token groups x 8 vocab blocks (last partial)
      {63, 48, 1000, 20, 333, 5.0, 1e-3, false},  // soft-cap and z-loss
      {130, 64, 3001, 4096, 4096, 0.0, 1e-2, false},
  };
  for (const CceCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.n << "x" << c.d << " V" << c.vocab << " group " << c.groupTokens << " block "
                 << c.vocabBlock << " cap " << c.softCap << " z " << c.zLossCoef);
    runCase(context(), c, seed += 10);
  }
}

TEST_F(CceCudaTest, NoValidTargetGivesZeroLossAndGradients) {
  runCase(context(), CceCase{17, 16, 40, 8, 16, 0.0, 0.0, true}, 9500);
}

// Gradient filtering. Feature 0 of h is 1 and wv[v, 0] a per-256-entry-block bias: hot blocks 0
// and 3 (targets, so their tiles always keep), warm blocks 1, 2, 4, 5, 6 (p ~ 1.5e-4, about a
// fifth of the probability mass: filtered at 1e-3, a large share of dh) and cold blocks 7.. (p ~
// 1e-16: filtered by the auto threshold too). A few tokens of the second token tile also target
// block 1, so the CTAs of the tile-skipping GEMMs (128 rows or vocabulary columns) meet kept and
// filtered tiles side by side. The GPU must give the reference's filtered result, with the
// reference's blocks = the GPU's filter tiles.
struct FilterCase {
  double filterEps;  // CceCudaOptions::filterEps (kCceFilterAuto: the reference's own rule)
  bool filterWeightGrad;
  int64_t groupTokens;  // GPU strip rows (rounded down to whole 64-token tiles)
  int64_t stripCols;    // GPU strip columns (CceCudaOptions::vocabBlock)
  int64_t tileCols;     // filter tile columns (the reference's vocabBlock)
  int64_t d;            // not a multiple of 8: the zeroing path instead of the skipping GEMMs
};

void runFilterCase(CudaContext& context, const FilterCase& fc, uint64_t seed) {
  constexpr int64_t n = 130, vocab = 3001, biasBlock = 256, tokenBlock = 64;
  const int64_t d = fc.d;
  ThreadPool pool(2);
  Tensor<float> h = randomTensor({n, d}, seed);
  for (int64_t t = 0; t < n; ++t) h[t * d] = 1.0f;
  h = roundedToBf16(h);
  Tensor<float> wv = randomTensor({vocab, d}, seed + 1, 0.3 / std::sqrt(double(d)));
  for (int64_t v = 0; v < vocab; ++v) {
    const int64_t b = v / biasBlock;
    wv[v * d] = (b == 0 || b == 3) ? 1.0f : b <= 6 ? -1.5f : -29.0f;
  }
  wv = roundedToBf16(wv);
  Tensor<float> dWv0 = randomTensor({vocab, d}, seed + 2, 0.01);
  Tensor<int32_t> targets({n});
  for (int64_t i = 0; i < n; ++i) {
    targets[i] = int32_t((i * 37 + 11) % biasBlock + (i % 2 == 0 ? 3 * biasBlock : 0));
    if (i >= tokenBlock && i < 2 * tokenBlock && i % 9 == 0) {
      targets[i] = int32_t(biasBlock + (i * 13) % biasBlock);  // warm block 1, token tile 1
    }
    if (i % 7 == 3) targets[i] = kDefaultIgnoreIndex;
  }
  const float dLoss = 1.25f;
  CceCudaOptions options;
  options.groupTokens = fc.groupTokens;
  options.vocabBlock = fc.stripCols;
  options.filterEps = fc.filterEps;
  options.filterTokenBlock = tokenBlock;
  options.filterVocabBlock = fc.tileCols == fc.stripCols ? 0 : fc.tileCols;
  options.filterWeightGrad = fc.filterWeightGrad;

  MOEWB_ASSIGN_OR_FAIL(auto dH, toDeviceBf16(context, h, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dWv, toDeviceBf16(context, wv, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dTargets, toDevice(context, targets, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dGradWv, toDevice(context, dWv0, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dLossOut, poisonedFloat(context, {1}));
  MOEWB_ASSIGN_OR_FAIL(auto dDh, poisonedBf16(context, {n, d}));
  CceSavedCuda saved;
  MOEWB_ASSERT_OK(cceForwardCuda(context, dH.data(), dWv.data(), dTargets.data(), n, d, vocab,
                                 options, saved, dLossOut.data(), nullptr));
  MOEWB_ASSERT_OK(cceBackwardCuda(context, dH.data(), dWv.data(), dTargets.data(), n, d, vocab,
                                  options, saved, dLoss, dDh.data(), dGradWv.data()));

  // The reference in double with the threshold the GPU uses (the auto rule of float: a double
  // reference's own auto would be epsilon<double> / 32).
  CceOptions gpuRule;
  gpuRule.filterEps = fc.filterEps;
  const double threshold = cceFilterThreshold<float>(gpuRule);
  CceOptions refOptions;
  refOptions.tokenBlock = tokenBlock;
  refOptions.vocabBlock = fc.tileCols;
  refOptions.filterEps = threshold;
  refOptions.filterWeightGrad = fc.filterWeightGrad;
  CceSaved<double> refSaved;
  Tensor<double> hd = toDouble(h), wvd = toDouble(wv);
  cceForward<double>(pool, hd, wvd, targets, refOptions, refSaved);
  Tensor<double> dWvWant = toDouble(dWv0);
  CceStats stats;
  Tensor<double> dhWant =
      cceBackward<double>(pool, hd, wvd, targets, refOptions, refSaved, dLoss, dWvWant, &stats);
  CceOptions exactOptions = refOptions;
  exactOptions.filterEps = 0;
  Tensor<double> dWvExact = toDouble(dWv0);
  Tensor<double> dhExact =
      cceBackward<double>(pool, hd, wvd, targets, exactOptions, refSaved, dLoss, dWvExact);

  // The inputs do what they should: many tiles filtered, a kept and a filtered tile side by side
  // in one block of 128 tokens, and every tile's max |dz / g_t| far from the threshold (fp32 vs
  // double cannot flip a decision).
  const int64_t tokenTiles = (n + tokenBlock - 1) / tokenBlock;
  const int64_t vocabTiles = (vocab + fc.tileCols - 1) / fc.tileCols;
  EXPECT_EQ(stats.tiles, tokenTiles * vocabTiles);
  EXPECT_GE(stats.skippedTiles, stats.tiles / 3);
  EXPECT_LT(stats.skippedTiles, stats.tiles);
  std::vector<std::vector<bool>> kept(static_cast<size_t>(tokenTiles),
                                      std::vector<bool>(static_cast<size_t>(vocabTiles)));
  for (int64_t tt = 0; tt < tokenTiles; ++tt) {
    const int64_t t0 = tt * tokenBlock;
    for (int64_t vt = 0; vt < vocabTiles; ++vt) {
      const int64_t v0 = vt * fc.tileCols;
      double maxAbs = 0;
      for (int64_t t = t0; t < std::min(n, t0 + tokenBlock); ++t) {
        if (targets[t] == kDefaultIgnoreIndex) continue;
        for (int64_t v = v0; v < std::min(vocab, v0 + fc.tileCols); ++v) {
          double z = 0;
          for (int64_t j = 0; j < d; ++j) z += hd[t * d + j] * wvd[v * d + j];
          maxAbs = std::max(
              maxAbs, std::fabs(std::exp(z - refSaved.lse[t]) - (v == targets[t] ? 1.0 : 0.0)));
        }
      }
      EXPECT_TRUE(maxAbs < threshold / 1.25 || maxAbs > threshold * 1.25)
          << "tile " << t0 << "," << v0 << ": " << maxAbs << " vs " << threshold;
      kept[size_t(tt)][size_t(vt)] = maxAbs >= threshold;
    }
  }
  if (fc.filterEps > 0) {
    bool mixed = false;  // token tiles 0 and 1 disagree on some vocabulary tile
    for (int64_t vt = 0; vt < vocabTiles; ++vt) {
      mixed = mixed || kept[0][size_t(vt)] != kept[1][size_t(vt)];
    }
    EXPECT_TRUE(mixed);
    EXPECT_GT(relativeError(toFloat(dhWant), toFloat(dhExact)), 0.05);  // not the exact result
  }

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dhGot, toHostFloat(context, dDh));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dWvGot, toHost(context, dGradWv));
  EXPECT_LT(relativeError(dhGot, toFloat(dhWant)), 1e-2);
  EXPECT_LT(relativeError(minus(dWvGot, dWv0), minus(toFloat(dWvWant), dWv0)), 1e-2);
}

TEST_F(CceCudaTest, FilteredBackwardMatchesFilteredReference) {
  uint64_t seed = 9700;
  const FilterCase cases[] = {
      {1e-3, false, 4096, 256, 256, 48},          // one strip per vocab block
      {1e-3, false, 100, 256, 256, 48},           // strips of 64 tokens (whole tiles)
      {1e-3, true, 100, 256, 256, 48},            // dWv filtered too
      {kCceFilterAuto, false, 64, 256, 256, 48},  // epsilon<float> / 32: only the cold blocks
      {1e-3, true, 4096, 1024, 256, 48},          // strips of 4 tiles
      {1e-3, false, 192, 2048, 256, 48},          // 3 token tiles x 8 vocabulary tiles a strip
      {1e-3, true, 4096, 1000, 64, 48},           // 64-wide tiles: dWv CTAs span 2 of them
      {1e-3, true, 4096, 1024, 256, 50},          // d = 50: filtered tiles zeroed, cuBLAS
      {1e-3, false, 4096, 1024, 100, 48},         // tiles of 100 columns: the same
  };
  for (const FilterCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "eps " << c.filterEps << " weights " << c.filterWeightGrad
                                    << " group " << c.groupTokens << " strip " << c.stripCols
                                    << " tile " << c.tileCols << " d " << c.d);
    runFilterCase(context(), c, seed += 10);
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
