// The device dispatch plan equals the CPU buildDispatch exactly (with and without a capacity keep
// mask, empty experts, several plan chunks), the permute gather / per-token sum match the CPU
// permute, and the device capacity mask equals the reference for both drop policies.
#include <gtest/gtest.h>

#include "moe_cuda_test_util.h"
#include "ops/capacity/capacity.h"
#include "ops/capacity/capacity_cuda.h"
#include "ops/permute/permute_cuda.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using moetest::describe;
using moetest::MoeShape;

using DispatchCudaTest = CudaTest;
using PermuteCudaTest = CudaTest;
using CapacityCudaTest = CudaTest;

// Every field of the device plan against the CPU plan (rows < R only for the row arrays).
void expectSamePlan(CudaContext& context, const DeviceDispatch& got, const Dispatch& want,
                    const std::string& what) {
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> counts, toHost(context, got.counts));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> offsets, toHost(context, got.offsets));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> rowToken, toHost(context, got.rowToken));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> rowSlot, toHost(context, got.rowSlot));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> slotRow, toHost(context, got.slotRow));
  for (int64_t e = 0; e < want.numExperts; ++e) ASSERT_EQ(counts[e], want.counts[e]) << what;
  for (int64_t e = 0; e <= want.numExperts; ++e) ASSERT_EQ(offsets[e], want.offsets[e]) << what;
  for (int64_t r = 0; r < want.rows(); ++r) {
    ASSERT_EQ(rowToken[r], want.rowToken[r]) << what << " row " << r;
    ASSERT_EQ(rowSlot[r], want.rowSlot[r]) << what << " row " << r;
  }
  for (int64_t i = 0; i < want.slotRow.numel(); ++i) {
    ASSERT_EQ(slotRow[i], want.slotRow[i]) << what << " pair " << i;
  }
}

TEST_F(DispatchCudaTest, PlanEqualsReferenceExactly) {
  std::vector<MoeShape> shapes = moetest::moeShapes();
  shapes.push_back({3000, 64, 4});  // 12 plan chunks
  shapes.push_back({1000, 8, 8});   // every expert used by every token, 8 chunks
  uint64_t seed = 1000;
  for (const MoeShape& s : shapes) {
    for (bool masked : {false, true}) {
      Tensor<int32_t> top = moetest::randomTopExpert(s.n, s.k, s.e, ++seed);
      Tensor<uint8_t> keep = moetest::randomKeep(s.n, s.k, ++seed);
      MOEWB_ASSIGN_OR_FAIL(auto dTop, toDevice(context(), top, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dKeep, toDevice(context(), keep, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(DeviceDispatch plan,
                           buildDispatchCuda(context(), dTop, s.e, masked ? &dKeep : nullptr));
      Dispatch want = buildDispatch(top, s.e, masked ? &keep : nullptr);
      expectSamePlan(context(), plan, want, describe(s) + (masked ? " masked" : ""));
    }
  }
}

TEST_F(PermuteCudaTest, GatherAndTokenSumMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 2000;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (int64_t d : {24, 13}) {  // 16-byte path and scalar path
      Tensor<int32_t> top = moetest::randomTopExpert(s.n, s.k, s.e, ++seed);
      Tensor<uint8_t> keep = moetest::randomKeep(s.n, s.k, ++seed);
      Dispatch want = buildDispatch(top, s.e, &keep);
      MOEWB_ASSIGN_OR_FAIL(auto dTop, toDevice(context(), top, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dKeep, toDevice(context(), keep, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(DeviceDispatch plan, buildDispatchCuda(context(), dTop, s.e, &dKeep));
      Tensor<float> x = roundedToBf16(randomTensor({s.n, d}, ++seed));
      MOEWB_ASSIGN_OR_FAIL(auto dx, toDeviceBf16(context(), x, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto xPerm, poisonedBf16(context(), {s.n * s.k, d}));
      MOEWB_ASSERT_OK(permuteForwardCuda(context(), dx, plan, xPerm));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHostFloat(context(), xPerm));
      Tensor<float> wantPerm = permuteForward(pool, x, want);
      for (int64_t i = 0; i < want.rows() * d; ++i) {
        ASSERT_EQ(got[i], wantPerm[i]) << describe(s) << " D=" << d << " at " << i;
      }
      // Backward: per-token sum of the kept rows (rows >= R hold NaN poison and are never read).
      Tensor<float> dXPerm = roundedToBf16(randomTensor({s.n * s.k, d}, ++seed));
      MOEWB_ASSIGN_OR_FAIL(auto dDXPerm,
                           toDeviceBf16(context(), dXPerm, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dGrad, poisonedBf16(context(), {s.n, d}));
      MOEWB_ASSERT_OK(permuteBackwardCuda(context(), dDXPerm, plan, dGrad));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotGrad, toHostFloat(context(), dGrad));
      Tensor<double> wantGrad =
          permuteBackward(pool, toDouble(moetest::slice(dXPerm, want.rows())), want);
      EXPECT_LT(relativeError(gotGrad, toFloat(wantGrad)), 1e-2) << describe(s) << " D=" << d;
    }
  }
}

TEST_F(CapacityCudaTest, MaskEqualsReferenceForBothPolicies) {
  uint64_t seed = 3000;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (double factor : {0.5, 1.0, 1.25}) {
      for (DropPolicy policy : {DropPolicy::kProbs, DropPolicy::kPosition}) {
        Tensor<int32_t> top = moetest::randomTopExpert(s.n, s.k, s.e, ++seed);
        // Weights from a few values, so the probs policy meets ties (earlier token wins).
        Tensor<float> weight = randomTensor({s.n, s.k}, ++seed, 1.0, true);
        for (int64_t i = 0; i < weight.numel(); ++i) weight[i] = float(int(weight[i] * 4)) / 4;
        const int64_t capacity = expertCapacity(s.n, s.k, s.e, factor);
        CapacityMask want = capacityMask(top, weight, s.e, capacity, policy);
        MOEWB_ASSIGN_OR_FAIL(auto dTop, toDevice(context(), top, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(auto dWeight,
                             toDevice(context(), weight, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(DeviceCapacityMask got,
                             capacityMaskCuda(context(), dTop, dWeight, s.e, capacity, policy));
        MOEWB_ASSIGN_OR_FAIL(Tensor<uint8_t> keep, toHost(context(), got.keep));
        MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> dropped, toHost(context(), got.dropped));
        const std::string what = describe(s) + " cf=" + std::to_string(factor) +
                                 (policy == DropPolicy::kProbs ? " probs" : " position");
        for (int64_t i = 0; i < keep.numel(); ++i) ASSERT_EQ(keep[i], want.keep[i]) << what << i;
        for (int64_t e = 0; e < s.e; ++e) ASSERT_EQ(dropped[e], want.dropped[size_t(e)]) << what;
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
