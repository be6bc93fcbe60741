#include "runtime/cuda/gemm.h"

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"

namespace moewb::engine::cuda {
namespace {

cudaDataType_t cublasType(DType type) { return type == DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

Status gemm(CudaContext& context, int64_t m, int64_t n, int64_t k, float alpha,
            const GemmOperand& a, const GemmOperand& b, float beta, const GemmOutput& c,
            int64_t batch) {
  MOEWB_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0);
  if (m == 0 || n == 0 || batch == 0) return Status::ok();
  // Row-major C[m, n] is column-major C^T[n, m] = op(B)^T op(A)^T: swap the operands and keep
  // each one's transpose flag.
  const cublasOperation_t opB = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opA = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  // fp32 accumulation for every dtype (bf16 operands run on the tensor cores).
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (batch == 1) {
    MOEWB_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        context.cublas(), opB, opA, int(n), int(m), int(k), &alpha, b.data, cublasType(b.type),
        int(b.ld), a.data, cublasType(a.type), int(a.ld), &beta, c.data, cublasType(c.type),
        int(c.ld), compute, CUBLAS_GEMM_DEFAULT));
    return Status::ok();
  }
  MOEWB_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      context.cublas(), opB, opA, int(n), int(m), int(k), &alpha, b.data, cublasType(b.type),
      int(b.ld), b.batchStride, a.data, cublasType(a.type), int(a.ld), a.batchStride, &beta,
      c.data, cublasType(c.type), int(c.ld), c.batchStride, int(batch), compute,
      CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

}  // namespace moewb::engine::cuda
