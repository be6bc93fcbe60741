// Private to ops/adamw: the gradient-norm launchers with a caller-provided workspace (the
// allocation lives in adamw_cuda.cpp; nvcc cannot compile DeviceTensor::create into a Result).
#pragma once

#include <cstdint>

#include "cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// Blocks (= partial sums) used for a buffer of n elements (a function of n only; 0 for n == 0).
int64_t gradNormBlocks(int64_t n);

// partial[0 .. gradNormBlocks(n)) = per-block sums of grad^2 (double).
Status gradNormPartials(cudaStream_t stream, const float* grad, int64_t n, double* partial);

// norm[0] = sqrt(sum of partial[0 .. count)) in order of a fixed tree (one block).
Status gradNormFinish(cudaStream_t stream, const double* partial, int64_t count, double* norm);

}  // namespace moewb::engine::cuda
