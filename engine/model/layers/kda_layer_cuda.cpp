// The KDA mixer layer on the GPU (kda_cuda.h), step for step as kda_layer.cpp: projections
// through cuda/gemm.h (bf16 operands, fp32 accumulation; weight gradients accumulated into their
// fp32 buffers by the GEMM with beta = 1; dx accumulated in an fp32 workspace and rounded once),
// the convs, L2 norms and gate of kda_gate_cuda.cu, the chunked core of kda_chunk_cuda.cpp and the
// gated output norm of kda_layer_cuda.cu.
#include <cmath>
#include <string>

#include "runtime/cuda/gemm.h"
#include "model/layers/kda_layer_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

// y[rows, out] = x[rows, in] W[out, in]^T (bf16 or fp32 y).
Status project(CudaContext& context, int64_t rows, int64_t in, int64_t out, const bf16* x,
               const bf16* w, void* y, DType yType) {
  return gemm(context, rows, out, in, 1.f, GemmOperand{x, DType::kBf16, in, false},
              GemmOperand{w, DType::kBf16, in, true}, 0.f, GemmOutput{y, yType, out});
}

// dx[rows, in] (fp32, += when accumulate) = dy[rows, out] W[out, in]; dW[out, in] += dy^T x.
Status projectBackward(CudaContext& context, int64_t rows, int64_t in, int64_t out, const bf16* dy,
                       const bf16* x, const bf16* w, float* dx, bool accumulate, float* dw) {
  MOEWB_RETURN_IF_ERROR(gemm(context, rows, in, out, 1.f, GemmOperand{dy, DType::kBf16, out, false},
                             GemmOperand{w, DType::kBf16, in, false}, accumulate ? 1.f : 0.f,
                             GemmOutput{dx, DType::kF32, in}));
  return gemm(context, out, in, rows, 1.f, GemmOperand{dy, DType::kBf16, out, true},
              GemmOperand{x, DType::kBf16, in, false}, 1.f, GemmOutput{dw, DType::kF32, in});
}

// Backward of `project` whose dx is a bf16 activation gradient (not accumulated).
Status projectBackwardBf16(CudaContext& context, int64_t rows, int64_t in, int64_t out,
                          const bf16* dy, const bf16* x, const bf16* w, bf16* dx, float* dw) {
  MOEWB_RETURN_IF_ERROR(gemm(context, rows, in, out, 1.f, GemmOperand{dy, DType::kBf16, out, false},
                             GemmOperand{w, DType::kBf16, in, false}, 0.f,
                             GemmOutput{dx, DType::kBf16, in}));
  return gemm(context, out, in, rows, 1.f, GemmOperand{dy, DType::kBf16, out, true},
              GemmOperand{x, DType::kBf16, in, false}, 1.f, GemmOutput{dw, DType::kF32, in});
}

Status checkLayerDims(const KdaDims& dims) {
  if (dims.batch < 1 || dims.seqLen < 1 || dims.dModel < 1 || dims.numHeads < 1 ||
      dims.headDim < 1 || dims.headDim > kKdaCudaMaxHeadDim || dims.chunk < 1 ||
      dims.chunk > kKdaCudaMaxChunk || dims.convKernel < 1 ||
      dims.convKernel > kKdaMaxConvWidth) {
    return invalidArgument("kdaLayer*Cuda: unsupported dims (headDim " +
                           std::to_string(dims.headDim) + ", chunk " + std::to_string(dims.chunk) +
                           ", convKernel " + std::to_string(dims.convKernel) +
                           "); need headDim <= 128, chunk <= 64, convKernel <= 8");
  }
  return Status::ok();
}

}  // namespace

Status kdaLayerForwardCuda(CudaContext& context, const KdaDims& dims, const bf16* x,
                           const KdaWeightsCuda& weights, bf16* y, KdaSavedCuda& saved,
                           bool keepIntermediates) {
  MOEWB_RETURN_IF_ERROR(checkLayerDims(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, p = dims.innerDim(), r = dims.rank();
  const int64_t h = dims.numHeads, kd = dims.headDim, w = dims.convKernel;
  const cudaStream_t stream = context.stream();
  const MemoryCategory act = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(saved.qProj, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.kProj, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.vProj, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.qConv, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.kConv, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.vConv, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.qAct, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.kAct, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.qRinv, context.newTensor<float>({n, h}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.kRinv, context.newTensor<float>({n, h}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.q, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.k, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.v, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.fLow, context.newTensor<bf16>({n, r}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.f, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.g, context.newTensor<float>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.beta, context.newTensor<float>({n, h}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.o, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.oRstd, context.newTensor<float>({n, h}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.gLow, context.newTensor<bf16>({n, r}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.gate, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.ctx, context.newTensor<bf16>({n, p}, act));

  MOEWB_RETURN_IF_ERROR(project(context, n, d, p, x, weights.wq, saved.qProj.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(project(context, n, d, p, x, weights.wk, saved.kProj.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(project(context, n, d, p, x, weights.wv, saved.vProj.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(kdaShortConvForwardCuda(stream, dims.batch, dims.seqLen, p, w,
                                                saved.qProj.data(), weights.convQ,
                                                saved.qAct.data(), saved.qConv.data()));
  MOEWB_RETURN_IF_ERROR(kdaShortConvForwardCuda(stream, dims.batch, dims.seqLen, p, w,
                                                saved.kProj.data(), weights.convK,
                                                saved.kAct.data(), saved.kConv.data()));
  MOEWB_RETURN_IF_ERROR(kdaShortConvForwardCuda(stream, dims.batch, dims.seqLen, p, w,
                                                saved.vProj.data(), weights.convV, saved.v.data(),
                                                saved.vConv.data()));
  MOEWB_RETURN_IF_ERROR(kdaL2NormForwardCuda(stream, n, h, kd, 1.0 / std::sqrt(double(kd)),
                                             dims.l2Eps, saved.qAct.data(), saved.q.data(),
                                             saved.qRinv.data()));
  MOEWB_RETURN_IF_ERROR(kdaL2NormForwardCuda(stream, n, h, kd, 1.0, dims.l2Eps, saved.kAct.data(),
                                             saved.k.data(), saved.kRinv.data()));
  MOEWB_RETURN_IF_ERROR(project(context, n, d, r, x, weights.wf1, saved.fLow.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(
      project(context, n, r, p, saved.fLow.data(), weights.wf2, saved.f.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(kdaGateForwardCuda(stream, dims.gateParams(), n, saved.f.data(),
                                           weights.aLog, weights.dtBias, saved.g.data()));
  MOEWB_RETURN_IF_ERROR(project(context, n, d, h, x, weights.wb, saved.beta.data(), DType::kF32));
  MOEWB_RETURN_IF_ERROR(launchKdaSigmoid(stream, saved.beta.data(), n * h));
  MOEWB_RETURN_IF_ERROR(kdaChunkForwardCuda(context, dims.coreDims(), saved.q.data(),
                                            saved.k.data(), saved.v.data(), saved.g.data(),
                                            saved.beta.data(), nullptr, saved.o.data(), nullptr,
                                            saved.core, keepIntermediates));
  MOEWB_RETURN_IF_ERROR(project(context, n, d, r, x, weights.wg1, saved.gLow.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(
      project(context, n, r, p, saved.gLow.data(), weights.wg2, saved.gate.data(), DType::kBf16));
  MOEWB_RETURN_IF_ERROR(launchKdaGatedNormForward(
      stream, n, h, kd, float(dims.normEps), saved.o.data(), saved.gate.data(), weights.bg,
      weights.normWeight, saved.ctx.data(), saved.oRstd.data()));
  return project(context, n, p, d, saved.ctx.data(), weights.wo, y, DType::kBf16);
}

Status kdaLayerBackwardCuda(CudaContext& context, const KdaDims& dims, const bf16* dy,
                            const bf16* x, const KdaWeightsCuda& weights,
                            const KdaSavedCuda& saved, const KdaGradsCuda& grads, bf16* dx) {
  MOEWB_RETURN_IF_ERROR(checkLayerDims(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, p = dims.innerDim(), r = dims.rank();
  const int64_t h = dims.numHeads, kd = dims.headDim, w = dims.convKernel;
  const cudaStream_t stream = context.stream();
  const MemoryCategory act = MemoryCategory::kActivations, ws = MemoryCategory::kWorkspace;

  // Output gate and norm.
  MOEWB_ASSIGN_OR_RETURN(auto dCtx, context.newTensor<bf16>({n, p}, act));
  MOEWB_RETURN_IF_ERROR(projectBackwardBf16(context, n, p, d, dy, saved.ctx.data(), weights.wo,
                                            dCtx.data(), grads.wo));
  MOEWB_ASSIGN_OR_RETURN(auto dO, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dGate, context.newTensor<bf16>({n, p}, act));
  {
    MOEWB_ASSIGN_OR_RETURN(auto dGateF, context.newTensor<float>({n, p}, ws));
    MOEWB_ASSIGN_OR_RETURN(auto wTerms, context.newTensor<float>({n, p}, ws));
    MOEWB_ASSIGN_OR_RETURN(auto part, context.newTensor<float>({kdaSplits(n), p}, ws));
    MOEWB_RETURN_IF_ERROR(launchKdaGatedNormBackward(
        stream, n, h, kd, dCtx.data(), saved.o.data(), saved.gate.data(), weights.bg,
        weights.normWeight, saved.oRstd.data(), dO.data(), dGate.data(), dGateF.data(),
        wTerms.data()));
    MOEWB_RETURN_IF_ERROR(
        launchKdaColumnSums(stream, wTerms.data(), n, p, kd, part.data(), grads.normWeight));
    MOEWB_RETURN_IF_ERROR(
        launchKdaColumnSums(stream, dGateF.data(), n, p, p, part.data(), grads.bg));
  }
  MOEWB_ASSIGN_OR_RETURN(auto dxAcc, context.newTensor<float>({n, d}, ws));  // [N, D]
  MOEWB_ASSIGN_OR_RETURN(auto dLow, context.newTensor<bf16>({n, r}, act));   // dGLow, then dFLow
  MOEWB_RETURN_IF_ERROR(projectBackwardBf16(context, n, r, p, dGate.data(), saved.gLow.data(),
                                            weights.wg2, dLow.data(), grads.wg2));
  MOEWB_RETURN_IF_ERROR(projectBackward(context, n, d, r, dLow.data(), x, weights.wg1,
                                        dxAcc.data(), false, grads.wg1));

  // Core.
  MOEWB_ASSIGN_OR_RETURN(auto dq, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dk, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dv, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dg, context.newTensor<float>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dbeta, context.newTensor<float>({n, h}, act));
  const KdaCoreGradsCuda core{dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), nullptr};
  MOEWB_RETURN_IF_ERROR(kdaChunkBackwardCuda(context, dims.coreDims(), dO.data(), nullptr,
                                             saved.q.data(), saved.k.data(), saved.v.data(),
                                             saved.g.data(), saved.beta.data(), nullptr,
                                             saved.core, core));
  MOEWB_ASSIGN_OR_RETURN(auto dBetaRaw, context.newTensor<bf16>({n, h}, act));
  MOEWB_RETURN_IF_ERROR(
      launchKdaBetaBackward(stream, dbeta.data(), saved.beta.data(), dBetaRaw.data(), n * h));
  MOEWB_RETURN_IF_ERROR(projectBackward(context, n, d, h, dBetaRaw.data(), x, weights.wb,
                                        dxAcc.data(), true, grads.wb));

  // Decay gate and its low-rank projection.
  MOEWB_ASSIGN_OR_RETURN(auto df, context.newTensor<bf16>({n, p}, act));
  MOEWB_RETURN_IF_ERROR(kdaGateBackwardCuda(context, dims.gateParams(), n, dg.data(),
                                            saved.f.data(), saved.g.data(), weights.aLog,
                                            weights.dtBias, df.data(), grads.aLog, grads.dtBias));
  MOEWB_RETURN_IF_ERROR(projectBackwardBf16(context, n, r, p, df.data(), saved.fLow.data(),
                                            weights.wf2, dLow.data(), grads.wf2));
  MOEWB_RETURN_IF_ERROR(projectBackward(context, n, d, r, dLow.data(), x, weights.wf1,
                                        dxAcc.data(), true, grads.wf1));

  // L2 norms, convs and the q / k / v projections (dq, dk reused for the pre-norm gradients).
  MOEWB_ASSIGN_OR_RETURN(auto dAct, context.newTensor<bf16>({n, p}, act));
  MOEWB_ASSIGN_OR_RETURN(auto dProj, context.newTensor<bf16>({n, p}, act));
  const bf16* projIn[3] = {saved.qProj.data(), saved.kProj.data(), saved.vProj.data()};
  const bf16* convPre[3] = {saved.qConv.data(), saved.kConv.data(), saved.vConv.data()};
  const bf16* convW[3] = {weights.convQ, weights.convK, weights.convV};
  float* convGrad[3] = {grads.convQ, grads.convK, grads.convV};
  const bf16* projW[3] = {weights.wq, weights.wk, weights.wv};
  float* projGrad[3] = {grads.wq, grads.wk, grads.wv};
  for (int which = 0; which < 3; ++which) {
    const bf16* dConvOut = dv.data();
    if (which < 2) {
      const bool isQ = which == 0;
      MOEWB_RETURN_IF_ERROR(kdaL2NormBackwardCuda(
          stream, n, h, kd, isQ ? 1.0 / std::sqrt(double(kd)) : 1.0, isQ ? dq.data() : dk.data(),
          isQ ? saved.qAct.data() : saved.kAct.data(),
          isQ ? saved.qRinv.data() : saved.kRinv.data(), dAct.data()));
      dConvOut = dAct.data();
    }
    MOEWB_RETURN_IF_ERROR(kdaShortConvBackwardCuda(context, dims.batch, dims.seqLen, p, w,
                                                   dConvOut, projIn[which], convW[which],
                                                   convPre[which], dProj.data(),
                                                   convGrad[which]));
    MOEWB_RETURN_IF_ERROR(projectBackward(context, n, d, p, dProj.data(), x, projW[which],
                                          dxAcc.data(), true, projGrad[which]));
  }
  return castFloatToBf16(stream, dxAcc.data(), dx, n * d);
}

}  // namespace moewb::engine::cuda
