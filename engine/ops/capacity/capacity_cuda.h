// Expert capacity and token dropping on the GPU (ENGINE-MATH §5.5), mirroring
// ops/capacity/capacity.h: every expert keeps at most `capacity` (token, expert) pairs;
// kProbs keeps its pairs of largest routing weight (ties to the earlier token), kPosition its
// earliest tokens. Same mask as the reference, bit for bit (the comparisons are on the same fp32
// weights).
// Method: an unmasked device dispatch plan (permute_cuda.h) lists each expert's pairs in token
// order; then one thread per pair computes the pair's rank inside its expert (kPosition: its row
// offset; kProbs: how many pairs of the expert beat it, counting until `capacity`) and keeps it
// when rank < capacity. Nothing is copied to the host; `capacity` is a host number computed from
// static shapes (expertCapacity in capacity.h).
// Costs: one plan build, then O(N k) (kPosition) or O(sum_e min(c_e, ...) c_e) (kProbs, only for
// over-full experts) work; 3-5 launches.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "ops/capacity/capacity.h"

namespace moewb::engine::cuda {

struct DeviceCapacityMask {
  int64_t capacity = -1;          // pairs kept per expert at most
  DeviceTensor<uint8_t> keep;     // [N, k] 1 = kept, 0 = dropped
  DeviceTensor<int32_t> dropped;  // [E] pairs dropped per expert
};

// The keep mask of topExpert[N, k] / topWeight[N, k] (fp32) for `capacity` (>= 0) and `policy`.
// Errors: kInvalidArgument (shapes, capacity < 0), kResourceExhausted, kInternal.
Result<DeviceCapacityMask> capacityMaskCuda(CudaContext& context,
                                            const DeviceTensor<int32_t>& topExpert /*[N, k]*/,
                                            const DeviceTensor<float>& topWeight /*[N, k]*/,
                                            int64_t numExperts, int64_t capacity,
                                            DropPolicy policy);

}  // namespace moewb::engine::cuda
