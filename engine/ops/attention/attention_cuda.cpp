// GPU attention host side: projections through cuda/gemm.h; the core routed to the flash kernels
// (flash_attention_cuda.h) for head dims 64 and 128, otherwise to per-sequence head-batched
// cuBLAS GEMMs with the softmax kernels of attention_cuda.cu (see attention_cuda.h).
#include "ops/attention/attention_cuda.h"

#include <cmath>

#include "runtime/cuda/gemm.h"
#include "ops/attention/attention_cuda_kernels.h"
#include "ops/attention/flash_attention_cuda.h"
#include "ops/linear/linear_cuda.h"

namespace moewb::engine::cuda {
namespace {

// Head h of sequence b in an [N, D] tensor: `base + b*T*D + h*K`, rows of stride D; batched over
// heads with stride K.
GemmOperand headOperand(const bf16* base, const AttentionDims& dims, int64_t b, bool transposed) {
  const int64_t d = dims.dModel();
  return GemmOperand{base + b * dims.seqLen * d, DType::kBf16, d, transposed, dims.headDim};
}
GemmOutput headOutput(bf16* base, const AttentionDims& dims, int64_t b) {
  const int64_t d = dims.dModel();
  return GemmOutput{base + b * dims.seqLen * d, DType::kBf16, d, dims.headDim};
}

// s[h] = scale * q_bh k_bh^T, fp32 [H, T, T].
Status scores(CudaContext& context, const AttentionDims& dims, const bf16* q, const bf16* k,
              int64_t b, float* s) {
  const int64_t t = dims.seqLen;
  const float scale = float(1.0 / std::sqrt(double(dims.headDim)));
  return gemm(context, t, t, dims.headDim, scale, headOperand(q, dims, b, false),
              headOperand(k, dims, b, true), 0.0f, GemmOutput{s, DType::kF32, t, t * t},
              dims.numHeads);
}

}  // namespace

Status attentionCoreForwardCublas(CudaContext& context, const AttentionDims& dims, const bf16* q,
                                  const bf16* k, const bf16* v, float* lse, bf16* contextOut) {
  const int64_t t = dims.seqLen, heads = dims.numHeads;
  if (dims.tokens() == 0 || heads == 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> s,
                         context.newTensor<float>({heads, t, t}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> p,
                         context.newTensor<bf16>({heads, t, t}, MemoryCategory::kWorkspace));
  for (int64_t b = 0; b < dims.batch; ++b) {
    MOEWB_RETURN_IF_ERROR(scores(context, dims, q, k, b, s.data()));
    MOEWB_RETURN_IF_ERROR(attentionSoftmaxForward(context.stream(), s.data(), p.data(),
                                                  lse + b * heads * t, heads, t));
    // o_bh[T, K] = P_bh[T, T] v_bh[T, K].
    MOEWB_RETURN_IF_ERROR(gemm(
        context, t, dims.headDim, t, 1.0f, GemmOperand{p.data(), DType::kBf16, t, false, t * t},
        headOperand(v, dims, b, false), 0.0f, headOutput(contextOut, dims, b), heads));
  }
  return Status::ok();
}

Status attentionCoreBackwardCublas(CudaContext& context, const AttentionDims& dims,
                                   const bf16* dContext, const bf16* q, const bf16* k,
                                   const bf16* v, const float* lse, bf16* dq, bf16* dk, bf16* dv) {
  const int64_t t = dims.seqLen, heads = dims.numHeads, hd = dims.headDim;
  if (dims.tokens() == 0 || heads == 0) return Status::ok();
  const float scale = float(1.0 / std::sqrt(double(hd)));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> s,
                         context.newTensor<float>({heads, t, t}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dp,
                         context.newTensor<float>({heads, t, t}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> p,
                         context.newTensor<bf16>({heads, t, t}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> ds,
                         context.newTensor<bf16>({heads, t, t}, MemoryCategory::kWorkspace));
  const GemmOperand pT{p.data(), DType::kBf16, t, true, t * t};
  const GemmOperand dsN{ds.data(), DType::kBf16, t, false, t * t};
  const GemmOperand dsT{ds.data(), DType::kBf16, t, true, t * t};
  for (int64_t b = 0; b < dims.batch; ++b) {
    MOEWB_RETURN_IF_ERROR(scores(context, dims, q, k, b, s.data()));
    // dP[T, T] = dO_bh v_bh^T (fp32).
    MOEWB_RETURN_IF_ERROR(gemm(context, t, t, hd, 1.0f, headOperand(dContext, dims, b, false),
                               headOperand(v, dims, b, true), 0.0f,
                               GemmOutput{dp.data(), DType::kF32, t, t * t}, heads));
    MOEWB_RETURN_IF_ERROR(attentionSoftmaxBackward(
        context.stream(), s.data(), dp.data(), lse + b * heads * t, p.data(), ds.data(), heads, t));
    // dv_bh = P^T dO_bh;  dq_bh = scale dS k_bh;  dk_bh = scale dS^T q_bh.
    MOEWB_RETURN_IF_ERROR(gemm(context, t, hd, t, 1.0f, pT, headOperand(dContext, dims, b, false),
                               0.0f, headOutput(dv, dims, b), heads));
    MOEWB_RETURN_IF_ERROR(gemm(context, t, hd, t, scale, dsN, headOperand(k, dims, b, false), 0.0f,
                               headOutput(dq, dims, b), heads));
    MOEWB_RETURN_IF_ERROR(gemm(context, t, hd, t, scale, dsT, headOperand(q, dims, b, false), 0.0f,
                               headOutput(dk, dims, b), heads));
  }
  return Status::ok();
}

Status attentionCoreForwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* q,
                                const bf16* k, const bf16* v, float* lse, bf16* contextOut) {
  if (!flashAttentionSupports(dims.headDim)) {
    return attentionCoreForwardCublas(context, dims, q, k, v, lse, contextOut);
  }
  return flashAttentionForward(context.stream(), dims.batch, dims.seqLen, dims.numHeads,
                               dims.headDim, q, k, v, lse, contextOut);
}

Status attentionCoreBackwardCuda(CudaContext& context, const AttentionDims& dims,
                                 const bf16* dContext, const bf16* q, const bf16* k, const bf16* v,
                                 const bf16* contextIn, const float* lse, bf16* dq, bf16* dk,
                                 bf16* dv) {
  if (!flashAttentionSupports(dims.headDim)) {
    return attentionCoreBackwardCublas(context, dims, dContext, q, k, v, lse, dq, dk, dv);
  }
  if (dims.tokens() == 0 || dims.numHeads == 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<float> delta,
      context.newTensor<float>({dims.batch, dims.numHeads, dims.seqLen},
                               MemoryCategory::kWorkspace));
  return flashAttentionBackward(context.stream(), dims.batch, dims.seqLen, dims.numHeads,
                                dims.headDim, dContext, q, k, v, contextIn, lse, delta.data(), dq,
                                dk, dv);
}

Status attentionForwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* x,
                            const AttentionWeightsCuda& weights, AttentionSavedCuda& saved,
                            bf16* y) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  const MemoryCategory kept = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(saved.q, context.newTensor<bf16>({n, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.k, context.newTensor<bf16>({n, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.v, context.newTensor<bf16>({n, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.context, context.newTensor<bf16>({n, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.lse,
                         context.newTensor<float>({dims.batch, dims.numHeads, dims.seqLen}, kept));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wq, saved.q.data(), n, d, d));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wk, saved.k.data(), n, d, d));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wv, saved.v.data(), n, d, d));
  MOEWB_RETURN_IF_ERROR(attentionCoreForwardCuda(context, dims, saved.q.data(), saved.k.data(),
                                                 saved.v.data(), saved.lse.data(),
                                                 saved.context.data()));
  return linearForwardCuda(context, saved.context.data(), weights.wo, y, n, d, d);
}

Status attentionBackwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* dy,
                             const bf16* x, const AttentionWeightsCuda& weights,
                             const AttentionSavedCuda& saved, const AttentionGradsCuda& grads,
                             bf16* dx) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  if (n == 0) return Status::ok();
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dContext, context.newTensor<bf16>({n, d}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dq, context.newTensor<bf16>({n, d}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dk, context.newTensor<bf16>({n, d}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dv, context.newTensor<bf16>({n, d}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dxAcc, context.newTensor<float>({n, d}, scratch));
  MOEWB_RETURN_IF_ERROR(linearBackwardDataCuda(context, dy, weights.wo, dContext.data(), n, d, d));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardWeightCuda(context, dy, saved.context.data(), grads.wo, n, d, d));
  MOEWB_RETURN_IF_ERROR(attentionCoreBackwardCuda(
      context, dims, dContext.data(), saved.q.data(), saved.k.data(), saved.v.data(),
      saved.context.data(), saved.lse.data(), dq.data(), dk.data(), dv.data()));
  // dx = dq Wq + dk Wk + dv Wv, summed in fp32 and rounded once.
  const GemmOutput acc{dxAcc.data(), DType::kF32, d, 0};
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, d, 1.0f, GemmOperand{dq.data(), DType::kBf16, d},
                             GemmOperand{weights.wq, DType::kBf16, d}, 0.0f, acc));
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, d, 1.0f, GemmOperand{dk.data(), DType::kBf16, d},
                             GemmOperand{weights.wk, DType::kBf16, d}, 1.0f, acc));
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, d, 1.0f, GemmOperand{dv.data(), DType::kBf16, d},
                             GemmOperand{weights.wv, DType::kBf16, d}, 1.0f, acc));
  MOEWB_RETURN_IF_ERROR(castFloatToBf16(context.stream(), dxAcc.data(), dx, n * d));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dq.data(), x, grads.wq, n, d, d));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dk.data(), x, grads.wk, n, d, d));
  return linearBackwardWeightCuda(context, dv.data(), x, grads.wv, n, d, d);
}

}  // namespace moewb::engine::cuda
