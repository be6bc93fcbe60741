// Host side of the KDA gate / short conv on the GPU (kda_cuda.h): argument checks and the
// partial-sum workspaces of the token reductions; the kernels are in kda_gate_cuda.cu.
#include <string>

#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {

Status kdaGateForwardCuda(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                          const bf16* f, const bf16* aLog, const bf16* dtBias, float* g) {
  if (params.kind == KdaGateKind::kLowerBound && !(params.lowerBound < 0)) {
    return invalidArgument("kdaGateForwardCuda: lowerBound must be < 0");
  }
  return launchKdaGateForward(stream, params, n, f, aLog, dtBias, g);
}

Status kdaGateBackwardCuda(CudaContext& context, const KdaGateParams& params, int64_t n,
                           const float* dg, const bf16* f, const float* g, const bf16* aLog,
                           const bf16* dtBias, bf16* df, float* dALog, float* dDtBias) {
  if (params.kind == KdaGateKind::kLowerBound && !(params.lowerBound < 0)) {
    return invalidArgument("kdaGateBackwardCuda: lowerBound must be < 0");
  }
  const int64_t width = params.numHeads * params.headDim;
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(auto partDf, context.newTensor<float>({kdaSplits(n), width}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto partDA, context.newTensor<float>({kdaSplits(n), width}, ws));
  return launchKdaGateBackward(context.stream(), params, n, dg, f, g, aLog, dtBias, df, dALog,
                               dDtBias, partDf.data(), partDA.data());
}

Status kdaShortConvForwardCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t channels,
                               int64_t width, const bf16* x, const bf16* w, bf16* y,
                               bf16* preActivation) {
  if (width < 1 || width > kKdaMaxConvWidth) {
    return invalidArgument("kdaShortConvForwardCuda: width " + std::to_string(width) +
                           " outside [1, " + std::to_string(kKdaMaxConvWidth) + "]");
  }
  return launchKdaShortConvForward(stream, batch, seqLen, channels, width, x, w, y,
                                   preActivation);
}

Status kdaShortConvBackwardCuda(CudaContext& context, int64_t batch, int64_t seqLen,
                                int64_t channels, int64_t width, const bf16* dy, const bf16* x,
                                const bf16* w, const bf16* preActivation, bf16* dx, float* dw) {
  if (width < 1 || width > kKdaMaxConvWidth) {
    return invalidArgument("kdaShortConvBackwardCuda: width " + std::to_string(width) +
                           " outside [1, " + std::to_string(kKdaMaxConvWidth) + "]");
  }
  MOEWB_ASSIGN_OR_RETURN(auto part, context.newTensor<float>({kdaSplits(batch * seqLen),
                                                              channels * width},
                                                             MemoryCategory::kWorkspace));
  return launchKdaShortConvBackward(context.stream(), batch, seqLen, channels, width, dy, x, w,
                                    preActivation, dx, dw, part.data());
}

}  // namespace moewb::engine::cuda
