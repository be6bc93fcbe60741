// Host side of the device dispatch plan: checks and allocation (see permute_cuda.h); the kernels
// are in permute_cuda.cu.
#include "ops/permute/permute_cuda.h"

#include <limits>
#include <string>
#include <utility>

#include "ops/permute/permute_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {
constexpr int64_t kMaxExperts = 12288;  // E ints of shared memory per block (48 KiB)
}  // namespace

Result<DeviceDispatch> buildDispatchCuda(CudaContext& context,
                                         const DeviceTensor<int32_t>& topExpert, int64_t numExperts,
                                         const DeviceTensor<uint8_t>* keep) {
  if (topExpert.rank() != 2) {
    return invalidArgument("buildDispatchCuda: topExpert must be [N, k], got " +
                           topExpert.shapeString());
  }
  if (numExperts < 1 || numExperts > kMaxExperts) {
    return invalidArgument("buildDispatchCuda: numExperts = " + std::to_string(numExperts) +
                           ", accepted 1.." + std::to_string(kMaxExperts));
  }
  const int64_t n = topExpert.dim(0), k = topExpert.dim(1), pairs = n * k;
  if (pairs >= std::numeric_limits<int32_t>::max()) {
    return invalidArgument("buildDispatchCuda: N k = " + std::to_string(pairs) +
                           " does not fit int32 row ids");
  }
  if (keep != nullptr && keep->numel() != pairs) {
    return invalidArgument("buildDispatchCuda: keep mask " + keep->shapeString() +
                           " does not match topExpert " + topExpert.shapeString());
  }
  DeviceDispatch plan;
  plan.numTokens = n;
  plan.topK = k;
  plan.numExperts = numExperts;
  const MemoryCategory kept = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(plan.counts, context.newTensor<int32_t>({numExperts}, kept));
  MOEWB_ASSIGN_OR_RETURN(plan.offsets, context.newTensor<int32_t>({numExperts + 1}, kept));
  MOEWB_ASSIGN_OR_RETURN(plan.rowToken, context.newTensor<int32_t>({pairs}, kept));
  MOEWB_ASSIGN_OR_RETURN(plan.rowSlot, context.newTensor<int32_t>({pairs}, kept));
  MOEWB_ASSIGN_OR_RETURN(plan.slotRow, context.newTensor<int32_t>({n, k}, kept));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> chunkCounts,
                         context.newTensor<int32_t>({dispatchPlanChunks(pairs), numExperts},
                                                    MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(dispatchPlanLaunch(
      context.stream(), topExpert.data(), keep != nullptr ? keep->data() : nullptr, pairs,
      int32_t(k), int32_t(numExperts), chunkCounts.data(), plan.counts.data(), plan.offsets.data(),
      plan.rowToken.data(), plan.rowSlot.data(), plan.slotRow.data()));
  return Result<DeviceDispatch>(std::move(plan));
}

}  // namespace moewb::engine::cuda
