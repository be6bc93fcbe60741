// Private to ops/dense_ffn: the kernel launcher the dense FFN's host code (dense_ffn_cuda.cpp)
// needs. Host code allocating DeviceTensors stays in .cpp files (nvcc cannot compile
// DeviceTensor::create's `return tensor;` into a Result).
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// out[i] = bf16(float(out[i]) + acc[i]) for i < count. Errors: launch errors.
Status denseFfnAddFloatIntoBf16(cudaStream_t stream, const float* acc, bf16* out, int64_t count);

}  // namespace moewb::engine::cuda
