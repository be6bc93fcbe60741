// Round 6 of the per-chunk KDA backward (kda_bwd_chunk.cuh, forced through setKdaBwdChunkRound6:
// the pairwise sums' diagonal 16 x 16 blocks on tensor cores where the block decays
// <= kDiagMmaMaxDecay, else round 5's fp32 loops) against the fp64 chunk reference and round 5
// (the same kernel with the diagonal blocks in fp32) on the same forward: dq, dk, dv, dg, dbeta
// and dS0 of the whole chunked backward. Round 6 adds in another order than round 5 (tensor-core
// sums on the diagonal), so the check is not bitwise: each gradient's error against the fp64
// reference must be within kda_chunk_cuda_test's tolerances and at most 2x round 5's (+1e-7, for
// gradients the kernel does not touch), dg's at most max(4x round 5's, 3e-5) (its diagonal-block
// terms carry the split operands' 2^-16 representation error, which dg's reverse cumsum amplifies
// where its pairs of terms cancel; bench/scratch/kda_chunk_07.md §5), and round 6 run twice must
// be bitwise equal (HV == H). Outputs are NaN-poisoned. Shapes: partial last chunks (c = 2, 13,
// 40), one chunk, GVA, K != V, C = 16 / 32 / 64; gates mixed (-5 u^3 - 0.01: most blocks on
// tensor cores), small (-0.3 u) and strong (-2.4 every step: a full block decays 36; both all on
// tensor cores) and at the lower bound (-5: a full block decays 75, on the fp32 path).
#include <gtest/gtest.h>

#include <algorithm>
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

using KdaBwdChunkRound6CudaTest = CudaTest;

// Host inputs, rounded as the GPU sees them (q, k, v, dO bf16; the rest fp32).
struct Inputs {
  Tensor<float> q, k, v, g, beta, s0, dO, dSFinal;
};

// The gates of a case: -5 u^3 - 0.01 (mixed), -5 every step (at the lower bound), -0.3 u - 0.01
// (small), -2.4 every step (strong).
enum class Gate { kMixed, kLowerBound, kSmall, kStrong };
const char* const kGateNames[4] = {"mixed", "g=-5", "small", "g=-2.4"};

// q, k L2-normalised per head (q scaled by K^-1/2), g by `gate`, beta in (0, 1), a nonzero
// initial state and final-state gradient.
Inputs makeInputs(const KdaCoreDims& dims, uint64_t seed, Gate gate) {
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
    in.g[i] = gate == Gate::kLowerBound ? -5.f
              : gate == Gate::kStrong   ? -2.4f
              : gate == Gate::kSmall    ? -0.3f * u - 0.01f
                                        : -5.f * u * u * u - 0.01f;
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

// Rounds 5 and 6 forced on (round 6) or round 5 alone (round 5); back to the defaults after.
void forceRound(int round) {
  setKdaBwdChunkRound6(round == 6 ? 1 : round < 0 ? -1 : 0);
  setKdaBwdChunkRound5(round < 0 ? -1 : 1);
}

// One chunked backward from `saved` with the per-chunk backward of `round` (5 or 6); the
// gradients are poisoned first.
void runBackward(CudaContext& context, const KdaCoreDims& dims, const DeviceInputs& in,
                 const KdaChunkSavedCuda& saved, int round, Grads& out) {
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
  forceRound(round);
  const Status st = kdaChunkBackwardCuda(context, dims, in.dO.data(), in.dSFinal.data(),
                                         in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                         in.beta.data(), in.s0.data(), saved, grads);
  forceRound(-1);
  MOEWB_ASSERT_OK(st);
  MOEWB_ASSIGN_OR_FAIL(out.t[0], toHostFloat(context, dq));
  MOEWB_ASSIGN_OR_FAIL(out.t[1], toHostFloat(context, dk));
  MOEWB_ASSIGN_OR_FAIL(out.t[2], toHostFloat(context, dv));
  MOEWB_ASSIGN_OR_FAIL(out.t[3], toHost(context, dg));
  MOEWB_ASSIGN_OR_FAIL(out.t[4], toHost(context, dbeta));
  MOEWB_ASSIGN_OR_FAIL(out.t[5], toHost(context, dS0));
}

void checkRound6(CudaContext& context, const KdaCoreDims& dims, uint64_t seed, Gate gate) {
  SCOPED_TRACE("T=" + std::to_string(dims.seqLen) + " H=" + std::to_string(dims.numHeads) +
               " HV=" + std::to_string(dims.valueHeads()) + " K=" + std::to_string(dims.keyDim) +
               " V=" + std::to_string(dims.valueDim) + " C=" + std::to_string(dims.chunk) +
               " gates " + kGateNames[int(gate)]);
  const Inputs in = makeInputs(dims, seed, gate);
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
  Grads r5, r6, r6again;
  runBackward(context, dims, dev, saved, 5, r5);
  runBackward(context, dims, dev, saved, 6, r6);
  runBackward(context, dims, dev, saved, 6, r6again);
  if (dims.valueHeads() == dims.numHeads) {
    for (int t = 0; t < 6; ++t) {
      EXPECT_EQ(countBitDifferences(r6.t[t], r6again.t[t]), 0) << kGradNames[t] << " rerun";
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
    const double e6 = relativeError(r6.t[t], want[t]), e5 = relativeError(r5.t[t], want[t]);
    EXPECT_LT(e6, bound[t]) << kGradNames[t];
    const double within = t == 3 ? std::max(4 * e5, 3e-5) : 2 * e5 + 1e-7;  // t == 3: dg
    EXPECT_LE(e6, within) << kGradNames[t] << ": round 6 " << e6 << ", round 5 " << e5;
  }
}

TEST_F(KdaBwdChunkRound6CudaTest, MatchesReferenceWithinRoundFiveErrorAtAwkwardShapes) {
  const Gate mixed = Gate::kMixed, gmin = Gate::kLowerBound, small = Gate::kSmall;
  const Gate strong = Gate::kStrong;
  checkRound6(context(), KdaCoreDims{2, 130, 2, 2, 128, 128, 64}, 701, mixed);  // c = 2
  checkRound6(context(), KdaCoreDims{1, 37, 1, 1, 64, 64, 64}, 711, small);     // one chunk
  checkRound6(context(), KdaCoreDims{2, 77, 1, 2, 48, 24, 32}, 721, mixed);     // GVA, c = 13
  checkRound6(context(), KdaCoreDims{2, 77, 1, 2, 48, 24, 32}, 722, small);     // GVA, c = 13
  checkRound6(context(), KdaCoreDims{1, 150, 1, 1, 128, 128, 64}, 731, gmin);   // g = -5
  checkRound6(context(), KdaCoreDims{1, 64, 2, 4, 32, 8, 16}, 741, small);      // GVA 2x, V = 8
  checkRound6(context(), KdaCoreDims{1, 1000, 1, 1, 128, 120, 64}, 751, mixed); // c = 40
  checkRound6(context(), KdaCoreDims{1, 250, 2, 2, 128, 128, 64}, 761, small);  // c = 58
  checkRound6(context(), KdaCoreDims{1, 150, 1, 1, 128, 128, 64}, 771, strong); // g = -2.4
  checkRound6(context(), KdaCoreDims{2, 77, 1, 2, 48, 24, 32}, 781, strong);    // GVA, c = 13
}

}  // namespace
}  // namespace moewb::engine::cuda
