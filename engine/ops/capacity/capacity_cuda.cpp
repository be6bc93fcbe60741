// Host side of the GPU capacity mask: checks, the unmasked plan and allocation (see
// capacity_cuda.h); the kernels are in capacity_cuda.cu.
#include "ops/capacity/capacity_cuda.h"

#include <string>
#include <utility>

#include "ops/capacity/capacity_cuda_kernels.h"
#include "ops/permute/permute_cuda.h"

namespace moewb::engine::cuda {

Result<DeviceCapacityMask> capacityMaskCuda(CudaContext& context,
                                            const DeviceTensor<int32_t>& topExpert,
                                            const DeviceTensor<float>& topWeight,
                                            int64_t numExperts, int64_t capacity,
                                            DropPolicy policy) {
  if (capacity < 0) {
    return invalidArgument("capacityMaskCuda: capacity = " + std::to_string(capacity) +
                           ", accepted >= 0");
  }
  if (topExpert.rank() != 2 || topWeight.numel() != topExpert.numel()) {
    return invalidArgument("capacityMaskCuda: topExpert " + topExpert.shapeString() +
                           ", topWeight " + topWeight.shapeString());
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceDispatch plan, buildDispatchCuda(context, topExpert, numExperts));
  DeviceCapacityMask mask;
  mask.capacity = capacity;
  MOEWB_ASSIGN_OR_RETURN(mask.keep, context.newTensor<uint8_t>({topExpert.dim(0), topExpert.dim(1)},
                                                               MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(mask.dropped,
                         context.newTensor<int32_t>({numExperts}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(capacityMaskLaunch(
      context.stream(), topExpert.data(), topWeight.data(), plan.maxRows(), int32_t(plan.topK),
      int32_t(numExperts), capacity, policy == DropPolicy::kProbs, plan.rowToken.data(),
      plan.rowSlot.data(), plan.counts.data(), plan.offsets.data(), mask.keep.data(),
      mask.dropped.data()));
  return Result<DeviceCapacityMask>(std::move(mask));
}

}  // namespace moewb::engine::cuda
