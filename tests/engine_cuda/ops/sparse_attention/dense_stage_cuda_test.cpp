// The gated sparse attention layer's dense warm-up stage on flash kernels
// (ops/sparse_attention/dense_stage_cuda.h) against the CPU reference in double on bf16-rounded
// inputs: the core over the causal selection (context, sinkProbs, lse = kappa - ln p_sink), the
// indexer target p* recomputed from lse, dq, dk, dv and the added sink gradient, at awkward shapes
// (T = 1, not a multiple of 64 or 128; H = 1, 3, 6, 20; Hkv = 1, 2, 3, 4; dh 64 and 128), and
// the whole layer in the dense stage with dh = 64 (the path the layer takes when
// denseStageFlashApplies). Outputs are poisoned with NaN first; the backward runs twice and is
// compared bit for bit.
#include "ops/sparse_attention/dense_stage_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/sparse_attention/selection.h"
#include "ops/sparse_attention/sparse_attention.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace moewb::engine::cuda {
namespace {

using DenseStageCudaTest = CudaTest;

struct Case {
  int64_t batch, seqLen, heads, kvHeads, headDim;
};

SparseAttentionDims makeDims(const Case& c) {
  SparseAttentionDims dims;
  dims.batch = c.batch;
  dims.seqLen = c.seqLen;
  dims.dModel = 48;
  dims.numHeads = c.heads;
  dims.kvHeads = c.kvHeads;
  dims.headDim = c.headDim;
  dims.indexerHeads = 3;
  dims.indexerDim = 20;
  dims.topK = 4;
  dims.stage = SparseStage::kDenseWarmup;
  dims.indexerLossCoef = 0.7;
  return dims;
}

Tensor<float> rnd(const std::vector<int64_t>& shape, uint64_t seed, double scale = 1.0) {
  return roundedToBf16(randomTensor(shape, seed, scale));
}

// a - b (same shapes), in float.
Tensor<float> change(const Tensor<double>& a, const Tensor<float>& b) {
  Tensor<float> y(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = float(a[i] - double(b[i]));
  return y;
}

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seqLen) + " H=" +
         std::to_string(c.heads) + " Hkv=" + std::to_string(c.kvHeads) + " dh=" +
         std::to_string(c.headDim);
}

TEST_F(DenseStageCudaTest, ForwardTargetBackwardMatchReferenceAtAwkwardShapes) {
  ThreadPool pool(1);
  uint64_t seed = 900;
  const Case cases[] = {{2, 1, 4, 1, 64},   {2, 77, 3, 1, 64},   {1, 130, 16, 2, 128},
                        {2, 200, 20, 4, 64}, {1, 65, 6, 3, 128}, {1, 129, 1, 1, 128}};
  for (const Case& c : cases) {
    const SparseAttentionDims dims = makeDims(c);
    ASSERT_TRUE(denseStageFlashApplies(dims)) << describe(c);
    const std::string where = describe(c);
    const int64_t n = dims.tokens(), qw = dims.qWidth(), kvw = dims.kvWidth(), t = c.seqLen;
    const int64_t heads = c.heads;
    Tensor<float> q = rnd({n, qw}, ++seed, 2.0), k = rnd({n, kvw}, ++seed),
                  v = rnd({n, kvw}, ++seed), sink = rnd({heads}, ++seed, 1.5);
    MOEWB_ASSIGN_OR_FAIL(auto dQ, toDeviceBf16(context(), q, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dK, toDeviceBf16(context(), k, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dV, toDeviceBf16(context(), v, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dSink, toDeviceBf16(context(), sink, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dLse, poisonedFloat(context(), {c.batch, heads, t}));
    MOEWB_ASSIGN_OR_FAIL(auto dSinkProbs, poisonedFloat(context(), {n, heads}));
    MOEWB_ASSIGN_OR_FAIL(auto dCtx, poisonedBf16(context(), {n, qw}));
    MOEWB_ASSIGN_OR_FAIL(auto dTarget, poisonedFloat(context(), {n, t}));
    MOEWB_ASSERT_OK(denseStageForwardCuda(stream(), dims, dQ.data(), dK.data(), dV.data(),
                                          dSink.data(), dLse.data(), dSinkProbs.data(),
                                          dCtx.data()));
    MOEWB_ASSERT_OK(
        denseStageTargetCuda(stream(), dims, dQ.data(), dK.data(), dLse.data(), dTarget.data()));

    SparseAttentionSaved<double> ref;
    ref.q = toDouble(q);
    ref.k = toDouble(k);
    ref.v = toDouble(v);
    ref.selected = causalSelection(c.batch, t);
    sparseAttentionCoreForward(pool, dims, ref.q, ref.k, ref.v, toDouble(sink), ref.selected,
                               ref.probs, ref.sinkProbs, ref.context);
    Tensor<double> lseWant({c.batch, heads, t});  // lse = kappa - ln p_sink
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        lseWant[((r / t) * heads + h) * t + r % t] =
            double(sink[h]) - std::log(ref.sinkProbs.at(r, h));
      }
    }
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> lse, toHost(context(), dLse));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> sinkProbs, toHost(context(), dSinkProbs));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> ctx, toHostFloat(context(), dCtx));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> target, toHost(context(), dTarget));
    EXPECT_LT(relativeError(lse, toFloat(lseWant)), 1e-4) << where;
    EXPECT_LT(relativeError(sinkProbs, toFloat(ref.sinkProbs)), 1e-4) << where;
    EXPECT_LT(relativeError(ctx, toFloat(ref.context)), 1e-2) << where;
    // p* in the causal selection's [N, W = T] layout, exactly 0 past the diagonal.
    const Tensor<double> targetWant = indexerTargetFromProbs(pool, ref.probs, ref.selected);
    EXPECT_LT(relativeError(target, toFloat(targetWant)), 1e-4) << where;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t s = r % t + 1; s < t; ++s) ASSERT_EQ(target.at(r, s), 0.0f) << where;
    }

    Tensor<float> dOut = rnd({n, qw}, ++seed);
    Tensor<float> dSink0 = randomTensor({heads}, ++seed, 0.1);
    MOEWB_ASSIGN_OR_FAIL(auto dDOut, toDeviceBf16(context(), dOut, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dDSink, toDevice(context(), dSink0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dWs,
                         context().newTensor<float>({denseStageBackwardWorkspaceFloats(dims)},
                                                    MemoryCategory::kWorkspace));
    std::vector<Tensor<float>> runs;  // dq, dk, dv, dSink of each run
    for (int run = 0; run < 2; ++run) {
      MOEWB_ASSIGN_OR_FAIL(auto dDq, poisonedBf16(context(), {n, qw}));
      MOEWB_ASSIGN_OR_FAIL(auto dDk, poisonedBf16(context(), {n, kvw}));
      MOEWB_ASSIGN_OR_FAIL(auto dDv, poisonedBf16(context(), {n, kvw}));
      MOEWB_ASSERT_OK(copyToDevice(context(), dSink0, dDSink));
      MOEWB_ASSERT_OK(denseStageBackwardCuda(stream(), dims, dDOut.data(), dQ.data(), dK.data(),
                                             dV.data(), dCtx.data(), dLse.data(),
                                             dSinkProbs.data(), dWs.data(), dDq.data(),
                                             dDk.data(), dDv.data(), dDSink.data()));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dq, toHostFloat(context(), dDq));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dk, toHostFloat(context(), dDk));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dv, toHostFloat(context(), dDv));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> ds, toHost(context(), dDSink));
      runs.push_back(std::move(dq));
      runs.push_back(std::move(dk));
      runs.push_back(std::move(dv));
      runs.push_back(std::move(ds));
    }
    // The reference backward reads the GPU's bf16 context (what the GPU's delta uses).
    ref.context = toDouble(ctx);
    Tensor<double> dq, dk, dv, dSinkWant = toDouble(dSink0);
    sparseAttentionCoreBackward(pool, dims, toDouble(dOut), ref, dq, dk, dv, dSinkWant);
    EXPECT_LT(relativeError(runs[0], toFloat(dq)), 1e-2) << where;
    EXPECT_LT(relativeError(runs[1], toFloat(dk)), 1e-2) << where;
    EXPECT_LT(relativeError(runs[2], toFloat(dv)), 1e-2) << where;
    EXPECT_LT(relativeError(minus(runs[3], dSink0), change(dSinkWant, dSink0)), 1e-2) << where;
    for (int i = 0; i < 4; ++i) {
      for (int64_t e = 0; e < runs[i].numel(); ++e) {
        ASSERT_EQ(runs[i][e], runs[4 + i][e]) << where << " output " << i << " element " << e;
      }
    }
  }
}

// The whole layer in the dense warm-up stage at dh = 64 (the flash path): y, sinkProbs, lse in
// saved.probs, p*, the indexer's probabilities and KL, dx and every weight gradient.
TEST_F(DenseStageCudaTest, LayerDenseStageMatchesReference) {
  ThreadPool pool(1);
  uint64_t seed = 1300;
  const Case cases[] = {{2, 1, 4, 1, 64}, {2, 77, 3, 1, 64}, {1, 70, 4, 2, 64}};
  for (const Case& c : cases) {
    const SparseAttentionDims dims = makeDims(c);
    ASSERT_TRUE(denseStageFlashApplies(dims));
    const std::string where = describe(c);
    const int64_t n = dims.tokens(), d = dims.dModel;
    Tensor<float> x = rnd({n, d}, ++seed), dy = rnd({n, d}, ++seed);
    std::vector<Tensor<float>> p, g0;
    std::vector<DeviceTensor<bf16>> dp;
    std::vector<DeviceTensor<float>> dg;
    std::vector<Tensor<double>> pd, gWant;
    for (const auto& spec : sparseAttentionParameterShapes(dims)) {
      Tensor<float> w = rnd(spec.shape, ++seed, 1.0 / std::sqrt(double(d)));
      if (spec.name == "sink") w = rnd(spec.shape, seed, 1.0);
      if (spec.name == "indexer.k_norm.gain") {
        for (int64_t i = 0; i < w.numel(); ++i) w[i] += 1.0f;
        w = roundedToBf16(w);
      }
      MOEWB_ASSIGN_OR_FAIL(auto dw, toDeviceBf16(context(), w, MemoryCategory::kWeights));
      dp.push_back(std::move(dw));
      pd.push_back(toDouble(w));
      g0.push_back(randomTensor(w.shape(), ++seed, 0.05));
      MOEWB_ASSIGN_OR_FAIL(auto gd, toDevice(context(), g0.back(), MemoryCategory::kGrads));
      dg.push_back(std::move(gd));
      gWant.push_back(toDouble(g0.back()));
      p.push_back(std::move(w));
    }
    const SparseAttentionWeightsCuda weights{
        dp[0].data(), dp[1].data(), dp[2].data(), dp[3].data(), dp[4].data(), dp[5].data(),
        dp[6].data(), dp[7].data(), dp[8].data(), dp[9].data(), dp[10].data()};
    const SparseAttentionGradsCuda grads{dg[0].data(), dg[1].data(), dg[2].data(), dg[3].data(),
                                         dg[4].data(), dg[5].data(), dg[6].data(), dg[7].data(),
                                         dg[8].data(), dg[9].data(), dg[10].data()};
    MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
    MOEWB_ASSIGN_OR_FAIL(auto dDx, poisonedBf16(context(), {n, d}));
    SparseAttentionSavedCuda saved;
    MOEWB_ASSERT_OK(
        sparseAttentionForwardCuda(context(), dims, dX.data(), weights, saved, dY.data()));
    MOEWB_ASSERT_OK(sparseAttentionBackwardCuda(context(), dims, dDy.data(), dX.data(), weights,
                                                saved, grads, dDx.data()));

    const SparseAttentionWeights<double> refWeights{pd[0], pd[1], pd[2], pd[3], pd[4], pd[5],
                                                    pd[6], pd[7], pd[8], pd[9], pd[10]};
    const SparseAttentionGrads<double> refGrads{gWant[0], gWant[1], gWant[2], gWant[3],
                                                gWant[4], gWant[5], gWant[6], gWant[7],
                                                gWant[8], gWant[9], gWant[10]};
    SparseAttentionSaved<double> ref;
    const Tensor<double> yWant = sparseAttentionForward(pool, dims, toDouble(x), refWeights, ref);
    const Tensor<double> dxWant =
        sparseAttentionBackward(pool, dims, toDouble(dy), toDouble(x), refWeights, ref, refGrads);

    ASSERT_EQ(saved.probs.rank(), 3);  // lse [B, H, T] on this path
    EXPECT_EQ(saved.probs.dim(0), c.batch);
    EXPECT_EQ(saved.probs.dim(1), c.heads);
    EXPECT_EQ(saved.probs.dim(2), c.seqLen);
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> y, toHostFloat(context(), dY));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dx, toHostFloat(context(), dDx));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> sinkProbs, toHost(context(), saved.sinkProbs));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> target, toHost(context(), saved.indexerTarget));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> iprobs, toHost(context(), saved.indexerProbs));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> kl, toHost(context(), saved.indexerKl));
    EXPECT_LT(relativeError(y, toFloat(yWant)), 1e-2) << where;
    EXPECT_LT(relativeError(sinkProbs, toFloat(ref.sinkProbs)), 2e-2) << where;
    EXPECT_LT(relativeError(target, toFloat(ref.indexerTarget)), 2e-2) << where;
    EXPECT_LT(relativeError(iprobs, toFloat(ref.indexerProbs)), 1e-3) << where;
    EXPECT_NEAR(kl[0], ref.indexerKl, 5e-2 * std::fabs(ref.indexerKl) + 1e-5) << where;
    EXPECT_LT(relativeError(dx, toFloat(dxWant)), 2e-2) << where;
    const auto names = sparseAttentionParameterShapes(dims);
    for (size_t i = 0; i < dg.size(); ++i) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHost(context(), dg[i]));
      const double bound = names[i].name.rfind("indexer.", 0) == 0 ? 5e-2 : 2e-2;
      const Tensor<float> gotDelta = minus(got, g0[i]);
      const Tensor<float> wantDelta = change(gWant[i], g0[i]);
      if (maxAbsDifference(wantDelta, Tensor<float>(wantDelta.shape())) < 1e-7) {
        // T = 1: one key, the indexer's softmax is constant and its gradient vanishes.
        EXPECT_LT(maxAbsDifference(gotDelta, wantDelta), 1e-6) << names[i].name << " " << where;
      } else {
        EXPECT_LT(relativeError(gotDelta, wantDelta), bound) << names[i].name << " " << where;
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
