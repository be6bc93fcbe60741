// Row-major matrix products on the tensor cores through cuBLAS: bf16 (or fp32) operands, fp32
// accumulation, bf16 or fp32 results, optionally batched with strides. Every GEMM of the CUDA
// backend goes through gemm() so that the row-major -> column-major mapping lives in one place.
//
//   C[m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * C      (per batch entry)
// op(X) = X, or X^T when the operand says transposed (then X is stored [k, m] / [n, k]).
// Queues work on the context's stream; returns cuBLAS's error as a Status.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"

namespace moewb::engine::cuda {

enum class DType : uint8_t { kBf16, kF32 };

struct GemmOperand {
  const void* data = nullptr;
  DType type = DType::kBf16;
  int64_t ld = 0;               // row stride of the stored matrix, elements
  bool transposed = false;      // op(X) = X^T
  int64_t batchStride = 0;      // elements between batch entries (batched calls)
};

struct GemmOutput {
  void* data = nullptr;
  DType type = DType::kBf16;
  int64_t ld = 0;               // row stride, elements
  int64_t batchStride = 0;
};

// C = alpha op(A) op(B) + beta C for `batch` entries. m, n, k >= 0 (0 work is a no-op; with
// k == 0 C is scaled by beta). Errors: kInternal naming the cuBLAS failure.
Status gemm(CudaContext& context, int64_t m, int64_t n, int64_t k, float alpha,
            const GemmOperand& a, const GemmOperand& b, float beta, const GemmOutput& c,
            int64_t batch = 1);

}  // namespace moewb::engine::cuda
