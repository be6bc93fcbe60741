// Lightning indexer on the GPU, allocating entry points (see sparse_attention_cuda.h); the kernels
// are in indexer_cuda.cu.
#include <cmath>

#include "runtime/cuda/gemm.h"
#include "ops/linear/linear_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

// y[rows, out] fp32 = alpha x[rows, in] W[out, in]^T with bf16 operands.
Status projectFp32(CudaContext& context, const bf16* x, const bf16* w, float* y, int64_t rows,
                   int64_t in, int64_t out, float alpha) {
  return gemm(context, rows, out, in, alpha, GemmOperand{x, DType::kBf16, in, false, 0},
              GemmOperand{w, DType::kBf16, in, true, 0}, 0.0f, GemmOutput{y, DType::kF32, out, 0});
}

}  // namespace

Status indexerForwardCuda(CudaContext& context, const IndexerDims& dims, const bf16* x,
                          const IndexerWeightsCuda& weights, IndexerSavedCuda& saved) {
  MOEWB_RETURN_IF_ERROR(checkIndexerDimsCuda(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, hi = dims.numHeads, di = dims.headDim;
  const auto act = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(saved.q, context.newTensor<float>({n, hi * di}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.kHat, context.newTensor<float>({n, di}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.rstd, context.newTensor<float>({n}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.k, context.newTensor<float>({n, di}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.w, context.newTensor<float>({n, hi}, act));
  if (n == 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> kPre,
                         context.newTensor<float>({n, di}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(projectFp32(context, x, weights.wq, saved.q.data(), n, d, hi * di, 1.0f));
  MOEWB_RETURN_IF_ERROR(projectFp32(context, x, weights.wk, kPre.data(), n, d, di, 1.0f));
  MOEWB_RETURN_IF_ERROR(projectFp32(context, x, weights.ww, saved.w.data(), n, d, hi,
                                    float(1.0 / std::sqrt(double(hi)))));
  return launchIndexerNormForward(context.stream(), kPre.data(), weights.normGain, weights.normBias,
                                  n, di, dims.normEps, saved.kHat.data(), saved.rstd.data(),
                                  saved.k.data());
}

Status indexerKlForwardCuda(CudaContext& context, const float* logits, const float* target,
                            const int32_t* selected, int64_t n, int64_t width, float* probs,
                            float* klSum) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> rowKl,
                         context.newTensor<float>({n}, MemoryCategory::kWorkspace));
  return launchIndexerKl(context.stream(), logits, target, selected, n, width, probs, rowKl.data(),
                         klSum);
}

Status indexerBackwardCuda(CudaContext& context, const IndexerDims& dims, const bf16* x,
                           const IndexerSavedCuda& saved, const int32_t* selected, int64_t width,
                           const SelectionTransposeCuda& byKey, const float* dLogits,
                           const IndexerWeightsCuda& weights, const IndexerGradsCuda& grads) {
  MOEWB_RETURN_IF_ERROR(checkIndexerDimsCuda(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, hi = dims.numHeads, di = dims.headDim;
  if (n == 0 || width == 0) return Status::ok();
  const auto ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> coef, context.newTensor<float>({n, hi, width}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dwPre, context.newTensor<bf16>({n, hi}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dq, context.newTensor<bf16>({n, hi * di}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dk, context.newTensor<float>({n, di}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dkPre, context.newTensor<bf16>({n, di}, ws));
  const IndexerBackwardBuffers buffers{
      saved.q.data(), saved.k.data(), saved.w.data(), saved.kHat.data(), saved.rstd.data(),
      coef.data(),    dwPre.data(),   dq.data(),      dk.data(),         dkPre.data()};
  MOEWB_RETURN_IF_ERROR(launchIndexerBackward(context.stream(), dims, buffers, selected, width,
                                              byKey.keyStart.data(), byKey.entries.data(), dLogits,
                                              weights.normGain, grads.normGain, grads.normBias));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dq.data(), x, grads.wq, n, d, hi * di));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dkPre.data(), x, grads.wk, n, d, di));
  return linearBackwardWeightCuda(context, dwPre.data(), x, grads.ww, n, d, hi);
}

}  // namespace moewb::engine::cuda
