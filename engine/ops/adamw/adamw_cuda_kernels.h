// Private to ops/adamw: the gradient-norm launchers with a caller-provided workspace (the
// allocation lives in adamw_cuda.cpp; nvcc cannot compile DeviceTensor::create into a Result),
// and the device tables of a MultiTensorPlan (multi_tensor_adamw.h).
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// One tensor of a MultiTensorPlan as the kernels read it (48 bytes).
struct MultiTensorEntry {
  float* param;
  float* grad;
  float* m;
  float* v;
  bf16* paramBf16;
  int64_t n;
  int32_t decay;  // 1: decoupled weight decay applies
  int32_t unused;
};

// Elements [begin, end) of tensor `tensor`: the work of one block.
struct MultiTensorChunk {
  int32_t tensor;
  int32_t unused;
  int64_t begin;
  int64_t end;
};

// Blocks (= partial sums) used for a buffer of n elements (a function of n only; 0 for n == 0).
int64_t gradNormBlocks(int64_t n);

// partial[0 .. gradNormBlocks(n)) = per-block sums of grad^2 (double).
Status gradNormPartials(cudaStream_t stream, const float* grad, int64_t n, double* partial);

// norm[0] = sqrt(sum of partial[0 .. count)) in order of a fixed tree (one block).
Status gradNormFinish(cudaStream_t stream, const double* partial, int64_t count, double* norm);

}  // namespace moewb::engine::cuda
