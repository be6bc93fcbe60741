// Dense GLU FFN on the GPU: five cuBLAS GEMMs and the GLU kernels (see dense_ffn_cuda.h).
#include "ops/dense_ffn/dense_ffn_cuda.h"

#include "runtime/cuda/gemm.h"
#include "ops/experts/glu_activation_cuda.h"
#include "ops/linear/linear_cuda.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine::cuda {

Status denseFfnForwardCuda(CudaContext& context, const bf16* x, const DenseFfnWeightsCuda& weights,
                           const GluParams& activation, DenseFfnSavedCuda& saved, bf16* y,
                           int64_t n, int64_t d, int64_t f) {
  MOEWB_ASSIGN_OR_RETURN(saved.gatePre,
                         context.newTensor<bf16>({n, f}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.upPre,
                         context.newTensor<bf16>({n, f}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.hidden,
                         context.newTensor<bf16>({n, f}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.gate, saved.gatePre.data(), n, d, f));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.up, saved.upPre.data(), n, d, f));
  MOEWB_RETURN_IF_ERROR(gluForwardCuda(context.stream(), activation, saved.gatePre.data(),
                                       saved.upPre.data(), f, saved.hidden.data(), f, n, f));
  return linearForwardCuda(context, saved.hidden.data(), weights.down, y, n, f, d, true);
}

Status denseFfnBackwardCuda(CudaContext& context, const bf16* dy, const bf16* x,
                            const DenseFfnWeightsCuda& weights, const GluParams& activation,
                            const DenseFfnSavedCuda& saved, const DenseFfnGradsCuda& grads,
                            bf16* dx, int64_t n, int64_t d, int64_t f) {
  if (n <= 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<bf16> dGate,
      context.newTensor<bf16>({n, f}, MemoryCategory::kWorkspace));  // dh, then dg
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dUp,
                         context.newTensor<bf16>({n, f}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dxAcc,
                         context.newTensor<float>({n, d}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(linearBackwardDataCuda(context, dy, weights.down, dGate.data(), n, f, d));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardWeightCuda(context, dy, saved.hidden.data(), grads.down, n, f, d));
  MOEWB_RETURN_IF_ERROR(gluBackwardCuda(context.stream(), activation, saved.gatePre.data(),
                                        saved.upPre.data(), f, dGate.data(), f, dGate.data(),
                                        dUp.data(), f, n, f));
  // dxAcc[n, d] = dg[n, f] Wg[f, d] + du[n, f] Wu[f, d], in fp32.
  const GemmOutput acc{dxAcc.data(), DType::kF32, d, 0};
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, f, 1.0f, GemmOperand{dGate.data(), DType::kBf16, f},
                             GemmOperand{weights.gate, DType::kBf16, d}, 0.0f, acc));
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, f, 1.0f, GemmOperand{dUp.data(), DType::kBf16, f},
                             GemmOperand{weights.up, DType::kBf16, d}, 1.0f, acc));
  if (f == 0) MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), dxAcc.data(), 0.0f, n * d));
  MOEWB_RETURN_IF_ERROR(addFloatIntoBf16(context.stream(), dxAcc.data(), dx, n * d));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dGate.data(), x, grads.gate, n, d, f));
  return linearBackwardWeightCuda(context, dUp.data(), x, grads.up, n, d, f);
}

}  // namespace moewb::engine::cuda
