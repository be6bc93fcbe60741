// Round 5 of the per-chunk KDA backward (kda_bwd_chunk.cuh with the diagonal blocks in fp32,
// forced through setKdaBwdChunkRound5, round 6 forced off) against round 2 (kda_bwd_mma.cuh, what
// setKdaBwdChunkRound5(0) runs) on the same forward: dq, dk, dv, dg, dbeta and dS0 of the whole
// chunked backward. Round 5 keeps round 2's operand values and the order of every sum (only where
// the work runs changes), so it is expected bitwise equal: the check allows 1e-6 relative (an
// fp32 contraction the compiler might choose differently) and reports how many elements differ;
// with HV == H (every dq / dk element has one owner) the count must be 0, with GVA the dq / dk
// atomics of several value heads land in any order, so only dv, dg, dbeta must match bitwise.
// Also: rounds 5 and 2 against the fp64 chunk reference with kda_chunk_cuda_test's tolerances,
// and round 5 run twice bitwise equal (HV == H). Outputs are NaN-poisoned. Shapes: partial last
// chunks (c = 2, 13, 40), one chunk, GVA, K != V, C = 16 / 32 / 64, gates at the lower bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "ops/kda/kda.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using KdaBwdChunkRound5CudaTest = CudaTest;

// Host inputs, rounded as the GPU sees them (q, k, v, dO bf16; the rest fp32).
struct Inputs {
  Tensor<float> q, k, v, g, beta, s0, dO, dSFinal;
};

// q, k L2-normalised per head (q scaled by K^-1/2), g in (-5, 0) mostly near 0 (or -5 with
// lowerBound), beta in (0, 1), a nonzero initial state and final-state gradient.
Inputs makeInputs(const KdaCoreDims& dims, uint64_t seed, bool lowerBound) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  Inputs in;
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
  in.s0 = randomTensor({dims.batch, hv, kd, vd}, seed + 6, 0.5);
  in.dSFinal = randomTensor({dims.batch, hv, kd, vd}, seed + 7, 0.5);
  in.dO = roundedToBf16(randomTensor({n, hv * vd}, seed + 8));
  return in;
}

struct DeviceInputs {
  DeviceTensor<bf16> q, k, v, dO;
  DeviceTensor<float> g, beta, s0, dSFinal;
};

// dq, dk, dv, dg, dbeta, dS0 on the host.
struct Grads {
  Tensor<float> t[6];
};
const char* const kGradNames[6] = {"dq", "dk", "dv", "dg", "dbeta", "dS0"};

int64_t countBitDifferences(const Tensor<float>& a, const Tensor<float>& b) {
  if (a.numel() != b.numel()) return -1;
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  }
  return differ;
}

// One chunked backward from `saved` with round 5 forced on (round5) or off (round 2); the
// gradients are poisoned first.
void runBackward(CudaContext& context, const KdaCoreDims& dims, const DeviceInputs& in,
                 const KdaChunkSavedCuda& saved, bool round5, Grads& out) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  MOEWB_ASSIGN_OR_FAIL(auto dq, poisonedBf16(context, {n, h * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dk, poisonedBf16(context, {n, h * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dv, poisonedBf16(context, {n, hv * vd}));
  MOEWB_ASSIGN_OR_FAIL(auto dg, poisonedFloat(context, {n, hv * kd}));
  MOEWB_ASSIGN_OR_FAIL(auto dbeta, poisonedFloat(context, {n, hv}));
  MOEWB_ASSIGN_OR_FAIL(auto dS0, poisonedFloat(context, {dims.batch, hv, kd, vd}));
  const KdaCoreGradsCuda grads{dq.data(), dk.data(),    dv.data(),
                               dg.data(), dbeta.data(), dS0.data()};
  setKdaBwdChunkRound6(0);  // round 6 (on by default) would take round 5's place
  setKdaBwdChunkRound5(round5 ? 1 : 0);
  const Status st = kdaChunkBackwardCuda(context, dims, in.dO.data(), in.dSFinal.data(),
                                         in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                         in.beta.data(), in.s0.data(), saved, grads);
  setKdaBwdChunkRound5(-1);
  setKdaBwdChunkRound6(-1);
  MOEWB_ASSERT_OK(st);
  MOEWB_ASSIGN_OR_FAIL(out.t[0], toHostFloat(context, dq));
  MOEWB_ASSIGN_OR_FAIL(out.t[1], toHostFloat(context, dk));
  MOEWB_ASSIGN_OR_FAIL(out.t[2], toHostFloat(context, dv));
  MOEWB_ASSIGN_OR_FAIL(out.t[3], toHost(context, dg));
  MOEWB_ASSIGN_OR_FAIL(out.t[4], toHost(context, dbeta));
  MOEWB_ASSIGN_OR_FAIL(out.t[5], toHost(context, dS0));
}

void checkRound5(CudaContext& context, const KdaCoreDims& dims, uint64_t seed, bool lowerBound) {
  SCOPED_TRACE("T=" + std::to_string(dims.seqLen) + " H=" + std::to_string(dims.numHeads) +
               " HV=" + std::to_string(dims.valueHeads()) + " K=" + std::to_string(dims.keyDim) +
               " V=" + std::to_string(dims.valueDim) + " C=" + std::to_string(dims.chunk) +
               (lowerBound ? " g=-5" : ""));
  const Inputs in = makeInputs(dims, seed, lowerBound);
  const MemoryCategory act = MemoryCategory::kActivations;
  DeviceInputs dev;
  MOEWB_ASSIGN_OR_FAIL(dev.q, toDeviceBf16(context, in.q, act));
  MOEWB_ASSIGN_OR_FAIL(dev.k, toDeviceBf16(context, in.k, act));
  MOEWB_ASSIGN_OR_FAIL(dev.v, toDeviceBf16(context, in.v, act));
  MOEWB_ASSIGN_OR_FAIL(dev.dO, toDeviceBf16(context, in.dO, act));
  MOEWB_ASSIGN_OR_FAIL(dev.g, toDevice(context, in.g, act));
  MOEWB_ASSIGN_OR_FAIL(dev.beta, toDevice(context, in.beta, act));
  MOEWB_ASSIGN_OR_FAIL(dev.s0, toDevice(context, in.s0, act));
  MOEWB_ASSIGN_OR_FAIL(dev.dSFinal, toDevice(context, in.dSFinal, act));
  MOEWB_ASSIGN_OR_FAIL(auto o, poisonedBf16(context, {dims.tokens(),
                                                      dims.valueHeads() * dims.valueDim}));
  KdaChunkSavedCuda saved;
  MOEWB_ASSERT_OK(kdaChunkForwardCuda(context, dims, dev.q.data(), dev.k.data(), dev.v.data(),
                                      dev.g.data(), dev.beta.data(), dev.s0.data(), o.data(),
                                      nullptr, saved));
  Grads r2, r5, r5again;
  runBackward(context, dims, dev, saved, false, r2);
  runBackward(context, dims, dev, saved, true, r5);
  runBackward(context, dims, dev, saved, true, r5again);
  const bool oneOwner = dims.valueHeads() == dims.numHeads;
  for (int t = 0; t < 6; ++t) {
    const int64_t differ = countBitDifferences(r5.t[t], r2.t[t]);
    EXPECT_LT(relativeError(r5.t[t], r2.t[t]), 1e-6)
        << kGradNames[t] << ": " << differ << " of " << r2.t[t].numel() << " differ";
    if (oneOwner || (t >= 2 && t <= 4)) {
      EXPECT_EQ(differ, 0) << kGradNames[t] << " differs from round 2";
    }
    if (oneOwner) {
      EXPECT_EQ(countBitDifferences(r5.t[t], r5again.t[t]), 0) << kGradNames[t] << " rerun";
    }
  }

  ThreadPool pool(2);
  const Tensor<double> qd = toDouble(in.q), kd64 = toDouble(in.k), vd64 = toDouble(in.v);
  const Tensor<double> gd = toDouble(in.g), betad = toDouble(in.beta);
  const Tensor<double> s0d = toDouble(in.s0);
  Tensor<double> finalRef;
  KdaChunkSaved<double> savedRef;
  kdaChunkForward(pool, dims, qd, kd64, vd64, gd, betad, s0d, finalRef, &savedRef);
  const KdaCoreGrads<double> ref = kdaChunkBackward(pool, dims, toDouble(in.dO),
                                                    toDouble(in.dSFinal), qd, kd64, vd64, gd,
                                                    betad, s0d, savedRef);
  const Tensor<float> want[6] = {toFloat(ref.dq), toFloat(ref.dk),    toFloat(ref.dv),
                                 toFloat(ref.dg), toFloat(ref.dbeta), toFloat(ref.dInitialState)};
  const double bound[6] = {1e-2, 1e-2, 1e-2, 2e-3, 2e-3, 1e-4};
  for (int t = 0; t < 6; ++t) {
    EXPECT_LT(relativeError(r5.t[t], want[t]), bound[t]) << kGradNames[t] << " round 5";
    EXPECT_LT(relativeError(r2.t[t], want[t]), bound[t]) << kGradNames[t] << " round 2";
  }
}

TEST_F(KdaBwdChunkRound5CudaTest, MatchesRoundTwoAtAwkwardShapes) {
  checkRound5(context(), KdaCoreDims{2, 130, 2, 2, 128, 128, 64}, 601, false);  // c = 2
  checkRound5(context(), KdaCoreDims{1, 37, 1, 1, 64, 64, 64}, 611, false);     // one chunk
  checkRound5(context(), KdaCoreDims{2, 77, 1, 2, 48, 24, 32}, 621, false);     // GVA, c = 13
  checkRound5(context(), KdaCoreDims{1, 150, 1, 1, 128, 128, 64}, 631, true);   // g = -5
  checkRound5(context(), KdaCoreDims{1, 64, 2, 4, 32, 8, 16}, 641, false);      // GVA 2x, V = 8
  checkRound5(context(), KdaCoreDims{1, 1000, 1, 1, 128, 120, 64}, 651, false); // c = 40
}

}  // namespace
}  // namespace moewb::engine::cuda
