// The chunked KDA core on the GPU against the CPU references in double (kdaChunkForward /
// kdaChunkBackward on the same bf16-rounded inputs, and kdaNaiveForward): B = 2, T in
// {1, 63, 64, 130} (partial last chunks), 2 heads, head dims 16 and 64, chunks 16 and 64, a
// nonzero initial state and final-state gradient, plus a GVA case, one head at the model's dims,
// and gates at the lower bound (g = -5 every step: a 64-token chunk reaches G = -320, so any
// exp(-G) would overflow). Outputs are NaN-poisoned. The recurrences, the backward's products
// and, when chunk / keyDim are multiples of 16 and valueDim of 8, the intra-chunk forward and the
// per-chunk backward run on tensor cores with split bf16 hi + lo operands (~1e-5 relative), so
// the tolerances are those of the fp32 kernels; the shapes cover both paths (K = 40, V = 24 run
// the fp32 intra / per-chunk kernels; K = 48, V = 8, C = 32 with a 13-token last chunk the
// tensor-core ones). A second run must reproduce the backward bitwise when HV == H. Many-head
// cases cover both value tiles of the round-3 recurrences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "cuda_test_util.h"
#include "ops/kda/kda.h"
#include "ops/kda/kda_cuda.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using KdaChunkCudaTest = CudaTest;

// Host inputs of the core, already rounded as the GPU sees them (q, k, v, dO bf16; the rest fp32).
struct CoreInputs {
  Tensor<float> q, k, v, g, beta, s0, dO, dSFinal;
};

// q, k L2-normalised per head (q also scaled by K^-1/2, as the layer feeds them), g in (-5, 0)
// with most values near 0 (or -5 everywhere with lowerBound), beta in (0, 1).
CoreInputs makeInputs(const KdaCoreDims& dims, uint64_t seed, bool withState,
                      bool lowerBound = false) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  CoreInputs in;
  in.q = randomTensor({n, h * kd}, seed + 1);
  in.k = randomTensor({n, h * kd}, seed + 2);
  for (Tensor<float>* x : {&in.q, &in.k}) {
    const float scale = x == &in.q ? float(1.0 / std::sqrt(double(kd))) : 1.f;
    for (int64_t row = 0; row < n * h; ++row) {
      float* p = x->data() + row * kd;
      double sum = 0;
      for (int64_t d = 0; d < kd; ++d) sum += double(p[d]) * p[d];
      const float r = float(1.0 / std::sqrt(sum + 1e-6));
      for (int64_t d = 0; d < kd; ++d) p[d] *= r * scale;
    }
    *x = roundedToBf16(*x);
  }
  in.v = roundedToBf16(randomTensor({n, hv * vd}, seed + 3));
  in.g = randomTensor({n, hv * kd}, seed + 4, 1.0, true);
  for (int64_t i = 0; i < in.g.numel(); ++i) {
    const float u = std::fabs(in.g[i]);
    in.g[i] = lowerBound ? -5.f : -5.f * u * u * u - 0.01f;
  }
  in.beta = randomTensor({n, hv}, seed + 5, 2.0);
  for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta[i] = 1.f / (1.f + std::exp(-in.beta[i]));
  if (withState) {
    in.s0 = randomTensor({dims.batch, hv, kd, vd}, seed + 6, 0.5);
    in.dSFinal = randomTensor({dims.batch, hv, kd, vd}, seed + 7, 0.5);
  }
  in.dO = roundedToBf16(randomTensor({n, hv * vd}, seed + 8));
  return in;
}

std::string label(const KdaCoreDims& dims) {
  return "T=" + std::to_string(dims.seqLen) + " K=" + std::to_string(dims.keyDim) +
         " C=" + std::to_string(dims.chunk) + " HV=" + std::to_string(dims.valueHeads());
}

// Runs forward and backward on the GPU and compares with the double references.
void checkCore(CudaContext& context, const KdaCoreDims& dims, uint64_t seed, bool withState,
               bool lowerBound = false) {
  SCOPED_TRACE(label(dims) + (lowerBound ? " g=-5" : ""));
  ThreadPool pool(2);
  const CoreInputs in = makeInputs(dims, seed, withState, lowerBound);
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  const std::vector<int64_t> stateShape = {dims.batch, hv, kd, vd};
  const MemoryCategory act = MemoryCategory::kActivations;

  MOEWB_ASSIGN_OR_FAIL(auto q, toDeviceBf16(context, in.q, act));
  MOEWB_ASSIGN_OR_FAIL(auto k, toDeviceBf16(context, in.k, act));
  MOEWB_ASSIGN_OR_FAIL(auto v, toDeviceBf16(context, in.v, act));
  MOEWB_ASSIGN_OR_FAIL(auto g, toDevice(context, in.g, act));
  MOEWB_ASSIGN_OR_FAIL(auto beta, toDevice(context, in.beta, act));
  MOEWB_ASSIGN_OR_FAIL(auto dO, toDeviceBf16(context, in.dO, act));
  DeviceTensor<float> s0, dSFinal;
  if (withState) {
    MOEWB_ASSIGN_OR_FAIL(s0, toDevice(context, in.s0, act));
    MOEWB_ASSIGN_OR_FAIL(dSFinal, toDevice(context, in.dSFinal, act));
  }
  MOEWB_ASSIGN_OR_FAIL(auto o, poisonedBf16(context, {n, hv * vd}));
  MOEWB_ASSIGN_OR_FAIL(auto sFinal, poisonedFloat(context, stateShape));
  KdaChunkSavedCuda saved;
  MOEWB_ASSERT_OK(kdaChunkForwardCuda(context, dims, q.data(), k.data(), v.data(), g.data(),
                                      beta.data(), withState ? s0.data() : nullptr, o.data(),
                                      sFinal.data(), saved));
  MOEWB_ASSIGN_OR_FAIL(auto dq, poisonedBf16(context, {n, h * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dk, poisonedBf16(context, {n, h * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dv, poisonedBf16(context, {n, hv * vd}));
  MOEWB_ASSIGN_OR_FAIL(auto dg, poisonedFloat(context, {n, hv * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dbeta, poisonedFloat(context, {n, hv}));
  MOEWB_ASSIGN_OR_FAIL(auto dS0, poisonedFloat(context, stateShape));
  const KdaCoreGradsCuda grads{dq.data(), dk.data(),    dv.data(),
                               dg.data(), dbeta.data(), dS0.data()};
  MOEWB_ASSERT_OK(kdaChunkBackwardCuda(context, dims, dO.data(),
                                       withState ? dSFinal.data() : nullptr, q.data(), k.data(),
                                       v.data(), g.data(), beta.data(),
                                       withState ? s0.data() : nullptr, saved, grads));

  // References in double on the same rounded inputs.
  Tensor<double> s0d = withState ? toDouble(in.s0) : Tensor<double>();
  Tensor<double> dSFinald = withState ? toDouble(in.dSFinal) : Tensor<double>();
  const Tensor<double> qd = toDouble(in.q), kd64 = toDouble(in.k), vd64 = toDouble(in.v);
  const Tensor<double> gd = toDouble(in.g), betad = toDouble(in.beta), dOd = toDouble(in.dO);
  Tensor<double> finalRef, finalNaive;
  KdaChunkSaved<double> savedRef;
  Tensor<double> oRef =
      kdaChunkForward(pool, dims, qd, kd64, vd64, gd, betad, s0d, finalRef, &savedRef);
  Tensor<double> oNaive = kdaNaiveForward(pool, dims, qd, kd64, vd64, gd, betad, s0d, finalNaive);
  KdaCoreGrads<double> ref = kdaChunkBackward(pool, dims, dOd, dSFinald, qd, kd64, vd64, gd, betad,
                                              s0d, savedRef);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> oGot, toHostFloat(context, o));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> sGot, toHost(context, sFinal));
  EXPECT_LT(relativeError(oGot, toFloat(oRef)), 1e-2);
  EXPECT_LT(relativeError(oGot, toFloat(oNaive)), 1e-2);
  EXPECT_LT(relativeError(sGot, toFloat(finalRef)), 1e-4);
  EXPECT_LT(relativeError(sGot, toFloat(finalNaive)), 1e-4);
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> savedAqk, toHost(context, saved.aqk));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> savedM, toHost(context, saved.m));
  EXPECT_LT(relativeError(savedAqk, toFloat(savedRef.aqk)), 1e-4);
  EXPECT_LT(relativeError(savedM, toFloat(savedRef.m)), 1e-4);

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dqGot, toHostFloat(context, dq));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dkGot, toHostFloat(context, dk));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dvGot, toHostFloat(context, dv));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dgGot, toHost(context, dg));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dbetaGot, toHost(context, dbeta));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dS0Got, toHost(context, dS0));
  EXPECT_LT(relativeError(dqGot, toFloat(ref.dq)), 1e-2);
  EXPECT_LT(relativeError(dkGot, toFloat(ref.dk)), 1e-2);
  EXPECT_LT(relativeError(dvGot, toFloat(ref.dv)), 1e-2);
  EXPECT_LT(relativeError(dgGot, toFloat(ref.dg)), 2e-3);
  EXPECT_LT(relativeError(dbetaGot, toFloat(ref.dbeta)), 2e-3);
  EXPECT_LT(relativeError(dS0Got, toFloat(ref.dInitialState)), 1e-4);
}

TEST_F(KdaChunkCudaTest, ForwardAndBackwardMatchDoubleReferences) {
  uint64_t seed = 1000;
  for (int64_t headDim : {16, 64}) {
    for (int64_t chunk : {16, 64}) {
      for (int64_t seqLen : {1, 63, 64, 130}) {
        const KdaCoreDims dims{2, seqLen, 2, 2, headDim, headDim, chunk};
        checkCore(context(), dims, seed += 10, /*withState=*/seqLen != 64);
      }
    }
  }
}

TEST_F(KdaChunkCudaTest, HeadDim128AndGroupedValueHeads) {
  checkCore(context(), KdaCoreDims{1, 100, 1, 1, 128, 128, 64}, 77, true);
  checkCore(context(), KdaCoreDims{2, 37, 1, 3, 32, 48, 16}, 78, true);  // GVA, K != V
  checkCore(context(), KdaCoreDims{2, 77, 2, 2, 48, 8, 32}, 79, true);   // C = 32, c = 13
}

TEST_F(KdaChunkCudaTest, GatesAtTheLowerBound) {
  checkCore(context(), KdaCoreDims{1, 150, 1, 1, 128, 128, 64}, 91, true, /*lowerBound=*/true);
  checkCore(context(), KdaCoreDims{2, 45, 2, 2, 40, 24, 16}, 92, true, /*lowerBound=*/true);
  checkCore(context(), KdaCoreDims{1, 77, 1, 2, 48, 8, 32}, 93, true, /*lowerBound=*/true);
}

// The recurrences take value tiles of 16 (8 warps per CTA) when the B * HV * ceil(V / 32) CTAs
// of tile 32 fill at most half the SMs (66 of 132 on the H200) and tiles of 32 (16 warps)
// otherwise, so every case above runs the 16-wide tile. These grids (136, 204 and 68 CTAs of 32)
// run the 32-wide one: T not a multiple of the chunk, a partial last value tile (V = 120 -> 24
// columns), GVA with K != V, and a grid between half and all of the SMs.
TEST_F(KdaChunkCudaTest, ManyHeadsTakeTheWideValueTile) {
  checkCore(context(), KdaCoreDims{1, 70, 34, 34, 128, 120, 64}, 97, true);
  checkCore(context(), KdaCoreDims{2, 45, 17, 34, 64, 96, 32}, 98, true);  // GVA, c = 13
  checkCore(context(), KdaCoreDims{1, 70, 17, 17, 128, 120, 64}, 99, true);  // 68 CTAs
}

// HV == H: every dq / dk element has one owner thread, every other sum a fixed order, so two
// backward runs agree bitwise.
TEST_F(KdaChunkCudaTest, BackwardIsDeterministic) {
  const KdaCoreDims dims{2, 130, 2, 2, 64, 64, 64};
  const CoreInputs in = makeInputs(dims, 95, true);
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  const MemoryCategory act = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_FAIL(auto q, toDeviceBf16(context(), in.q, act));
  MOEWB_ASSIGN_OR_FAIL(auto k, toDeviceBf16(context(), in.k, act));
  MOEWB_ASSIGN_OR_FAIL(auto v, toDeviceBf16(context(), in.v, act));
  MOEWB_ASSIGN_OR_FAIL(auto g, toDevice(context(), in.g, act));
  MOEWB_ASSIGN_OR_FAIL(auto beta, toDevice(context(), in.beta, act));
  MOEWB_ASSIGN_OR_FAIL(auto dO, toDeviceBf16(context(), in.dO, act));
  MOEWB_ASSIGN_OR_FAIL(auto s0, toDevice(context(), in.s0, act));
  MOEWB_ASSIGN_OR_FAIL(auto dSFinal, toDevice(context(), in.dSFinal, act));
  MOEWB_ASSIGN_OR_FAIL(auto o, poisonedBf16(context(), {n, hv * vd}));
  KdaChunkSavedCuda saved;
  MOEWB_ASSERT_OK(kdaChunkForwardCuda(context(), dims, q.data(), k.data(), v.data(), g.data(),
                                      beta.data(), s0.data(), o.data(), nullptr, saved));
  Tensor<float> first[5];
  for (int run = 0; run < 2; ++run) {
    MOEWB_ASSIGN_OR_FAIL(auto dq, poisonedBf16(context(), {n, h * kd}));
    MOEWB_ASSIGN_OR_FAIL(auto dk, poisonedBf16(context(), {n, h * kd}));
    MOEWB_ASSIGN_OR_FAIL(auto dv, poisonedBf16(context(), {n, hv * vd}));
    MOEWB_ASSIGN_OR_FAIL(auto dg, poisonedFloat(context(), {n, hv * kd}));
    MOEWB_ASSIGN_OR_FAIL(auto dbeta, poisonedFloat(context(), {n, hv}));
    const KdaCoreGradsCuda grads{dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                                 nullptr};
    MOEWB_ASSERT_OK(kdaChunkBackwardCuda(context(), dims, dO.data(), dSFinal.data(), q.data(),
                                         k.data(), v.data(), g.data(), beta.data(), s0.data(),
                                         saved, grads));
    Tensor<float> got[5];
    MOEWB_ASSIGN_OR_FAIL(got[0], toHostFloat(context(), dq));
    MOEWB_ASSIGN_OR_FAIL(got[1], toHostFloat(context(), dk));
    MOEWB_ASSIGN_OR_FAIL(got[2], toHostFloat(context(), dv));
    MOEWB_ASSIGN_OR_FAIL(got[3], toHost(context(), dg));
    MOEWB_ASSIGN_OR_FAIL(got[4], toHost(context(), dbeta));
    for (int t = 0; t < 5; ++t) {
      if (run == 0) {
        first[t] = std::move(got[t]);
        continue;
      }
      ASSERT_EQ(first[t].numel(), got[t].numel());
      int64_t differ = 0;
      for (int64_t i = 0; i < got[t].numel(); ++i) {
        differ += std::memcmp(&first[t][i], &got[t][i], sizeof(float)) != 0 ? 1 : 0;
      }
      EXPECT_EQ(differ, 0) << "gradient " << t;
    }
  }
}

TEST_F(KdaChunkCudaTest, RejectsUnsupportedDims) {
  KdaChunkSavedCuda saved;
  const KdaCoreDims tooWide{1, 4, 1, 1, 256, 64, 64};
  EXPECT_FALSE(kdaChunkForwardCuda(context(), tooWide, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, nullptr, nullptr, nullptr, saved)
                   .isOk());
}

}  // namespace
}  // namespace moewb::engine::cuda
