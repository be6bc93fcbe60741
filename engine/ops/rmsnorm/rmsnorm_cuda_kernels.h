// Private to ops/rmsnorm: the RMSNorm backward launcher with a caller-provided dGain workspace.
// Allocation lives in rmsnorm_cuda.cpp (host code) because nvcc cannot compile
// DeviceTensor::create's `return tensor;` into a Result (no implicit move for converting
// constructors in its C++20 front end).
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// Rows of the dGain partial-sum workspace [chunks, d] for n rows (a function of n only).
int64_t rmsNormDgainChunks(int64_t n);

// rmsNormBackwardCuda with `partial` an fp32 [rmsNormDgainChunks(n), d] workspace.
Status rmsNormBackwardLaunch(cudaStream_t stream, const bf16* dy, const bf16* x, const bf16* gain,
                             const float* rstd, bf16* dx, float* dGain, float* partial, int64_t n,
                             int64_t d, bool accumulate);

}  // namespace moewb::engine::cuda
