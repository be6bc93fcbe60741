// The grouped tensor-core experts against (1) the CPU reference in double (forward: g, u, h, y;
// backward: dXPerm and the accumulated weight gradients) for SwiGLU and SiTU-GLU (inputs large
// enough to reach SiTU's clipping region), (2) a per-expert loop of cuBLAS GEMMs (the oracle:
// g, y and dWd per expert, host-read offsets, test only), and (3) the fused variants: gather by
// index == permute + experts (bitwise), folded combine == experts + weighted combine (forward
// to bf16 rounding, backward dx / weight grads equal, dRowWeight == combine's dTopWeight).
// Shapes: N = 1, 63, 257; E = 1, 8, 64 with empty experts; k = 1, 2, 4, 8; D and F not multiples
// of the 128-wide tiles (nor of the 64-wide K step and gate+up column tile, nor of round 1's 32):
// D = 72, 136, 264 and F = 40, 96, 136 (the mma.sync path, D % 8 == F % 8 == 0, with several
// row, column and K tiles), D = 320, F = 192 (whole 64-deep K tiles, half a 128-column tile) and
// D = 130 (not a multiple of 8: the WMMA fallback). 257 k rows give experts whose rows are not a
// multiple of 128 and experts of one row. On an H200 (1)-(3) run the sm_90a wgmma stages (the
// default switch). (4) ExpertsWgmmaCudaTest: every wgmma stage (experts_wgmma_cuda.h) forced on
// against forced off, plain and fused, within the tolerance of (1), and bitwise equal run to run
// (skips unless the device is compute capability 9.0 and the build has the sm_90a object); the
// wgmma stages run round 5's warp-specialized down / dx kernels there (the default), and
// WarpSpecializedEqualsRound2Bitwise compares those with round 2's bit for bit;
// GluPingPongEqualsRound2Bitwise does the same for round 7's gate+up / dh (off by default),
// WsWgradEqualsRound2Bitwise for round 6's weight gradients (on by default) on each tile walk.
#include "ops/experts/experts_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "moe_cuda_test_util.h"
#include "ops/combine/combine_cuda.h"
#include "ops/experts/experts.h"
#include "ops/experts/experts_wgmma_cuda.h"
#include "ops/permute/permute_cuda.h"
#include "runtime/cuda/gemm.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using moetest::describe;
using moetest::MoeShape;

class ExpertsCudaTest : public CudaTest {
 protected:
  // Forward and backward against the CPU reference in double, SwiGLU and SiTU-GLU.
  void matchReference(int64_t d, int64_t f, const std::vector<MoeShape>& shapes, uint64_t seed);
};

struct HostWeights {
  Tensor<float> gate;  // [E, F, D] bf16-rounded
  Tensor<float> up;
  Tensor<float> down;  // [E, D, F]
};

HostWeights randomWeights(int64_t e, int64_t d, int64_t f, bool situ, uint64_t seed) {
  const double in = 1.0 / std::sqrt(double(d)), hidden = 1.0 / std::sqrt(double(f));
  // SiTU: |g| well past beta1 = 4 and |u| past beta2 = 25 for many elements.
  HostWeights w;
  w.gate = roundedToBf16(randomTensor({e, f, d}, seed, situ ? 6 * in : in));
  w.up = roundedToBf16(randomTensor({e, f, d}, seed + 1, situ ? 40 * in : in));
  w.down = roundedToBf16(randomTensor({e, d, f}, seed + 2, situ ? 0.05 * hidden : hidden));
  return w;
}

struct DeviceWeights {
  DeviceTensor<bf16> gate, up, down;
  DeviceExpertWeights view() const { return {gate, up, down}; }
};

Result<DeviceWeights> upload(CudaContext& context, const HostWeights& w) {
  DeviceWeights out;
  MOEWB_ASSIGN_OR_RETURN(out.gate, toDeviceBf16(context, w.gate, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_RETURN(out.up, toDeviceBf16(context, w.up, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_RETURN(out.down, toDeviceBf16(context, w.down, MemoryCategory::kWeights));
  return Result<DeviceWeights>(std::move(out));
}

// One routed problem: routing, plan (host and device), x and its permuted rows on the device.
struct Problem {
  MoeShape shape;
  int64_t d = 0;
  Tensor<int32_t> top;
  Tensor<float> weight;  // [N, k] routing weights
  Tensor<float> x;       // [N, D] bf16-rounded
  Dispatch plan;
  DeviceTensor<int32_t> dTop;
  DeviceTensor<float> dWeight;
  DeviceTensor<bf16> dx;
  DeviceDispatch dPlan;
  DeviceTensor<bf16> xPerm;  // [N k, D]
};

// `hot`: every token also routes to expert 0 (max / mean rows E / k, the skewed routing).
void makeProblem(CudaContext& context, const MoeShape& s, int64_t d, uint64_t seed, Problem& p,
                 bool hot = false) {
  p.shape = s;
  p.d = d;
  p.top = moetest::randomTopExpert(s.n, s.k, s.e, seed);
  for (int64_t t = 0; hot && t < s.n; ++t) {  // expert 0 first in the row, the k stay distinct
    int64_t j = 0;
    while (j < s.k && p.top.at(t, j) != 0) ++j;
    if (j < s.k) std::swap(p.top.at(t, 0), p.top.at(t, j));
    p.top.at(t, 0) = 0;
  }
  p.weight = randomTensor({s.n, s.k}, seed + 1, 1.0, true);
  p.x = roundedToBf16(randomTensor({s.n, d}, seed + 2));
  p.plan = buildDispatch(p.top, s.e);
  MOEWB_ASSIGN_OR_FAIL(p.dTop, toDevice(context, p.top, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(p.dWeight, toDevice(context, p.weight, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(p.dx, toDeviceBf16(context, p.x, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(p.dPlan, buildDispatchCuda(context, p.dTop, s.e));
  MOEWB_ASSIGN_OR_FAIL(p.xPerm, poisonedBf16(context, {s.n * s.k, d}));
  MOEWB_ASSERT_OK(permuteForwardCuda(context, p.dx, p.dPlan, p.xPerm));
}

void ExpertsCudaTest::matchReference(int64_t d, int64_t f, const std::vector<MoeShape>& shapes,
                                     uint64_t seed) {
  ThreadPool pool(2);
  for (const MoeShape& s : shapes) {
    for (GluKind kind : {GluKind::kSwiGlu, GluKind::kSitu}) {
      const bool situ = kind == GluKind::kSitu;
      const std::string what = describe(s) + " D=" + std::to_string(d) + " F=" + std::to_string(f) +
                               (situ ? " situ" : " swiglu");
      GluParams glu;
      glu.kind = kind;
      Problem p;
      makeProblem(context(), s, d, seed += 10, p);
      if (HasFatalFailure()) return;
      const int64_t rows = p.plan.rows(), maxRows = s.n * s.k;
      HostWeights hw = randomWeights(s.e, d, f, situ, seed += 10);
      MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
      DeviceExpertsSaved saved;
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> y,
          expertsForwardCuda(context(), p.xPerm, p.dPlan.offsets, dw.view(), saved, glu));
      // Reference in double on the same permuted rows.
      Tensor<double> gateD = toDouble(hw.gate), upD = toDouble(hw.up), downD = toDouble(hw.down);
      Tensor<double> xPermD = permuteForward(pool, toDouble(p.x), p.plan);
      ExpertsSaved<double> ref;
      Tensor<double> wantY = expertsForward(pool, xPermD, p.plan.offsets,
                                            ExpertWeights<double>{gateD, upD, downD}, ref, glu);
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY, toHostFloat(context(), y));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotG, toHostFloat(context(), saved.gatePre));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotU, toHostFloat(context(), saved.upPre));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotH, toHostFloat(context(), saved.hidden));
      EXPECT_LT(relativeError(moetest::slice(gotG, rows), toFloat(ref.gatePre)), 1e-2) << what;
      EXPECT_LT(relativeError(moetest::slice(gotU, rows), toFloat(ref.upPre)), 1e-2) << what;
      EXPECT_LT(relativeError(moetest::slice(gotH, rows), toFloat(ref.hidden)), 1e-2) << what;
      EXPECT_LT(relativeError(moetest::slice(gotY, rows), toFloat(wantY)), 1e-2) << what;
      // Backward into non-zero fp32 gradients.
      Tensor<float> dY = roundedToBf16(randomTensor({maxRows, d}, seed += 10));
      Tensor<float> baseGate = randomTensor({s.e, f, d}, seed += 10, 0.5);
      Tensor<float> baseUp = randomTensor({s.e, f, d}, seed += 10, 0.5);
      Tensor<float> baseDown = randomTensor({s.e, d, f}, seed += 10, 0.5);
      MOEWB_ASSIGN_OR_FAIL(auto dDY, toDeviceBf16(context(), dY, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto gGate, toDevice(context(), baseGate, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto gUp, toDevice(context(), baseUp, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto gDown, toDevice(context(), baseDown, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(DeviceTensor<bf16> dXPerm,
                           expertsBackwardCuda(context(), dDY, p.xPerm, p.dPlan.offsets, dw.view(),
                                               saved, DeviceExpertGrads{gGate, gUp, gDown}, glu));
      Tensor<double> wGate = toDouble(baseGate), wUp = toDouble(baseUp), wDown = toDouble(baseDown);
      Tensor<double> wantDX =
          expertsBackward(pool, toDouble(moetest::slice(dY, rows)), xPermD, p.plan.offsets,
                          ExpertWeights<double>{gateD, upD, downD}, ref,
                          ExpertGrads<double>{wGate, wUp, wDown}, glu);
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDX, toHostFloat(context(), dXPerm));
      EXPECT_LT(relativeError(moetest::slice(gotDX, rows), toFloat(wantDX)), 1e-2) << what;
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotGate, toHost(context(), gGate));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotUp, toHost(context(), gUp));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDown, toHost(context(), gDown));
      EXPECT_LT(relativeError(gotGate, toFloat(wGate)), 1e-2) << what;
      EXPECT_LT(relativeError(gotUp, toFloat(wUp)), 1e-2) << what;
      EXPECT_LT(relativeError(gotDown, toFloat(wDown)), 1e-2) << what;
      // Experts without rows keep their gradient untouched.
      for (int64_t e = 0; e < s.e; ++e) {
        if (p.plan.counts[e] != 0) continue;
        for (int64_t i = e * f * d; i < (e + 1) * f * d; ++i) {
          ASSERT_EQ(gotGate[i], baseGate[i]) << what << " empty expert " << e;
        }
      }
    }
  }
}

TEST_F(ExpertsCudaTest, ForwardBackwardMatchReference) {
  matchReference(72, 40, moetest::moeShapes(), 8000);
}

// Several 128-row, 128-column and 64-deep K tiles, the last of each partial; an expert of 2056
// rows; 64 experts of ~32 rows; one-row experts among empty ones.
TEST_F(ExpertsCudaTest, MultiTileShapesMatchReference) {
  const std::vector<MoeShape> shapes{{257, 1, 8}, {257, 64, 8}, {63, 8, 2}, {1, 64, 1}};
  matchReference(264, 136, shapes, 8500);
}

// Whole 64-deep K tiles (D = 5, F = 3 of them: the 3-stage pipeline's steady state, the dx
// source switch on a tile boundary), 2.5 column tiles of 128 (3 gate+up tiles of 64), experts of
// ~257 and ~16 rows.
TEST_F(ExpertsCudaTest, WholeKTileShapesMatchReference) {
  const std::vector<MoeShape> shapes{{257, 8, 8}, {63, 8, 2}};
  matchReference(320, 192, shapes, 8700);
}

// The grouped kernels equal a per-expert loop of cuBLAS GEMMs (host-read offsets; test only).
TEST_F(ExpertsCudaTest, GroupedEqualsPerExpertGemmLoop) {
  uint64_t seed = 9000;
  for (const auto& [d, f] : {std::pair<int64_t, int64_t>{130, 96}, {136, 96}, {264, 136}}) {
    for (const MoeShape& s : moetest::moeShapes()) {
      const std::string what = describe(s) + " D=" + std::to_string(d) + " F=" + std::to_string(f);
      Problem p;
      makeProblem(context(), s, d, seed += 10, p);
      if (HasFatalFailure()) return;
      const int64_t rows = p.plan.rows(), maxRows = s.n * s.k;
      HostWeights hw = randomWeights(s.e, d, f, false, seed += 10);
      MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
      DeviceExpertsSaved saved;
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> y,
          expertsForwardCuda(context(), p.xPerm, p.dPlan.offsets, dw.view(), saved));
      Tensor<float> dY = roundedToBf16(randomTensor({maxRows, d}, seed += 10));
      Tensor<float> zeros({s.e, f, d});
      MOEWB_ASSIGN_OR_FAIL(auto dDY, toDeviceBf16(context(), dY, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto gGate, toDevice(context(), zeros, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto gUp, toDevice(context(), zeros, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto gDown, toDevice(context(), zeros, MemoryCategory::kGrads));
      MOEWB_ASSERT_OK(expertsBackwardCuda(context(), dDY, p.xPerm, p.dPlan.offsets, dw.view(),
                                          saved, DeviceExpertGrads{gGate, gUp, gDown})
                          .status());
      // Oracle: per expert, g = x Wg^T, y = h Wd^T (h from the grouped forward), dWd = dY^T h.
      MOEWB_ASSIGN_OR_FAIL(auto gOracle, poisonedBf16(context(), {maxRows, f}));
      MOEWB_ASSIGN_OR_FAIL(auto yOracle, poisonedBf16(context(), {maxRows, d}));
      MOEWB_ASSIGN_OR_FAIL(auto dWdOracle, toDevice(context(), zeros, MemoryCategory::kGrads));
      for (int64_t e = 0; e < s.e; ++e) {
        const int64_t begin = p.plan.offsets[e], count = p.plan.counts[e];
        if (count == 0) continue;
        const bf16* xe = p.xPerm.data() + begin * d;
        const bf16* he = saved.hidden.data() + begin * f;
        MOEWB_ASSERT_OK(gemm(context(), count, f, d, 1.0f, GemmOperand{xe, DType::kBf16, d, false},
                             GemmOperand{dw.gate.data() + e * f * d, DType::kBf16, d, true}, 0.0f,
                             GemmOutput{gOracle.data() + begin * f, DType::kBf16, f}));
        MOEWB_ASSERT_OK(gemm(context(), count, d, f, 1.0f, GemmOperand{he, DType::kBf16, f, false},
                             GemmOperand{dw.down.data() + e * d * f, DType::kBf16, f, true}, 0.0f,
                             GemmOutput{yOracle.data() + begin * d, DType::kBf16, d}));
        MOEWB_ASSERT_OK(gemm(context(), d, f, count, 1.0f,
                             GemmOperand{dDY.data() + begin * d, DType::kBf16, d, true},
                             GemmOperand{he, DType::kBf16, f, false}, 1.0f,
                             GemmOutput{dWdOracle.data() + e * d * f, DType::kF32, f}));
      }
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotG, toHostFloat(context(), saved.gatePre));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> wantG, toHostFloat(context(), gOracle));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY, toHostFloat(context(), y));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> wantY, toHostFloat(context(), yOracle));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDown, toHost(context(), gDown));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> wantDown, toHost(context(), dWdOracle));
      // Same bf16 inputs and fp32 accumulation; only the summation order differs.
      EXPECT_LT(relativeError(moetest::slice(gotG, rows), moetest::slice(wantG, rows)), 5e-3)
          << what;
      EXPECT_LT(relativeError(moetest::slice(gotY, rows), moetest::slice(wantY, rows)), 5e-3)
          << what;
      EXPECT_LT(relativeError(gotDown, wantDown), 1e-4) << what;
    }
  }
}

// Fused permute (gather by index) and fused combine (weights in the epilogue) equal the unfused
// stages.
TEST_F(ExpertsCudaTest, FusedEqualsUnfused) {
  uint64_t seed = 10000;
  for (const auto& [d, f] : {std::pair<int64_t, int64_t>{72, 40}, {264, 136}}) {
    for (const MoeShape& s : moetest::moeShapes()) {
      const std::string what = describe(s) + " D=" + std::to_string(d) + " F=" + std::to_string(f);
      Problem p;
      makeProblem(context(), s, d, seed += 10, p);
      if (HasFatalFailure()) return;
      const int64_t rows = p.plan.rows(), maxRows = s.n * s.k;
      HostWeights hw = randomWeights(s.e, d, f, false, seed += 10);
      MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
      const GluParams glu;
      // Unfused forward, then the fused-permute forward.
      DeviceExpertsSaved saved1, saved2, saved3;
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> y1,
          expertsForwardCuda(context(), p.xPerm, p.dPlan.offsets, dw.view(), saved1, glu));
      DeviceExpertsIo gather;
      gather.gatherIndex = &p.dPlan.rowToken;
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> y2,
          expertsForwardCuda(context(), p.dx, p.dPlan.offsets, dw.view(), saved2, glu, gather));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY1, toHostFloat(context(), y1));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY2, toHostFloat(context(), y2));
      for (int64_t i = 0; i < rows * d; ++i) ASSERT_EQ(gotY2[i], gotY1[i]) << what << " at " << i;
      // Fused combine: rows weighted in the epilogue, then a plain sum.
      MOEWB_ASSIGN_OR_FAIL(auto rowWeight, poisonedFloat(context(), {maxRows}));
      MOEWB_ASSERT_OK(slotsToRowsCuda(context(), p.dWeight, p.dPlan, rowWeight));
      DeviceExpertsIo fused;
      fused.gatherIndex = &p.dPlan.rowToken;
      fused.rowWeight = &rowWeight;
      fused.outputIndex = &p.dPlan.rowToken;
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> y3,
          expertsForwardCuda(context(), p.dx, p.dPlan.offsets, dw.view(), saved3, glu, fused));
      MOEWB_ASSIGN_OR_FAIL(auto combined1, poisonedBf16(context(), {s.n, d}));
      MOEWB_ASSIGN_OR_FAIL(auto combined3, poisonedBf16(context(), {s.n, d}));
      MOEWB_ASSERT_OK(combineForwardCuda(context(), y1, p.dWeight, p.dPlan, combined1));
      MOEWB_ASSERT_OK(combineSumForwardCuda(context(), y3, p.dPlan, combined3));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotC1, toHostFloat(context(), combined1));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotC3, toHostFloat(context(), combined3));
      EXPECT_LT(relativeError(gotC3, gotC1), 1e-2) << what;
      // Backward: unfused combine + experts + permute vs the fused experts.
      Tensor<float> dy = roundedToBf16(randomTensor({s.n, d}, seed += 10));
      Tensor<float> zerosF({s.e, f, d}), zerosD({s.e, d, f});
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dYPerm, poisonedBf16(context(), {maxRows, d}));
      MOEWB_ASSIGN_OR_FAIL(auto dTop1, poisonedFloat(context(), {s.n, s.k}));
      MOEWB_ASSERT_OK(combineBackwardCuda(context(), dDy, y1, p.dWeight, p.dPlan, dYPerm, dTop1));
      MOEWB_ASSIGN_OR_FAIL(auto g1Gate, toDevice(context(), zerosF, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto g1Up, toDevice(context(), zerosF, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto g1Down, toDevice(context(), zerosD, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> dx1,
          expertsBackwardCuda(context(), dYPerm, p.xPerm, p.dPlan.offsets, dw.view(), saved1,
                              DeviceExpertGrads{g1Gate, g1Up, g1Down}, glu));
      MOEWB_ASSIGN_OR_FAIL(auto g3Gate, toDevice(context(), zerosF, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto g3Up, toDevice(context(), zerosF, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto g3Down, toDevice(context(), zerosD, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dRowWeight, poisonedFloat(context(), {maxRows}));
      MOEWB_ASSIGN_OR_FAIL(
          DeviceTensor<bf16> dx3,
          expertsBackwardCuda(context(), dDy, p.dx, p.dPlan.offsets, dw.view(), saved3,
                              DeviceExpertGrads{g3Gate, g3Up, g3Down}, glu, fused, &dRowWeight));
      MOEWB_ASSIGN_OR_FAIL(auto dTop3, poisonedFloat(context(), {s.n, s.k}));
      MOEWB_ASSERT_OK(rowsToSlotsCuda(context(), dRowWeight, p.dPlan, dTop3));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDx1, toHostFloat(context(), dx1));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDx3, toHostFloat(context(), dx3));
      EXPECT_LT(relativeError(moetest::slice(gotDx3, rows), moetest::slice(gotDx1, rows)), 1e-5)
          << what;
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotTop1, toHost(context(), dTop1));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotTop3, toHost(context(), dTop3));
      EXPECT_LT(relativeError(gotTop3, gotTop1), 1e-4) << what;
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> a1, toHost(context(), g1Gate));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> a3, toHost(context(), g3Gate));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> b1, toHost(context(), g1Up));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> b3, toHost(context(), g3Up));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> c1, toHost(context(), g1Down));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> c3, toHost(context(), g3Down));
      EXPECT_LT(relativeError(a3, a1), 1e-5) << what;
      EXPECT_LT(relativeError(b3, b1), 1e-5) << what;
      EXPECT_LT(relativeError(c3, c1), 1e-5) << what;
    }
  }
}

// The wgmma stages forced on against forced off (the mma.sync kernels) on the same problem.
class ExpertsWgmmaCudaTest : public ExpertsCudaTest {
 protected:
  void SetUp() override {
    ExpertsCudaTest::SetUp();
    if (IsSkipped()) return;
    if (!expertsWgmmaSupported()) {
      GTEST_SKIP() << "no sm_90a wgmma kernels for this device or build";
    }
  }
  void TearDown() override {
    setExpertsWgmmaMode(ExpertsWgmmaMode::kEnvironment);
    setExpertsWarpSpecialized(kExpertsWarpSpecializedDefault);
    setExpertsGluPingPong(kExpertsGluPingPongDefault);
    setExpertsGluSplit(kExpertsGluSplitDefault);
    setExpertsWsWgrad(kExpertsWsWgradDefault);
    setExpertsWgradWalk(ExpertsWgradWalk::kBySkew);
    ExpertsCudaTest::TearDown();
  }
};

// Every output of one experts forward + backward, on the host (rows < R where rows vary).
struct ExpertsRun {
  std::vector<std::pair<const char*, Tensor<float>>> outputs;
};

// Forward + backward into zero gradients; `fused`: gather by index, row weights in the epilogue
// and dRowWeight (the folded combine), else the permuted rows and dYPerm.
void runExperts(CudaContext& context, const Problem& p, const DeviceWeights& dw, int64_t f,
                bool fused, const Tensor<float>& dY, ExpertsRun& run,
                const GluParams& glu = GluParams()) {
  const MoeShape& s = p.shape;
  const int64_t d = p.d, rows = p.plan.rows(), maxRows = s.n * s.k;
  DeviceExpertsIo io;
  MOEWB_ASSIGN_OR_FAIL(auto rowWeight, poisonedFloat(context, {maxRows}));
  if (fused) {
    MOEWB_ASSERT_OK(slotsToRowsCuda(context, p.dWeight, p.dPlan, rowWeight));
    io.gatherIndex = &p.dPlan.rowToken;
    io.rowWeight = &rowWeight;
    io.outputIndex = &p.dPlan.rowToken;
  }
  const DeviceTensor<bf16>& x = fused ? p.dx : p.xPerm;
  DeviceExpertsSaved saved;
  MOEWB_ASSIGN_OR_FAIL(DeviceTensor<bf16> y,
                       expertsForwardCuda(context, x, p.dPlan.offsets, dw.view(), saved, glu, io));
  Tensor<float> zerosF({s.e, f, d}), zerosD({s.e, d, f});
  MOEWB_ASSIGN_OR_FAIL(auto dDY, toDeviceBf16(context, dY, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto gGate, toDevice(context, zerosF, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto gUp, toDevice(context, zerosF, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto gDown, toDevice(context, zerosD, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dRowWeight, poisonedFloat(context, {maxRows}));
  MOEWB_ASSIGN_OR_FAIL(
      DeviceTensor<bf16> dx,
      expertsBackwardCuda(context, dDY, x, p.dPlan.offsets, dw.view(), saved,
                          DeviceExpertGrads{gGate, gUp, gDown}, glu, io,
                          fused ? &dRowWeight : nullptr));
  auto addRows = [&](const char* name, const DeviceTensor<bf16>& t) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> host, toHostFloat(context, t));
    run.outputs.emplace_back(name, moetest::slice(host, rows));
  };
  auto addAll = [&](const char* name, const DeviceTensor<float>& t) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> host, toHost(context, t));
    run.outputs.emplace_back(name, std::move(host));
  };
  addRows("y", y);
  addRows("gatePre", saved.gatePre);
  addRows("upPre", saved.upPre);
  addRows("hidden", saved.hidden);
  addRows("dx", dx);
  addAll("gradGate", gGate);
  addAll("gradUp", gUp);
  addAll("gradDown", gDown);
  if (fused) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> host, toHost(context, dRowWeight));
    run.outputs.emplace_back("dRowWeight", moetest::slice(host, rows));
  }
}

// Ragged experts (one of 2056 rows: 17 row tiles, the last partial), many empty experts (E = 64
// with 126 rows), D and F not multiples of the 128-wide tiles nor of the 64-deep K step, whole
// K tiles, and a wider problem (16 K tiles of D).
TEST_F(ExpertsWgmmaCudaTest, WgmmaMatchesMmaSyncAndIsDeterministic) {
  struct Case {
    int64_t d, f;
    MoeShape shape;
  };
  const std::vector<Case> cases{{264, 136, {257, 1, 8}}, {264, 136, {63, 64, 2}},
                                {264, 136, {257, 64, 8}}, {320, 192, {257, 8, 8}},
                                {1024, 512, {512, 8, 4}}};
  uint64_t seed = 11000;
  for (const Case& c : cases) {
    Problem p;
    makeProblem(context(), c.shape, c.d, seed += 10, p);
    if (HasFatalFailure()) return;
    HostWeights hw = randomWeights(c.shape.e, c.d, c.f, false, seed += 10);
    MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
    for (bool fused : {false, true}) {
      const std::string what = describe(c.shape) + " D=" + std::to_string(c.d) +
                               " F=" + std::to_string(c.f) + (fused ? " fused" : " plain");
      const int64_t dyRows = fused ? c.shape.n : c.shape.n * c.shape.k;
      const Tensor<float> dY = roundedToBf16(randomTensor({dyRows, c.d}, seed += 10));
      ExpertsRun off, on, again;
      setExpertsWgmmaMode(ExpertsWgmmaMode::kOff);
      runExperts(context(), p, dw, c.f, fused, dY, off);
      if (HasFatalFailure()) return;
      setExpertsWgmmaMode(ExpertsWgmmaMode::kOn);
      runExperts(context(), p, dw, c.f, fused, dY, on);
      if (HasFatalFailure()) return;
      runExperts(context(), p, dw, c.f, fused, dY, again);
      if (HasFatalFailure()) return;
      ASSERT_EQ(on.outputs.size(), off.outputs.size());
      for (size_t i = 0; i < on.outputs.size(); ++i) {
        const auto& [name, got] = on.outputs[i];
        EXPECT_LT(relativeError(got, off.outputs[i].second), 1e-2) << what << " " << name;
        const Tensor<float>& repeat = again.outputs[i].second;
        ASSERT_EQ(repeat.numel(), got.numel()) << what << " " << name;
        for (int64_t j = 0; j < got.numel(); ++j) {
          ASSERT_EQ(std::memcmp(&repeat[j], &got[j], sizeof(float)), 0)
              << what << " " << name << " not bitwise deterministic at " << j;
        }
      }
    }
  }
}

// The shapes of the round-against-round tests below: E = 64 with 126 rows (empty and 1-row
// experts), D and F not multiples of 64 (D = 72 below one 256-wide column tile, F = 40 below one
// 64-deep K step; D = 264, F = 136: partial tiles), and 8192 rows over 8 experts (more tiles
// than CTAs of a persistent grid).
struct RoundCase {
  int64_t d, f;
  MoeShape shape;
};
const std::vector<RoundCase> kRoundCases{{264, 136, {63, 64, 2}},
                                         {72, 40, {257, 8, 4}},
                                         {264, 136, {257, 64, 8}},
                                         {1096, 520, {2048, 8, 4}}};

// Round 5's warp-specialized kernels (forward down plain and row-weighted, dx; see
// experts_wgmma_cuda.h) against round 2 (setExpertsWarpSpecialized(false)), every output of
// forward + backward BITWISE: E = 64 with 126 rows (empty and 1-row experts), D and F not
// multiples of 64 (D = 72 below one 256-wide column tile and F = 40 below one 64-deep K step;
// D = 264, F = 136; D = 1096, F = 520), gather and row weights (fused) and permuted rows
// (plain), and 8192 rows x 5 column tiles (over 320 tiles: each CTA of the persistent grid
// walks several). Seeds differ from the other tests'.
TEST_F(ExpertsWgmmaCudaTest, WarpSpecializedEqualsRound2Bitwise) {
  uint64_t seed = 12000;
  for (const RoundCase& c : kRoundCases) {
    Problem p;
    makeProblem(context(), c.shape, c.d, seed += 10, p);
    if (HasFatalFailure()) return;
    HostWeights hw = randomWeights(c.shape.e, c.d, c.f, false, seed += 10);
    MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
    for (bool fused : {false, true}) {
      const std::string what = describe(c.shape) + " D=" + std::to_string(c.d) +
                               " F=" + std::to_string(c.f) + (fused ? " fused" : " plain");
      const int64_t dyRows = fused ? c.shape.n : c.shape.n * c.shape.k;
      const Tensor<float> dY = roundedToBf16(randomTensor({dyRows, c.d}, seed += 10));
      ExpertsRun round2, ws;
      setExpertsWgmmaMode(ExpertsWgmmaMode::kOn);
      setExpertsGluSplit(false);  // round 2's gate+up / dh in both runs
      setExpertsWarpSpecialized(false);
      runExperts(context(), p, dw, c.f, fused, dY, round2);
      setExpertsWarpSpecialized(true);
      if (HasFatalFailure()) return;
      runExperts(context(), p, dw, c.f, fused, dY, ws);
      if (HasFatalFailure()) return;
      ASSERT_EQ(ws.outputs.size(), round2.outputs.size());
      for (size_t i = 0; i < ws.outputs.size(); ++i) {
        const auto& [name, got] = ws.outputs[i];
        const Tensor<float>& want = round2.outputs[i].second;
        ASSERT_EQ(got.numel(), want.numel()) << what << " " << name;
        int64_t differing = 0, first = -1;
        for (int64_t j = 0; j < got.numel(); ++j) {
          if (std::memcmp(&got[j], &want[j], sizeof(float)) != 0) {
            if (first < 0) first = j;
            ++differing;
          }
        }
        EXPECT_EQ(differing, 0) << what << " " << name << ": " << differing << " of "
                                << got.numel() << " elements differ from round 2, first at "
                                << first;
      }
    }
  }
}

// Round 7's ping-pong gate+up / dh kernels (setExpertsGluPingPong; grouped_gemm_07.md) against
// round 2 (off), every output of forward + backward BITWISE (gatePre / upPre / hidden directly,
// dGate / dUp through dx and the weight gradients): E = 64 with 126 rows (empty and 1-row
// experts), D and F not multiples of 64 (F = 40 below one 64-wide gate+up column tile and one
// K step; D = 264, F = 136: partial K and column tiles), gather (fused) and permuted rows
// (plain), and 8192 rows (320 dh tiles, 576 gate+up tiles over at most 132 CTAs: both consumers
// of every CTA take tiles, the ring wraps). Round 5's down / dx stay at their default in both.
TEST_F(ExpertsWgmmaCudaTest, GluPingPongEqualsRound2Bitwise) {
  uint64_t seed = 14000;
  for (const RoundCase& c : kRoundCases) {
    Problem p;
    makeProblem(context(), c.shape, c.d, seed += 10, p);
    if (HasFatalFailure()) return;
    HostWeights hw = randomWeights(c.shape.e, c.d, c.f, false, seed += 10);
    MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
    for (bool fused : {false, true}) {
      const std::string what = describe(c.shape) + " D=" + std::to_string(c.d) +
                               " F=" + std::to_string(c.f) + (fused ? " fused" : " plain");
      const int64_t dyRows = fused ? c.shape.n : c.shape.n * c.shape.k;
      const Tensor<float> dY = roundedToBf16(randomTensor({dyRows, c.d}, seed += 10));
      ExpertsRun round2, pingPong, again;
      setExpertsWgmmaMode(ExpertsWgmmaMode::kOn);
      setExpertsGluSplit(false);  // the split would take precedence over the ping-pong kernel
      setExpertsGluPingPong(false);
      runExperts(context(), p, dw, c.f, fused, dY, round2);
      setExpertsGluPingPong(true);
      if (HasFatalFailure()) return;
      runExperts(context(), p, dw, c.f, fused, dY, pingPong);
      if (HasFatalFailure()) return;
      runExperts(context(), p, dw, c.f, fused, dY, again);
      if (HasFatalFailure()) return;
      ASSERT_EQ(pingPong.outputs.size(), round2.outputs.size());
      for (size_t i = 0; i < pingPong.outputs.size(); ++i) {
        const auto& [name, got] = pingPong.outputs[i];
        const Tensor<float>& want = round2.outputs[i].second;
        const Tensor<float>& repeat = again.outputs[i].second;
        ASSERT_EQ(got.numel(), want.numel()) << what << " " << name;
        ASSERT_EQ(repeat.numel(), got.numel()) << what << " " << name;
        int64_t differing = 0, first = -1, unstable = 0;
        for (int64_t j = 0; j < got.numel(); ++j) {
          if (std::memcmp(&got[j], &want[j], sizeof(float)) != 0) {
            if (first < 0) first = j;
            ++differing;
          }
          unstable += std::memcmp(&got[j], &repeat[j], sizeof(float)) != 0;
        }
        EXPECT_EQ(differing, 0) << what << " " << name << ": " << differing << " of "
                                << got.numel() << " elements differ from round 2, first at "
                                << first;
        EXPECT_EQ(unstable, 0) << what << " " << name << ": not bitwise deterministic";
      }
    }
  }
}

// Count of elements of `got` whose bits differ from `want` (first such index in `first`).
int64_t bitwiseDiffering(const Tensor<float>& got, const Tensor<float>& want, int64_t& first) {
  int64_t differing = 0;
  first = -1;
  for (int64_t j = 0; j < got.numel(); ++j) {
    if (std::memcmp(&got[j], &want[j], sizeof(float)) != 0) {
      if (first < 0) first = j;
      ++differing;
    }
  }
  return differing;
}

// Round 9's GLU split (setExpertsGluSplit; grouped_gemm_09.md) against round 2 (off), SwiGLU and
// SiTU: gatePre / upPre and everything computed from them and dY alone (dGate / dUp through dx
// and the gate / up weight gradients) BITWISE; hidden (from the bf16 gatePre / upPre instead of
// the fp32 accumulators) and what follows from it (y, the down gradient, dRowWeight) within bf16
// rounding; the split bitwise run to run. Shapes as the ping-pong test's (F = 40: one partial
// 128-wide gate+up tile and K step; empty and 1-row experts; 8192 rows over at most 132 CTAs).
TEST_F(ExpertsWgmmaCudaTest, GluSplitMatchesRound2) {
  GluParams situ;
  situ.kind = GluKind::kSitu;
  const std::set<std::string> bitwise = {"gatePre", "upPre", "dx", "gradGate", "gradUp"};
  uint64_t seed = 15000;
  for (const RoundCase& c : kRoundCases) {
    Problem p;
    makeProblem(context(), c.shape, c.d, seed += 10, p);
    if (HasFatalFailure()) return;
    HostWeights hw = randomWeights(c.shape.e, c.d, c.f, false, seed += 10);
    MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
    for (const GluParams& glu : {GluParams(), situ}) {
      for (bool fused : {false, true}) {
        const std::string what = describe(c.shape) + " D=" + std::to_string(c.d) + " F=" +
                                 std::to_string(c.f) + (fused ? " fused" : " plain") +
                                 (glu.kind == GluKind::kSitu ? " SiTU" : " SwiGLU");
        const int64_t dyRows = fused ? c.shape.n : c.shape.n * c.shape.k;
        const Tensor<float> dY = roundedToBf16(randomTensor({dyRows, c.d}, seed += 10));
        ExpertsRun round2, split, again;
        setExpertsWgmmaMode(ExpertsWgmmaMode::kOn);
        setExpertsGluSplit(false);
        runExperts(context(), p, dw, c.f, fused, dY, round2, glu);
        setExpertsGluSplit(true);
        if (HasFatalFailure()) return;
        runExperts(context(), p, dw, c.f, fused, dY, split, glu);
        if (HasFatalFailure()) return;
        runExperts(context(), p, dw, c.f, fused, dY, again, glu);
        if (HasFatalFailure()) return;
        ASSERT_EQ(split.outputs.size(), round2.outputs.size());
        for (size_t i = 0; i < split.outputs.size(); ++i) {
          const auto& [name, got] = split.outputs[i];
          const Tensor<float>& want = round2.outputs[i].second;
          ASSERT_EQ(got.numel(), want.numel()) << what << " " << name;
          int64_t first = -1;
          EXPECT_EQ(bitwiseDiffering(again.outputs[i].second, got, first), 0)
              << what << " " << name << ": not bitwise deterministic";
          if (bitwise.count(name) != 0) {
            const int64_t differing = bitwiseDiffering(got, want, first);
            EXPECT_EQ(differing, 0) << what << " " << name << ": " << differing << " of "
                                    << got.numel() << " differ from round 2, first at " << first;
          } else {
            EXPECT_LT(relativeError(got, want), 1e-2) << what << " " << name;
          }
        }
      }
    }
  }
}


// Round 6's weight-gradient kernel (setExpertsWsWgrad; grouped_gemm_06.md) against round 2's
// (off), the three weight gradients (and every other output, which must not move) BITWISE, on
// each tile walk (setExpertsWgradWalk: by skew, the engine's default, which takes the dynamic
// walk on the device when expertsWgradSkewed holds; static; dynamic), and the default bitwise run
// to run: E = 64 with 126 rows (empty experts keep their zero gradients, 1-row experts: one
// partial K step; skewed: most rows > 2 x the mean of 2), D = 72 / F = 40 (M and N below one
// 128 x 256 tile), D = 264 / F = 136 (partial tiles in M, N and K), gather (fused: x rows through
// the gather index are the B operand of dGate / dUp) and permuted rows (plain), 8192 rows over
// 8 experts with D = 1096, F = 520 (~200 tiles per gradient over at most 132 CTAs: the ring
// wraps across tiles; balanced, so by skew walks statically), and the same size with every token
// on expert 0 (max / mean 8: by skew walks dynamically, the hot expert's 64-step tiles first).
// The other stages keep their defaults in every run.
TEST_F(ExpertsWgmmaCudaTest, WsWgradEqualsRound2Bitwise) {
  struct Case {
    int64_t d, f;
    MoeShape shape;
    bool hot;
  };
  const std::vector<Case> cases{{264, 136, {63, 64, 2}, false},
                                {72, 40, {257, 8, 4}, false},
                                {264, 136, {257, 64, 8}, false},
                                {1096, 520, {2048, 8, 4}, false},
                                {1096, 520, {4096, 16, 2}, true}};
  const std::vector<std::pair<ExpertsWgradWalk, const char*>> walks{
      {ExpertsWgradWalk::kBySkew, "by skew"},
      {ExpertsWgradWalk::kStatic, "static"},
      {ExpertsWgradWalk::kDynamic, "dynamic"}};
  uint64_t seed = 16000;
  int skewedCases = 0, balancedCases = 0;
  for (const Case& c : cases) {
    Problem p;
    makeProblem(context(), c.shape, c.d, seed += 10, p, c.hot);
    if (HasFatalFailure()) return;
    int64_t mostRows = 0;
    for (int64_t e = 0; e < c.shape.e; ++e)
      mostRows = std::max<int64_t>(mostRows, p.plan.offsets[e + 1] - p.plan.offsets[e]);
    const bool skewed = expertsWgradSkewed(mostRows, p.plan.rows(), c.shape.e);
    (skewed ? skewedCases : balancedCases) += 1;
    HostWeights hw = randomWeights(c.shape.e, c.d, c.f, false, seed += 10);
    MOEWB_ASSIGN_OR_FAIL(DeviceWeights dw, upload(context(), hw));
    for (bool fused : {false, true}) {
      const std::string what = describe(c.shape) + " D=" + std::to_string(c.d) +
                               " F=" + std::to_string(c.f) + (fused ? " fused" : " plain") +
                               (skewed ? " skewed" : " balanced");
      const int64_t dyRows = fused ? c.shape.n : c.shape.n * c.shape.k;
      const Tensor<float> dY = roundedToBf16(randomTensor({dyRows, c.d}, seed += 10));
      ExpertsRun round2, again;
      setExpertsWgmmaMode(ExpertsWgmmaMode::kOn);
      setExpertsWsWgrad(false);
      runExperts(context(), p, dw, c.f, fused, dY, round2);
      if (HasFatalFailure()) return;
      setExpertsWsWgrad(true);
      for (const auto& [walk, walkName] : walks) {
        setExpertsWgradWalk(walk);
        ExpertsRun ws;
        runExperts(context(), p, dw, c.f, fused, dY, ws);
        if (HasFatalFailure()) return;
        ASSERT_EQ(ws.outputs.size(), round2.outputs.size());
        for (size_t i = 0; i < ws.outputs.size(); ++i) {
          const auto& [name, got] = ws.outputs[i];
          const Tensor<float>& want = round2.outputs[i].second;
          ASSERT_EQ(got.numel(), want.numel()) << what << " " << walkName << " " << name;
          EXPECT_LT(relativeError(got, want), 1e-5) << what << " " << walkName << " " << name;
          int64_t first = -1;
          const int64_t differing = bitwiseDiffering(got, want, first);
          EXPECT_EQ(differing, 0) << what << " " << walkName << " " << name << ": " << differing
                                  << " of " << got.numel()
                                  << " elements differ from round 2, first at " << first;
        }
        if (walk != ExpertsWgradWalk::kBySkew) continue;
        runExperts(context(), p, dw, c.f, fused, dY, again);  // the default, run to run
        if (HasFatalFailure()) return;
        for (size_t i = 0; i < ws.outputs.size(); ++i) {
          const auto& [name, got] = ws.outputs[i];
          ASSERT_EQ(again.outputs[i].second.numel(), got.numel()) << what << " " << name;
          int64_t first = -1;
          EXPECT_EQ(bitwiseDiffering(again.outputs[i].second, got, first), 0)
              << what << " " << name << ": not bitwise deterministic, first at " << first;
        }
      }
    }
  }
  // The default walk met both of its branches.
  EXPECT_GT(skewedCases, 0);
  EXPECT_GT(balancedCases, 0);
}

// The rule of the default walk (experts_wgmma_cuda.h): dynamic only past twice the mean rows.
TEST(ExpertsWgradWalkTest, SkewRule) {
  EXPECT_FALSE(expertsWgradSkewed(1, 64, 64));         // every expert at the mean
  EXPECT_FALSE(expertsWgradSkewed(2248, 131072, 64));  // the benchmark's balanced 1.097
  EXPECT_FALSE(expertsWgradSkewed(4096, 131072, 64));  // exactly twice the mean
  EXPECT_TRUE(expertsWgradSkewed(4097, 131072, 64));   // just past it
  EXPECT_TRUE(expertsWgradSkewed(16376, 131072, 64));  // the benchmark's skewed 7.995
  EXPECT_FALSE(expertsWgradSkewed(0, 0, 8));           // no rows at all
}

}  // namespace
}  // namespace moewb::engine::cuda
