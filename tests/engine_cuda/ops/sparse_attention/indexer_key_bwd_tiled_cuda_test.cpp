// The tiled key-side indexer backward (ops/sparse_attention/indexer_key_bwd_tiled.cuh) against the
// scalar indexer_key_bwd_kernel and references, both forced through setIndexerKeyBwdTiled:
// 1. dk straight from launchIndexerBackward (NaN-poisoned scratch) at awkward shapes (T not a
//    multiple of the key or query tile, top-k above the keys available early, B = 1 and 3, HI 4 /
//    8 / 16, dI 64 / 128, a case with enough tiles for KM = 64) vs the old kernel and an fp64
//    loop of dk = sum over the selection of coef qI (indexer.h) on the GPU's own coef: 1e-5.
// 2. The whole indexer backward (indexerBackwardCuda, HI = 8, dI = 64, B = 3, T = 77, top-24)
//    with the tiled kernel vs the CPU reference indexerBackward (1e-2, the indexer test's bound)
//    and vs the same call on the old kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/sparse_attention/indexer.h"
#include "ops/sparse_attention/selection.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

using IndexerKeyBwdTiledCudaTest = CudaTest;

// Gives the launchers their own choice back when a test ends (also on a failed assertion).
struct TiledModeGuard {
  ~TiledModeGuard() { setIndexerKeyBwdTiled(-1); }
};

struct KeyCase {
  int64_t batch, seqLen, heads, dim, topK;
};

// A top-k selection [B*T, min(topK, T)] of hashed scores with many ties (topKRow: ties to the
// earlier key), one row at a time (no [N, T] scores at long T).
Tensor<int32_t> randomSelection(int64_t batch, int64_t seqLen, int64_t topK, uint64_t seed) {
  const int64_t n = batch * seqLen, width = std::min(topK, seqLen);
  Tensor<int32_t> sel({n, width});
  std::vector<float> row(static_cast<size_t>(seqLen));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t s = 0; s <= r % seqLen; ++s) {
      uint64_t h = (seed * 0x9e3779b97f4a7c15ull) ^ uint64_t(r * 1000003 + s);
      h ^= h >> 31;
      h *= 0xbf58476d1ce4e5b9ull;
      h ^= h >> 29;
      row[size_t(s)] = float(h % 500);
    }
    topKRow(row.data(), r % seqLen + 1, width, sel.row(r), width);
  }
  return sel;
}

// fp64 dk [N, dI] = sum over (r, slot) with sel[r, slot] >= 0 and heads j of coef q.
Tensor<float> referenceDk(const Tensor<float>& q, const Tensor<float>& coef,
                          const Tensor<int32_t>& sel, int64_t seqLen, int64_t hi, int64_t di) {
  const int64_t n = sel.dim(0), width = sel.dim(1);
  std::vector<double> dk(size_t(n * di), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t slot = 0; slot < width; ++slot) {
      if (sel[r * width + slot] < 0) continue;
      const int64_t key = r - r % seqLen + sel[r * width + slot];
      for (int64_t j = 0; j < hi; ++j) {
        const double c = coef[(r * hi + j) * width + slot];
        for (int64_t d = 0; d < di; ++d) dk[size_t(key * di + d)] += c * q[(r * hi + j) * di + d];
      }
    }
  }
  Tensor<float> out({n, di});
  for (int64_t i = 0; i < out.numel(); ++i) out[i] = float(dk[size_t(i)]);
  return out;
}

TEST_F(IndexerKeyBwdTiledCudaTest, DkMatchesOldKernelAndFp64) {
  TiledModeGuard guard;
  uint64_t seed = 500;
  for (const KeyCase& kc : {KeyCase{3, 77, 8, 64, 24}, KeyCase{1, 130, 8, 128, 200},
                            KeyCase{3, 45, 4, 64, 16}, KeyCase{1, 95, 16, 128, 40},
                            KeyCase{3, 8200, 8, 64, 8}}) {
    const std::string where = "B=" + std::to_string(kc.batch) + " T=" +
                              std::to_string(kc.seqLen) + " HI=" + std::to_string(kc.heads) +
                              " dI=" + std::to_string(kc.dim) + " k=" + std::to_string(kc.topK);
    IndexerDims dims;
    dims.batch = kc.batch;
    dims.seqLen = kc.seqLen;
    dims.dModel = 16;
    dims.numHeads = kc.heads;
    dims.headDim = kc.dim;
    const int64_t n = dims.tokens(), hi = kc.heads, di = kc.dim;
    const Tensor<int32_t> sel = randomSelection(kc.batch, kc.seqLen, kc.topK, ++seed);
    const int64_t width = sel.dim(1);
    const Tensor<float> q = randomTensor({n, hi * di}, ++seed);
    Tensor<float> rstd = randomTensor({n}, ++seed, 1.0, true);
    for (int64_t i = 0; i < n; ++i) rstd[i] = 1.0f + 0.5f * rstd[i];
    MOEWB_ASSIGN_OR_FAIL(auto dQ, toDevice(context(), q, MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dK, toDevice(context(), randomTensor({n, di}, ++seed),
                                           MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dW, toDevice(context(), randomTensor({n, hi}, ++seed),
                                           MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dKHat, toDevice(context(), randomTensor({n, di}, ++seed),
                                              MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dRstd, toDevice(context(), rstd, MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDevice(context(), randomTensor({n, width}, ++seed),
                                                MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto gain, toDeviceBf16(context(), randomTensor({di}, ++seed),
                                                 MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dSel, toDevice(context(), sel, MemoryCategory::kWorkspace));
    SelectionTransposeCuda byKey;
    MOEWB_ASSERT_OK(transposeSelectionCuda(context(), dSel.data(), n, width, kc.seqLen, byKey));
    std::vector<Tensor<float>> dk, coef;
    for (int mode : {0, 1}) {
      setIndexerKeyBwdTiled(mode);
      MOEWB_ASSIGN_OR_FAIL(auto dCoef, poisonedFloat(context(), {n, hi, width}));
      MOEWB_ASSIGN_OR_FAIL(auto dDk, poisonedFloat(context(), {n, di}));
      MOEWB_ASSIGN_OR_FAIL(auto dwPre, poisonedBf16(context(), {n, hi}));
      MOEWB_ASSIGN_OR_FAIL(auto dq, poisonedBf16(context(), {n, hi * di}));
      MOEWB_ASSIGN_OR_FAIL(auto dkPre, poisonedBf16(context(), {n, di}));
      MOEWB_ASSIGN_OR_FAIL(auto dGain, toDevice(context(), Tensor<float>({di}),
                                                MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(auto dBias, toDevice(context(), Tensor<float>({di}),
                                                MemoryCategory::kWorkspace));
      const IndexerBackwardBuffers b{dQ.data(),    dK.data(),    dW.data(), dKHat.data(),
                                     dRstd.data(), dCoef.data(), dwPre.data(), dq.data(),
                                     dDk.data(),   dkPre.data()};
      MOEWB_ASSERT_OK(launchIndexerBackward(stream(), dims, b, dSel.data(), width,
                                            byKey.keyStart.data(), byKey.entries.data(),
                                            dLogits.data(), gain.data(), dGain.data(),
                                            dBias.data()));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dkGot, toHost(context(), dDk));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> coefGot, toHost(context(), dCoef));
      dk.push_back(std::move(dkGot));
      coef.push_back(std::move(coefGot));
    }
    const Tensor<float> want = referenceDk(q, coef[1], sel, kc.seqLen, hi, di);
    EXPECT_LT(relativeError(dk[1], want), 1e-5) << where;
    EXPECT_LT(relativeError(dk[0], want), 1e-5) << where;
    EXPECT_LT(relativeError(dk[1], dk[0]), 1e-5) << where;
  }
}

TEST_F(IndexerKeyBwdTiledCudaTest, IndexerBackwardMatchesReferenceAndOldKernel) {
  TiledModeGuard guard;
  ThreadPool pool(1);
  uint64_t seed = 900;
  IndexerDims dims;
  dims.batch = 3;
  dims.seqLen = 77;
  dims.dModel = 40;
  dims.numHeads = 8;
  dims.headDim = 64;
  const int64_t n = dims.tokens(), hi = dims.numHeads, di = dims.headDim, d = dims.dModel;
  const double scale = 1.0 / std::sqrt(double(d));
  const Tensor<float> x = roundedToBf16(randomTensor({n, d}, ++seed));
  std::vector<Tensor<float>> p;  // wq, wk, gain, bias, ww
  p.push_back(roundedToBf16(randomTensor({hi * di, d}, ++seed, scale)));
  p.push_back(roundedToBf16(randomTensor({di, d}, ++seed, scale)));
  p.push_back(roundedToBf16(randomTensor({di}, ++seed, 0.1)));
  p.push_back(roundedToBf16(randomTensor({di}, ++seed, 0.1)));
  p.push_back(roundedToBf16(randomTensor({hi, d}, ++seed, scale)));
  for (int64_t i = 0; i < di; ++i) p[2][i] += 1.0f;
  p[2] = roundedToBf16(p[2]);
  std::vector<DeviceTensor<bf16>> dp;
  for (const Tensor<float>& t : p) {
    MOEWB_ASSIGN_OR_FAIL(auto dt, toDeviceBf16(context(), t, MemoryCategory::kWeights));
    dp.push_back(std::move(dt));
  }
  MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
  const IndexerWeightsCuda weights{dp[0].data(), dp[1].data(), dp[2].data(), dp[3].data(),
                                   dp[4].data()};
  IndexerSavedCuda saved;
  MOEWB_ASSERT_OK(indexerForwardCuda(context(), dims, dX.data(), weights, saved));
  IndexerSaved<double> fromGpu;
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> qGot, toHost(context(), saved.q));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> kGot, toHost(context(), saved.k));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> kHatGot, toHost(context(), saved.kHat));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> rstdGot, toHost(context(), saved.rstd));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> wGot, toHost(context(), saved.w));
  fromGpu.q = toDouble(qGot);
  fromGpu.k = toDouble(kGot);
  fromGpu.kHat = toDouble(kHatGot);
  fromGpu.rstd = toDouble(rstdGot);
  fromGpu.w = toDouble(wGot);

  const Tensor<int32_t> sel = randomSelection(dims.batch, dims.seqLen, 24, ++seed);
  const int64_t width = sel.dim(1);
  Tensor<float> dLogits = randomTensor({n, width}, ++seed);
  for (int64_t i = 0; i < dLogits.numel(); ++i) dLogits[i] = sel[i] < 0 ? 0.0f : dLogits[i];
  MOEWB_ASSIGN_OR_FAIL(auto dSel, toDevice(context(), sel, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_FAIL(auto dDLogits, toDevice(context(), dLogits, MemoryCategory::kWorkspace));
  SelectionTransposeCuda byKey;
  MOEWB_ASSERT_OK(transposeSelectionCuda(context(), dSel.data(), n, width, dims.seqLen, byKey));

  std::vector<Tensor<double>> pd, want;
  for (const Tensor<float>& t : p) {
    pd.push_back(toDouble(t));
    want.emplace_back(t.shape());
  }
  const IndexerWeights<double> refWeights{pd[0], pd[1], pd[2], pd[3], pd[4]};
  const IndexerGrads<double> refGrads{want[0], want[1], want[2], want[3], want[4]};
  indexerBackward(pool, dims, toDouble(x), fromGpu, sel, toDouble(dLogits), refWeights, refGrads);

  std::vector<std::vector<Tensor<float>>> got(2);
  for (int mode : {0, 1}) {
    setIndexerKeyBwdTiled(mode);
    std::vector<DeviceTensor<float>> dg;
    for (const Tensor<float>& t : p) {
      MOEWB_ASSIGN_OR_FAIL(auto g, toDevice(context(), Tensor<float>(t.shape()),
                                            MemoryCategory::kGrads));
      dg.push_back(std::move(g));
    }
    const IndexerGradsCuda grads{dg[0].data(), dg[1].data(), dg[2].data(), dg[3].data(),
                                 dg[4].data()};
    MOEWB_ASSERT_OK(indexerBackwardCuda(context(), dims, dX.data(), saved, dSel.data(), width,
                                        byKey, dDLogits.data(), weights, grads));
    for (const DeviceTensor<float>& g : dg) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> h, toHost(context(), g));
      got[size_t(mode)].push_back(std::move(h));
    }
  }
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_LT(relativeError(got[1][i], toFloat(want[i])), 1e-2) << "indexer grad " << i;
    // dkPre is bf16 from an fp32 dk ~1e-7 apart: at most a last-bit flip per element.
    EXPECT_LT(relativeError(got[1][i], got[0][i]), 1e-3) << "indexer grad " << i;
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
