// The routed MoE path chained on the GPU with capacity dropping and both fusions (router ->
// capacity mask -> masked dispatch -> experts reading x by index and weighting their rows ->
// sum-only combine; backward through the fused experts, the permute and the router weights)
// against the unfused CPU chain in double on the same routing (the GPU's top-k ids and weights,
// so that the capacity cut is identical; router selection itself is tested in
// router_cuda_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "moe_cuda_test_util.h"
#include "ops/combine/combine.h"
#include "ops/combine/combine_cuda.h"
#include "ops/experts/experts.h"
#include "ops/experts/experts_cuda.h"
#include "ops/capacity/capacity.h"
#include "ops/capacity/capacity_cuda.h"
#include "ops/permute/permute.h"
#include "ops/permute/permute_cuda.h"
#include "ops/router/router.h"
#include "ops/router/router_cuda.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using MoePathCudaTest = CudaTest;

struct PathCase {
  int64_t n, e, k;
  double capacityFactor;  // <= 0: dropless
  DropPolicy policy;
  RouterScore score;
};

std::string describe(const PathCase& c) {
  return "N=" + std::to_string(c.n) + " E=" + std::to_string(c.e) + " k=" + std::to_string(c.k) +
         " cf=" + std::to_string(c.capacityFactor) +
         (c.policy == DropPolicy::kProbs ? " probs" : " position") +
         (c.score == RouterScore::kSoftmax ? " softmax" : " sigmoid");
}

TEST_F(MoePathCudaTest, FusedPathWithCapacityMatchesUnfusedCpuChain) {
  ThreadPool pool(2);
  const int64_t d = 72, f = 40;
  uint64_t seed = 12000;
  const std::vector<PathCase> cases = {
      {257, 8, 2, 1.0, DropPolicy::kProbs, RouterScore::kSoftmax},
      {257, 8, 2, 1.0, DropPolicy::kPosition, RouterScore::kSigmoid},
      {257, 64, 4, 1.25, DropPolicy::kProbs, RouterScore::kSigmoid},
      {63, 64, 8, 0.5, DropPolicy::kPosition, RouterScore::kSoftmax},
      {63, 8, 1, 0.0, DropPolicy::kProbs, RouterScore::kSoftmax},
      {1, 1, 1, 0.0, DropPolicy::kProbs, RouterScore::kSigmoid},
  };
  for (const PathCase& c : cases) {
    const std::string what = describe(c);
    const int64_t maxRows = c.n * c.k;
    Tensor<float> logits = roundedToBf16(randomTensor({c.n, c.e}, ++seed, 2.0));
    Tensor<float> x = roundedToBf16(randomTensor({c.n, d}, ++seed));
    Tensor<float> gate = roundedToBf16(randomTensor({c.e, f, d}, ++seed, 1.0 / std::sqrt(d)));
    Tensor<float> up = roundedToBf16(randomTensor({c.e, f, d}, ++seed, 1.0 / std::sqrt(d)));
    Tensor<float> down = roundedToBf16(randomTensor({c.e, d, f}, ++seed, 1.0 / std::sqrt(f)));
    Tensor<float> dy = roundedToBf16(randomTensor({c.n, d}, ++seed));
    RouterConfig config;
    config.score = c.score;
    config.topK = int32_t(c.k);
    // GPU chain.
    MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDevice(context(), logits, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dx, toDeviceBf16(context(), x, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dGate, toDeviceBf16(context(), gate, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dUp, toDeviceBf16(context(), up, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dDown, toDeviceBf16(context(), down, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(DeviceRouterOutput route, routerForwardCuda(context(), dLogits, config));
    const int64_t capacity = expertCapacity(c.n, c.k, c.e, c.capacityFactor);
    DeviceCapacityMask mask;
    if (capacity >= 0) {
      MOEWB_ASSIGN_OR_FAIL(mask, capacityMaskCuda(context(), route.topExpert, route.topWeight, c.e,
                                                  capacity, c.policy));
    }
    MOEWB_ASSIGN_OR_FAIL(
        DeviceDispatch plan,
        buildDispatchCuda(context(), route.topExpert, c.e, capacity >= 0 ? &mask.keep : nullptr));
    MOEWB_ASSIGN_OR_FAIL(auto rowWeight, poisonedFloat(context(), {maxRows}));
    MOEWB_ASSERT_OK(slotsToRowsCuda(context(), route.topWeight, plan, rowWeight));
    DeviceExpertsIo io;
    io.gatherIndex = &plan.rowToken;
    io.rowWeight = &rowWeight;
    io.outputIndex = &plan.rowToken;
    DeviceExpertsSaved saved;
    const DeviceExpertWeights weights{dGate, dUp, dDown};
    MOEWB_ASSIGN_OR_FAIL(DeviceTensor<bf16> yPerm,
                         expertsForwardCuda(context(), dx, plan.offsets, weights, saved, {}, io));
    MOEWB_ASSIGN_OR_FAIL(auto y, poisonedBf16(context(), {c.n, d}));
    MOEWB_ASSERT_OK(combineSumForwardCuda(context(), yPerm, plan, y));
    Tensor<float> zerosF({c.e, f, d}), zerosD({c.e, d, f});
    MOEWB_ASSIGN_OR_FAIL(auto gGate, toDevice(context(), zerosF, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto gUp, toDevice(context(), zerosF, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto gDown, toDevice(context(), zerosD, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dRowWeight, poisonedFloat(context(), {maxRows}));
    MOEWB_ASSIGN_OR_FAIL(
        DeviceTensor<bf16> dXPerm,
        expertsBackwardCuda(context(), dDy, dx, plan.offsets, weights, saved,
                            DeviceExpertGrads{gGate, gUp, gDown}, {}, io, &dRowWeight));
    MOEWB_ASSIGN_OR_FAIL(auto dxTok, poisonedBf16(context(), {c.n, d}));
    MOEWB_ASSERT_OK(permuteBackwardCuda(context(), dXPerm, plan, dxTok));
    MOEWB_ASSIGN_OR_FAIL(auto dTop, poisonedFloat(context(), {c.n, c.k}));
    MOEWB_ASSERT_OK(rowsToSlotsCuda(context(), dRowWeight, plan, dTop));
    Tensor<float> zerosLogits({c.n, c.e});
    MOEWB_ASSIGN_OR_FAIL(auto dLogitsGrad,
                         toDevice(context(), zerosLogits, MemoryCategory::kActivations));
    MOEWB_ASSERT_OK(routerTopKBackwardCuda(context(), route, dTop, dLogitsGrad));
    // CPU chain on the GPU's routing, unfused, in double.
    MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> top, toHost(context(), route.topExpert));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> topWeight, toHost(context(), route.topWeight));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> probs, toHost(context(), route.probs));
    RouterOutput<double> routeD;
    routeD.score = c.score;
    routeD.routeScale = 1.0;
    routeD.probs = toDouble(probs);
    routeD.topExpert = top.clone();
    routeD.topWeight = toDouble(topWeight);
    if (c.score == RouterScore::kSigmoid) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> scores, toHost(context(), route.scores));
      routeD.scores = toDouble(scores);
    }
    Tensor<uint8_t> keep;
    if (capacity >= 0) keep = capacityMask(top, topWeight, c.e, capacity, c.policy).keep;
    Dispatch cpuPlan = buildDispatch(top, c.e, capacity >= 0 ? &keep : nullptr);
    Tensor<double> gateD = toDouble(gate), upD = toDouble(up), downD = toDouble(down);
    Tensor<double> xPerm = permuteForward(pool, toDouble(x), cpuPlan);
    ExpertsSaved<double> ref;
    const ExpertWeights<double> refWeights{gateD, upD, downD};
    Tensor<double> yPermRef = expertsForward(pool, xPerm, cpuPlan.offsets, refWeights, ref);
    Tensor<double> yRef = combineForward(pool, yPermRef, routeD.topWeight, cpuPlan);
    Tensor<double> dYPermRef, dTopRef;
    combineBackward(pool, toDouble(dy), yPermRef, routeD.topWeight, cpuPlan, dYPermRef, dTopRef);
    Tensor<double> wGate({c.e, f, d}), wUp({c.e, f, d}), wDown({c.e, d, f});
    Tensor<double> dXPermRef = expertsBackward(pool, dYPermRef, xPerm, cpuPlan.offsets, refWeights,
                                               ref, ExpertGrads<double>{wGate, wUp, wDown});
    Tensor<double> dxRef = permuteBackward(pool, dXPermRef, cpuPlan);
    Tensor<double> dLogitsRef({c.n, c.e});
    routerTopKBackward(pool, routeD, dTopRef, dLogitsRef);
    // Compare.
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotY, toHostFloat(context(), y));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDx, toHostFloat(context(), dxTok));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDTop, toHost(context(), dTop));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDLogits, toHost(context(), dLogitsGrad));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotGate, toHost(context(), gGate));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotUp, toHost(context(), gUp));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotDown, toHost(context(), gDown));
    EXPECT_LT(relativeError(gotY, toFloat(yRef)), 1e-2) << what;
    EXPECT_LT(relativeError(gotDx, toFloat(dxRef)), 1e-2) << what;
    // dTopWeight entries are single D-long dot products of bf16 rows. With N = 1 (one expert,
    // top-1) there is one of them and cancellation in it is not averaged out, so it is held to
    // the dot product's own error bound, |error| <= tol * sum_j |dy_j y_j|, rather than relative
    // to its (possibly cancelled) value.
    if (c.n == 1 && c.e == 1 && c.k == 1) {
      double magnitude = 0;
      for (int64_t j = 0; j < d; ++j) magnitude += std::abs(double(dy[j]) * yPermRef[j]);
      EXPECT_LE(std::abs(double(gotDTop[0]) - dTopRef[0]), 1e-2 * magnitude) << what;
    } else {
      EXPECT_LT(relativeError(gotDTop, toFloat(dTopRef)), 1e-2) << what;
    }
    if (c.e > 1) {  // one expert: the weight is 1 whatever the logit, so dLogits is ~0
      EXPECT_LT(relativeError(gotDLogits, toFloat(dLogitsRef)), 1e-2) << what;
    }
    EXPECT_LT(relativeError(gotGate, toFloat(wGate)), 1e-2) << what;
    EXPECT_LT(relativeError(gotUp, toFloat(wUp)), 1e-2) << what;
    EXPECT_LT(relativeError(gotDown, toFloat(wDown)), 1e-2) << what;
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
