// The weighted combine, its backward (dYPerm, dTopWeight), the sum-only combine and the
// [N, k] <-> [R] maps on the GPU against the CPU combine (double, from bf16-rounded inputs), with
// capacity-dropped slots and empty experts; and the MoE invariant: dispatch -> identity experts
// -> combine returns each token scaled by the sum of its kept routing weights.
#include "ops/combine/combine_cuda.h"

#include <gtest/gtest.h>

#include "moe_cuda_test_util.h"
#include "ops/combine/combine.h"
#include "ops/permute/permute_cuda.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using moetest::describe;
using moetest::MoeShape;

using CombineCudaTest = CudaTest;
using MoeInvariantCudaTest = CudaTest;

TEST_F(CombineCudaTest, ForwardBackwardAndMapsMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 4000;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (int64_t d : {40, 13}) {
      const std::string what = describe(s) + " D=" + std::to_string(d);
      Tensor<int32_t> top = moetest::randomTopExpert(s.n, s.k, s.e, ++seed);
      Tensor<uint8_t> keep = moetest::randomKeep(s.n, s.k, ++seed);
      Dispatch plan = buildDispatch(top, s.e, &keep);
      const int64_t rows = plan.rows(), maxRows = s.n * s.k;
      MOEWB_ASSIGN_OR_FAIL(auto dTop, toDevice(context(), top, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dKeep, toDevice(context(), keep, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(DeviceDispatch dPlan, buildDispatchCuda(context(), dTop, s.e, &dKeep));
      Tensor<float> yPerm = roundedToBf16(randomTensor({maxRows, d}, ++seed));
      Tensor<float> weight = randomTensor({s.n, s.k}, ++seed, 1.0, true);
      Tensor<float> dy = roundedToBf16(randomTensor({s.n, d}, ++seed));
      MOEWB_ASSIGN_OR_FAIL(auto dYPermIn,
                           toDeviceBf16(context(), yPerm, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dWeight, toDevice(context(), weight, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
      const Tensor<double> yPermD = toDouble(moetest::slice(yPerm, rows));
      const Tensor<double> weightD = toDouble(weight);
      // Forward.
      MOEWB_ASSIGN_OR_FAIL(auto y, poisonedBf16(context(), {s.n, d}));
      MOEWB_ASSERT_OK(combineForwardCuda(context(), dYPermIn, dWeight, dPlan, y));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY, toHostFloat(context(), y));
      Tensor<double> wantY = combineForward(pool, yPermD, weightD, plan);
      EXPECT_LT(relativeError(gotY, toFloat(wantY)), 1e-2) << what;
      // Sum-only form.
      MOEWB_ASSERT_OK(combineSumForwardCuda(context(), dYPermIn, dPlan, y));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotSum, toHostFloat(context(), y));
      Tensor<double> wantSum = combineSumForward(pool, yPermD, plan);
      EXPECT_LT(relativeError(gotSum, toFloat(wantSum)), 1e-2) << what;
      // Backward.
      MOEWB_ASSIGN_OR_FAIL(auto dYPerm, poisonedBf16(context(), {maxRows, d}));
      MOEWB_ASSIGN_OR_FAIL(auto dTopWeight, poisonedFloat(context(), {s.n, s.k}));
      MOEWB_ASSERT_OK(
          combineBackwardCuda(context(), dDy, dYPermIn, dWeight, dPlan, dYPerm, dTopWeight));
      Tensor<double> wantDYPerm, wantDTopWeight;
      combineBackward(pool, toDouble(dy), yPermD, weightD, plan, wantDYPerm, wantDTopWeight);
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDYPerm, toHostFloat(context(), dYPerm));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDTop, toHost(context(), dTopWeight));
      EXPECT_LT(relativeError(moetest::slice(gotDYPerm, rows), toFloat(wantDYPerm)), 1e-2) << what;
      EXPECT_LT(relativeError(gotDTop, toFloat(wantDTopWeight)), 1e-5) << what;
      for (int64_t i = 0; i < keep.numel(); ++i) {
        if (keep[i] == 0) {
          EXPECT_EQ(gotDTop[i], 0.0f) << what << " dropped pair " << i;
        }
      }
      // slotsToRows / rowsToSlots.
      MOEWB_ASSIGN_OR_FAIL(auto rowValues, poisonedFloat(context(), {maxRows}));
      MOEWB_ASSERT_OK(slotsToRowsCuda(context(), dWeight, dPlan, rowValues));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotRows, toHost(context(), rowValues));
      Tensor<float> wantRows = slotsToRows(weight, plan);
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(gotRows[r], wantRows[r]) << what << r;
      MOEWB_ASSIGN_OR_FAIL(auto slotValues, poisonedFloat(context(), {s.n, s.k}));
      MOEWB_ASSERT_OK(rowsToSlotsCuda(context(), rowValues, dPlan, slotValues));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotSlots, toHost(context(), slotValues));
      Tensor<float> wantSlots = rowsToSlots(wantRows, plan);
      for (int64_t i = 0; i < gotSlots.numel(); ++i) ASSERT_EQ(gotSlots[i], wantSlots[i]) << what;
    }
  }
}

// permute -> identity experts -> combine: y[t] = (sum of kept w[t, j]) x[t].
TEST_F(MoeInvariantCudaTest, IdentityExpertsReturnInputScaledByWeightSums) {
  uint64_t seed = 5000;
  const int64_t d = 48;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (bool masked : {false, true}) {
      Tensor<int32_t> top = moetest::randomTopExpert(s.n, s.k, s.e, ++seed);
      Tensor<uint8_t> keep = moetest::randomKeep(s.n, s.k, ++seed);
      Tensor<float> weight = randomTensor({s.n, s.k}, ++seed, 1.0, true);
      Tensor<float> x = roundedToBf16(randomTensor({s.n, d}, ++seed));
      MOEWB_ASSIGN_OR_FAIL(auto dTop, toDevice(context(), top, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dKeep, toDevice(context(), keep, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dWeight, toDevice(context(), weight, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dx, toDeviceBf16(context(), x, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(DeviceDispatch plan,
                           buildDispatchCuda(context(), dTop, s.e, masked ? &dKeep : nullptr));
      MOEWB_ASSIGN_OR_FAIL(auto xPerm, poisonedBf16(context(), {s.n * s.k, d}));
      MOEWB_ASSERT_OK(permuteForwardCuda(context(), dx, plan, xPerm));
      MOEWB_ASSIGN_OR_FAIL(auto y, poisonedBf16(context(), {s.n, d}));
      MOEWB_ASSERT_OK(combineForwardCuda(context(), xPerm, dWeight, plan, y));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHostFloat(context(), y));
      Tensor<float> want({s.n, d});
      for (int64_t t = 0; t < s.n; ++t) {
        double sum = 0;
        for (int64_t j = 0; j < s.k; ++j) {
          if (!masked || keep.at(t, j) != 0) sum += weight.at(t, j);
        }
        for (int64_t c = 0; c < d; ++c) want.at(t, c) = float(sum * x.at(t, c));
      }
      EXPECT_LT(relativeError(got, want), 1e-2) << describe(s) << (masked ? " masked" : "");
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
