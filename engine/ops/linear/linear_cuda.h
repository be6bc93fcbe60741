// The linear layer y = x W^T (W[out, in], row-vector convention, ENGINE-MATH §0) on the GPU and
// its two backward products, as thin wrappers over cuda/gemm.h (bf16 tensor-core GEMMs with fp32
// accumulation). Mirrors ops/linear/linear.h: raw row-major device pointers, so grouped callers
// can run them on sub-ranges (a block of rows, a slice of a stacked weight).
//
// Precision: x, W, y, dy, dx are bf16; dW is the fp32 weight gradient and is ADDED into.
// Every call queues one cuBLAS GEMM on the context's stream (no host synchronisation).
// Costs: 2*rows*in*out flops per product. rows, in, out >= 0; an empty output is a no-op.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// y[rows, out] = x[rows, in] W[out, in]^T (+ y when accumulate; the sum is formed in fp32 and
// rounded once to bf16). Errors: kInternal (cuBLAS).
Status linearForwardCuda(CudaContext& context, const bf16* x, const bf16* w, bf16* y, int64_t rows,
                         int64_t in, int64_t out, bool accumulate = false);

// dx[rows, in] = dy[rows, out] W[out, in] (+ dx when accumulate). Errors: kInternal (cuBLAS).
Status linearBackwardDataCuda(CudaContext& context, const bf16* dy, const bf16* w, bf16* dx,
                              int64_t rows, int64_t in, int64_t out, bool accumulate = false);

// dW[out, in] += dy[rows, out]^T x[rows, in], accumulated in fp32 into the fp32 gradient.
// Errors: kInternal (cuBLAS).
Status linearBackwardWeightCuda(CudaContext& context, const bf16* dy, const bf16* x, float* dw,
                                int64_t rows, int64_t in, int64_t out);

}  // namespace moewb::engine::cuda
