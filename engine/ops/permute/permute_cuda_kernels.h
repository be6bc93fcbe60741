// Private to ops/permute (and the capacity mask): the dispatch plan launcher over raw device
// pointers. Allocation lives in the .cpp files (host code) because nvcc cannot compile
// DeviceTensor::create's `return tensor;` into a Result.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// Rows of the chunk-histogram workspace [chunks, E] for `pairs` (token, slot) pairs.
int64_t dispatchPlanChunks(int64_t pairs);

// Queues the three plan kernels (see permute_cuda.h). chunkCounts is an int32 workspace of
// [dispatchPlanChunks(pairs), numExperts]; the outputs are the DeviceDispatch buffers.
Status dispatchPlanLaunch(cudaStream_t stream, const int32_t* topExpert, const uint8_t* keep,
                          int64_t pairs, int32_t topK, int32_t numExperts, int32_t* chunkCounts,
                          int32_t* counts, int32_t* offsets, int32_t* rowToken, int32_t* rowSlot,
                          int32_t* slotRow);

}  // namespace moewb::engine::cuda
