// Linear products on the GPU through cuda/gemm.h (see linear_cuda.h).
#include "ops/linear/linear_cuda.h"

#include "runtime/cuda/gemm.h"

namespace moewb::engine::cuda {

Status linearForwardCuda(CudaContext& context, const bf16* x, const bf16* w, bf16* y, int64_t rows,
                         int64_t in, int64_t out, bool accumulate) {
  // C[rows, out] = x[rows, in] * (W[out, in])^T.
  const GemmOperand a{x, DType::kBf16, in, false, 0};
  const GemmOperand b{w, DType::kBf16, in, true, 0};
  return gemm(context, rows, out, in, 1.0f, a, b, accumulate ? 1.0f : 0.0f,
              GemmOutput{y, DType::kBf16, out, 0});
}

Status linearBackwardDataCuda(CudaContext& context, const bf16* dy, const bf16* w, bf16* dx,
                              int64_t rows, int64_t in, int64_t out, bool accumulate) {
  // C[rows, in] = dy[rows, out] * W[out, in].
  const GemmOperand a{dy, DType::kBf16, out, false, 0};
  const GemmOperand b{w, DType::kBf16, in, false, 0};
  return gemm(context, rows, in, out, 1.0f, a, b, accumulate ? 1.0f : 0.0f,
              GemmOutput{dx, DType::kBf16, in, 0});
}

Status linearBackwardWeightCuda(CudaContext& context, const bf16* dy, const bf16* x, float* dw,
                                int64_t rows, int64_t in, int64_t out) {
  // C[out, in] += (dy[rows, out])^T * x[rows, in].
  const GemmOperand a{dy, DType::kBf16, out, true, 0};
  const GemmOperand b{x, DType::kBf16, in, false, 0};
  return gemm(context, out, in, rows, 1.0f, a, b, 1.0f, GemmOutput{dw, DType::kF32, in, 0});
}

}  // namespace moewb::engine::cuda
