// MoE FFN stages on the GPU (see cuda_moe.h); the CPU twin is model/moe_ffn.cpp.
#include "cuda_model/cuda_moe.h"

#include "cuda/cuda_check.h"
#include "cuda/elementwise.h"
#include "cuda/gemm.h"
#include "ops/linear/linear_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace moewb::engine::cuda {
namespace {

int64_t expertWidth(const MoeOptions& options, const MoeShapeCuda& shape) {
  return options.latent() ? options.latentDim : shape.dModel;
}

Status routerForward(CudaContext& context, const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                     const MoeShapeCuda& shape, const MoeOptions& options, MoeSavedCuda& saved) {
  const int64_t n = shape.tokens, d = shape.dModel, e = shape.numExperts;
  MOEWB_ASSIGN_OR_RETURN(saved.logits, context.newTensor<float>({n, e}, MemoryCategory::kActivations));
  // logits [N, E] = x Wr^T in fp32 (routing decisions are sensitive to rounding).
  MOEWB_RETURN_IF_ERROR(gemm(context, n, e, d, 1.0f, GemmOperand{x.data(), DType::kBf16, d, false},
                             GemmOperand{w.router, DType::kBf16, d, true}, 0.0f,
                             GemmOutput{saved.logits.data(), DType::kF32, e}));
  MOEWB_ASSIGN_OR_RETURN(saved.route,
                         routerForwardCuda(context, saved.logits, options.routerConfig(), w.bias));
  MOEWB_ASSIGN_OR_RETURN(saved.switchAux,
                         auxLossForwardCuda(context, saved.route, options.auxLossCoef));
  if (options.seqAuxLossCoef != 0) {
    MOEWB_ASSIGN_OR_RETURN(saved.seqAux,
                           seqAuxLossForwardCuda(context, saved.route, options.seqAuxLossCoef,
                                                 options.seqLen > 0 ? options.seqLen : n));
  }
  if (options.zLossCoef != 0) {
    MOEWB_ASSIGN_OR_RETURN(saved.zLoss, zLossForwardCuda(context, saved.logits, options.zLossCoef));
  }
  return Status::ok();
}

Status permuteForward(CudaContext& context, const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                      const MoeShapeCuda& shape, MoeSavedCuda& saved) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, dx = expertWidth(options, shape);
  MOEWB_ASSIGN_OR_RETURN(saved.plan,
                         buildDispatchCuda(context, saved.route.topExpert, shape.numExperts));
  if (options.latent()) {
    MOEWB_ASSIGN_OR_RETURN(saved.latentIn,
                           context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(
        linearForwardCuda(context, x.data(), w.latentDown, saved.latentIn.data(), n, d, dx));
  }
  const DeviceTensor<bf16>& source = options.latent() ? saved.latentIn : x;
  MOEWB_ASSIGN_OR_RETURN(saved.xPerm, context.newTensor<bf16>({saved.plan.maxRows(), dx},
                                                              MemoryCategory::kActivations));
  return permuteForwardCuda(context, source, saved.plan, saved.xPerm);
}

DeviceExpertWeights expertWeights(const MoeWeightsCuda& w) { return {*w.gate, *w.up, *w.down}; }

Result<DeviceTensor<bf16>> combineForward(CudaContext& context, const MoeWeightsCuda& w,
                                          const MoeShapeCuda& shape, MoeSavedCuda& saved) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, dx = expertWidth(options, shape);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> combined,
                         context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(
      combineForwardCuda(context, saved.yPerm, saved.route.topWeight, saved.plan, combined));
  if (!options.latent()) return combined;
  saved.latentPre = std::move(combined);
  MOEWB_ASSIGN_OR_RETURN(saved.latentOut,
                         context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.latentRstd,
                         context.newTensor<float>({n}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(rmsNormForwardCuda(context.stream(), saved.latentPre.data(), w.latentNorm,
                                           float(options.latentNormEps), saved.latentOut.data(),
                                           saved.latentRstd.data(), n, dx));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y,
                         context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, saved.latentOut.data(), w.latentUp, y.data(), n,
                                          dx, d));
  return y;
}

}  // namespace

Status checkMoeSupportedCuda(const MoeOptions& options) {
  if (options.capacityFactor > 0) {
    return unimplemented("moe.capacity_factor = " + std::to_string(options.capacityFactor) +
                         ": expert capacity (token dropping) does not run on the CUDA backend "
                         "yet; use 0 (dropless) or run.backend = \"cpu\"");
  }
  if (options.permuteIntoExperts || options.combineIntoExperts) {
    return unimplemented(
        "fusion.permute_into_experts / fusion.combine_into_experts do not run on the CUDA "
        "backend yet; set them to false or use run.backend = \"cpu\"");
  }
  return Status::ok();
}

Result<DeviceTensor<bf16>> moeForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                                          const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                                          const MoeOptions& options, MoeSavedCuda& saved) {
  saved.options = options;
  MOEWB_RETURN_IF_ERROR(routerForward(context, x, w, shape, options, saved));
  MOEWB_RETURN_IF_ERROR(permuteForward(context, x, w, shape, saved));
  MOEWB_ASSIGN_OR_RETURN(saved.yPerm,
                         expertsForwardCuda(context, saved.xPerm, saved.plan.offsets,
                                            expertWeights(w), saved.experts, options.glu()));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y, combineForward(context, w, shape, saved));
  if (options.shared()) {
    MOEWB_RETURN_IF_ERROR(denseFfnForwardCuda(
        context, x.data(), DenseFfnWeightsCuda{w.sharedGate, w.sharedUp, w.sharedDown},
        options.glu(), saved.shared, y.data(), shape.tokens, shape.dModel, options.sharedWidth()));
  }
  return y;
}

Status moeBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                       const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                       const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                       const MoeGradsCuda& grads, DeviceTensor<bf16>& dx) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, e = shape.numExperts;
  const int64_t width = expertWidth(options, shape), rows = saved.plan.maxRows();
  // Combine (and the latent up-projection + norm) backward.
  DeviceTensor<bf16> dLatent;  // [N, Dl]
  if (options.latent()) {
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dOut,
                           context.newTensor<bf16>({n, width}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(
        linearBackwardDataCuda(context, dy.data(), w.latentUp, dOut.data(), n, width, d));
    MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dy.data(), saved.latentOut.data(),
                                                   grads.latentUp, n, width, d));
    MOEWB_ASSIGN_OR_RETURN(dLatent,
                           context.newTensor<bf16>({n, width}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(rmsNormBackwardCuda(context, dOut.data(), saved.latentPre.data(),
                                              w.latentNorm, saved.latentRstd.data(),
                                              dLatent.data(), grads.latentNorm, n, width));
  }
  const DeviceTensor<bf16>& dCombined = options.latent() ? dLatent : dy;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dYPerm,
                         context.newTensor<bf16>({rows, width}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dTopWeight,
                         context.newTensor<float>({n, options.topK}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(combineBackwardCuda(context, dCombined, saved.yPerm, saved.route.topWeight,
                                            saved.plan, dYPerm, dTopWeight));
  // Experts backward.
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<bf16> dXPerm,
      expertsBackwardCuda(context, dYPerm, saved.xPerm, saved.plan.offsets, expertWeights(w),
                          saved.experts, DeviceExpertGrads{*grads.gate, *grads.up, *grads.down},
                          options.glu()));
  // Permute (and the latent down-projection) backward: accumulated into dx.
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dSource,
                         context.newTensor<bf16>({n, width}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(permuteBackwardCuda(context, dXPerm, saved.plan, dSource));
  if (options.latent()) {
    MOEWB_RETURN_IF_ERROR(linearBackwardDataCuda(context, dSource.data(), w.latentDown, dx.data(),
                                                 n, d, width, /*accumulate=*/true));
    MOEWB_RETURN_IF_ERROR(
        linearBackwardWeightCuda(context, dSource.data(), x.data(), grads.latentDown, n, d, width));
  } else {
    MOEWB_RETURN_IF_ERROR(addBf16(context.stream(), dx.data(), dSource.data(), dx.data(), n * d));
  }
  // Router backward: the routing weights' and the losses' gradients through the logits.
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dLogits,
                         context.newTensor<float>({n, e}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), dLogits.data(), 0.0f, n * e));
  MOEWB_RETURN_IF_ERROR(routerTopKBackwardCuda(context, saved.route, dTopWeight, dLogits));
  if (options.auxLossCoef != 0) {
    MOEWB_RETURN_IF_ERROR(auxLossBackwardCuda(context, saved.route, saved.switchAux,
                                              options.auxLossCoef, dLogits));
  }
  if (options.seqAuxLossCoef != 0) {
    MOEWB_RETURN_IF_ERROR(auxLossBackwardCuda(context, saved.route, saved.seqAux,
                                              options.seqAuxLossCoef, dLogits));
  }
  if (options.zLossCoef != 0) {
    MOEWB_RETURN_IF_ERROR(zLossBackwardCuda(context, saved.logits, options.zLossCoef, dLogits));
  }
  // The router's two products run in fp32 (the logit gradients are small and sensitive): dWr +=
  // dLogits^T x and dx += dLogits Wr, with x and Wr widened from their bf16 values.
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> xWide,
                         context.newTensor<float>({n, d}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> routerWide,
                         context.newTensor<float>({e, d}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dxRouter,
                         context.newTensor<float>({n, d}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(castBf16ToFloat(context.stream(), x.data(), xWide.data(), n * d));
  MOEWB_RETURN_IF_ERROR(castBf16ToFloat(context.stream(), w.router, routerWide.data(), e * d));
  MOEWB_RETURN_IF_ERROR(gemm(context, e, d, n, 1.0f,
                             GemmOperand{dLogits.data(), DType::kF32, e, true},
                             GemmOperand{xWide.data(), DType::kF32, d, false}, 1.0f,
                             GemmOutput{grads.router, DType::kF32, d}));
  MOEWB_RETURN_IF_ERROR(gemm(context, n, d, e, 1.0f,
                             GemmOperand{dLogits.data(), DType::kF32, e, false},
                             GemmOperand{routerWide.data(), DType::kF32, d, false}, 0.0f,
                             GemmOutput{dxRouter.data(), DType::kF32, d}));
  MOEWB_RETURN_IF_ERROR(addFloatIntoBf16(context.stream(), dxRouter.data(), dx.data(), n * d));
  if (options.shared()) {
    MOEWB_RETURN_IF_ERROR(denseFfnBackwardCuda(
        context, dy.data(), x.data(), DenseFfnWeightsCuda{w.sharedGate, w.sharedUp, w.sharedDown},
        options.glu(), saved.shared,
        DenseFfnGradsCuda{grads.sharedGate, grads.sharedUp, grads.sharedDown}, dx.data(), n, d,
        options.sharedWidth()));
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
