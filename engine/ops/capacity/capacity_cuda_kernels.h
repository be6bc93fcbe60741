// Private to the GPU capacity mask: its launcher over raw device pointers (allocation lives in
// capacity_cuda.cpp, host code, because nvcc cannot compile DeviceTensor::create into a Result).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// keep [pairs] (1 = kept) and dropped [numExperts] from an UNMASKED plan of the same topExpert
// (rowToken / rowSlot / counts / offsets); byProbs selects DropPolicy::kProbs.
Status capacityMaskLaunch(cudaStream_t stream, const int32_t* topExpert, const float* topWeight,
                          int64_t pairs, int32_t topK, int32_t numExperts, int64_t capacity,
                          bool byProbs, const int32_t* rowToken, const int32_t* rowSlot,
                          const int32_t* counts, const int32_t* offsets, uint8_t* keep,
                          int32_t* dropped);

}  // namespace moewb::engine::cuda
