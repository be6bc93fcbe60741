// MoE FFN stages on the GPU (see cuda_moe.h); the CPU twin is model/moe_ffn.cpp, stage for stage.
#include "model/cuda/cuda_moe.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/gemm.h"
#include "ops/linear/linear_cuda.h"
#include "ops/capacity/capacity.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace moewb::engine::cuda {
namespace {

int64_t expertWidth(const MoeOptions& options, const MoeShapeCuda& shape) {
  return options.latent() ? options.latentDim : shape.dModel;
}

// The matrix the experts read: u = x Wdown^T with a latent projection, else x itself.
const DeviceTensor<bf16>& dispatchSource(const DeviceTensor<bf16>& x, const MoeSavedCuda& saved) {
  return saved.options.latent() ? saved.latentIn : x;
}

const DeviceTensor<bf16>& expertsInput(const DeviceTensor<bf16>& x, const MoeSavedCuda& saved) {
  return saved.options.permuteIntoExperts ? dispatchSource(x, saved) : saved.xPerm;
}

DeviceExpertWeights expertWeights(const MoeWeightsCuda& w) { return {*w.gate, *w.up, *w.down}; }

DeviceExpertsIo expertsIo(const MoeSavedCuda& saved) {
  DeviceExpertsIo io;
  if (saved.options.permuteIntoExperts) io.gatherIndex = &saved.plan.rowToken;
  if (saved.options.combineIntoExperts) {
    io.rowWeight = &saved.rowWeight;
    io.outputIndex = &saved.plan.rowToken;
  }
  return io;
}

}  // namespace

Status moeRouterForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                            const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                            const MoeOptions& options, MoeSavedCuda& saved) {
  const int64_t n = shape.tokens, d = shape.dModel, e = shape.numExperts;
  saved.options = options;
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
  saved.capacity = expertCapacity(n, options.topK, e, options.capacityFactor);
  if (saved.capacity >= 0) {
    MOEWB_ASSIGN_OR_RETURN(saved.mask,
                           capacityMaskCuda(context, saved.route.topExpert, saved.route.topWeight,
                                            e, saved.capacity, options.dropPolicy));
  }
  return Status::ok();
}

Status moePermuteForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                             const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                             MoeSavedCuda& saved) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, dx = expertWidth(options, shape);
  MOEWB_ASSIGN_OR_RETURN(saved.plan,
                         buildDispatchCuda(context, saved.route.topExpert, shape.numExperts,
                                           saved.capacity >= 0 ? &saved.mask.keep : nullptr));
  if (options.latent()) {
    MOEWB_ASSIGN_OR_RETURN(saved.latentIn,
                           context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(
        linearForwardCuda(context, x.data(), w.latentDown, saved.latentIn.data(), n, d, dx));
  }
  if (options.permuteIntoExperts) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(saved.xPerm, context.newTensor<bf16>({saved.plan.maxRows(), dx},
                                                              MemoryCategory::kActivations));
  return permuteForwardCuda(context, dispatchSource(x, saved), saved.plan, saved.xPerm);
}

Status moeExpertsForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                             const MoeWeightsCuda& w, MoeSavedCuda& saved) {
  if (saved.options.combineIntoExperts) {
    MOEWB_ASSIGN_OR_RETURN(saved.rowWeight, context.newTensor<float>(
                                                {saved.plan.maxRows()},
                                                MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(
        slotsToRowsCuda(context, saved.route.topWeight, saved.plan, saved.rowWeight));
  }
  MOEWB_ASSIGN_OR_RETURN(saved.yPerm,
                         expertsForwardCuda(context, expertsInput(x, saved), saved.plan.offsets,
                                            expertWeights(w), saved.experts, saved.options.glu(),
                                            expertsIo(saved)));
  return Status::ok();
}

Result<DeviceTensor<bf16>> moeCombineForwardCuda(CudaContext& context,
                                                 const DeviceTensor<bf16>& x,
                                                 const MoeWeightsCuda& w,
                                                 const MoeShapeCuda& shape, MoeSavedCuda& saved) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, dx = expertWidth(options, shape);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> combined,
                         context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
  if (options.combineIntoExperts) {
    MOEWB_RETURN_IF_ERROR(combineSumForwardCuda(context, saved.yPerm, saved.plan, combined));
    saved.yPerm = DeviceTensor<bf16>();  // the backward never reads the expert outputs
  } else {
    MOEWB_RETURN_IF_ERROR(
        combineForwardCuda(context, saved.yPerm, saved.route.topWeight, saved.plan, combined));
  }
  DeviceTensor<bf16> y;
  if (options.latent()) {
    saved.latentPre = std::move(combined);
    MOEWB_ASSIGN_OR_RETURN(saved.latentOut,
                           context.newTensor<bf16>({n, dx}, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_RETURN(saved.latentRstd,
                           context.newTensor<float>({n}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(rmsNormForwardCuda(context.stream(), saved.latentPre.data(),
                                             w.latentNorm, float(options.latentNormEps),
                                             saved.latentOut.data(), saved.latentRstd.data(), n, dx));
    MOEWB_ASSIGN_OR_RETURN(y, context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(
        linearForwardCuda(context, saved.latentOut.data(), w.latentUp, y.data(), n, dx, d));
  } else {
    y = std::move(combined);
  }
  if (options.shared()) {
    MOEWB_RETURN_IF_ERROR(denseFfnForwardCuda(
        context, x.data(), DenseFfnWeightsCuda{w.sharedGate, w.sharedUp, w.sharedDown},
        options.glu(), saved.shared, y.data(), n, d, options.sharedWidth()));
  }
  return y;
}

Status moeCombineBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                              const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                              const MoeSavedCuda& saved, const MoeGradsCuda& grads,
                              MoeBackwardStateCuda& state) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, width = expertWidth(options, shape);
  DeviceTensor<bf16> dLatent;  // [N, Dl] gradient of the combined latent output
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
  if (options.combineIntoExperts) {  // the experts read the token gradient and form dTopWeight
    if (options.latent()) {
      state.dYPerm = std::move(dLatent);
    } else {
      MOEWB_ASSIGN_OR_RETURN(state.dYPerm,
                             context.newTensor<bf16>({n, width}, MemoryCategory::kActivations));
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state.dYPerm.data(), dy.data(),
                                                 size_t(dy.bytes()), cudaMemcpyDeviceToDevice,
                                                 context.stream()));
    }
    return Status::ok();
  }
  MOEWB_ASSIGN_OR_RETURN(state.dYPerm, context.newTensor<bf16>({saved.plan.maxRows(), width},
                                                               MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(state.dTopWeight,
                         context.newTensor<float>({n, options.topK}, MemoryCategory::kActivations));
  return combineBackwardCuda(context, options.latent() ? dLatent : dy, saved.yPerm,
                             saved.route.topWeight, saved.plan, state.dYPerm, state.dTopWeight);
}

Status moeExpertsRecomputeCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                               const MoeWeightsCuda& w, MoeSavedCuda& saved) {
  return expertsRecomputeCuda(context, expertsInput(x, saved), saved.plan.offsets,
                              expertWeights(w), saved.experts, saved.options.glu(),
                              expertsIo(saved));
}

Status moeExpertsBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                              const MoeWeightsCuda& w, const MoeSavedCuda& saved,
                              const MoeGradsCuda& grads, MoeBackwardStateCuda& state) {
  const bool fusedCombine = saved.options.combineIntoExperts;
  DeviceTensor<float> dRowWeight;  // [N k] (fused combine)
  if (fusedCombine) {
    MOEWB_ASSIGN_OR_RETURN(dRowWeight, context.newTensor<float>({saved.plan.maxRows()},
                                                                MemoryCategory::kActivations));
  }
  MOEWB_ASSIGN_OR_RETURN(
      state.dXPerm,
      expertsBackwardCuda(context, state.dYPerm, expertsInput(x, saved), saved.plan.offsets,
                          expertWeights(w), saved.experts,
                          DeviceExpertGrads{*grads.gate, *grads.up, *grads.down},
                          saved.options.glu(), expertsIo(saved),
                          fusedCombine ? &dRowWeight : nullptr));
  if (!fusedCombine) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(state.dTopWeight, context.newTensor<float>(
                                               {saved.plan.numTokens, saved.options.topK},
                                               MemoryCategory::kActivations));
  return rowsToSlotsCuda(context, dRowWeight, saved.plan, state.dTopWeight);
}

Status moePermuteBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                              const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                              const MoeSavedCuda& saved, const MoeGradsCuda& grads,
                              const MoeBackwardStateCuda& state, DeviceTensor<bf16>& dx) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel;
  const int64_t width = expertWidth(options, shape);
  // Permute (and the latent down-projection) backward: accumulated into dx.
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dSource,
                         context.newTensor<bf16>({n, width}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(permuteBackwardCuda(context, state.dXPerm, saved.plan, dSource));
  if (options.latent()) {
    MOEWB_RETURN_IF_ERROR(linearBackwardDataCuda(context, dSource.data(), w.latentDown, dx.data(),
                                                 n, d, width, /*accumulate=*/true));
    return linearBackwardWeightCuda(context, dSource.data(), x.data(), grads.latentDown, n, d,
                                    width);
  }
  return addBf16(context.stream(), dx.data(), dSource.data(), dx.data(), n * d);
}

Status moeRouterBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                             const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                             const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                             const MoeGradsCuda& grads, const MoeBackwardStateCuda& state,
                             DeviceTensor<bf16>& dx) {
  const MoeOptions& options = saved.options;
  const int64_t n = shape.tokens, d = shape.dModel, e = shape.numExperts;
  // The routing weights' and the losses' gradients through the logits.
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dLogits,
                         context.newTensor<float>({n, e}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), dLogits.data(), 0.0f, n * e));
  MOEWB_RETURN_IF_ERROR(routerTopKBackwardCuda(context, saved.route, state.dTopWeight, dLogits));
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
  if (!options.shared()) return Status::ok();
  return denseFfnBackwardCuda(context, dy.data(), x.data(),
                              DenseFfnWeightsCuda{w.sharedGate, w.sharedUp, w.sharedDown},
                              options.glu(), saved.shared,
                              DenseFfnGradsCuda{grads.sharedGate, grads.sharedUp, grads.sharedDown},
                              dx.data(), n, d, options.sharedWidth());
}

Result<DeviceTensor<bf16>> moeForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                                          const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                                          const MoeOptions& options, MoeSavedCuda& saved) {
  MOEWB_RETURN_IF_ERROR(moeRouterForwardCuda(context, x, w, shape, options, saved));
  MOEWB_RETURN_IF_ERROR(moePermuteForwardCuda(context, x, w, shape, saved));
  MOEWB_RETURN_IF_ERROR(moeExpertsForwardCuda(context, x, w, saved));
  return moeCombineForwardCuda(context, x, w, shape, saved);
}

Status moeBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                       const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                       const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                       const MoeGradsCuda& grads, DeviceTensor<bf16>& dx) {
  MoeBackwardStateCuda state;
  MOEWB_RETURN_IF_ERROR(moeCombineBackwardCuda(context, dy, w, shape, saved, grads, state));
  MOEWB_RETURN_IF_ERROR(moeExpertsBackwardCuda(context, x, w, saved, grads, state));
  MOEWB_RETURN_IF_ERROR(moePermuteBackwardCuda(context, x, w, shape, saved, grads, state, dx));
  return moeRouterBackwardCuda(context, dy, x, w, shape, saved, grads, state, dx);
}

}  // namespace moewb::engine::cuda
