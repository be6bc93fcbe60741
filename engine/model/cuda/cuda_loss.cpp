// LM loss heads on the GPU (see cuda_loss.h). Dense: fp32 logits through one GEMM, then the fused
// softmax cross-entropy; the backward writes bf16 logit gradients and runs the two GEMMs.
#include "model/cuda/cuda_loss.h"

#include <algorithm>

#include "runtime/cuda/gemm.h"
#include "model/batch.h"
#include "model/cpu/lm_loss.h"
#include "ops/cce/cce.h"
#include "ops/cce/cce_cuda.h"
#include "ops/chunk_loss/chunk_loss_cuda.h"
#include "ops/cross_entropy/cross_entropy_cuda.h"
#include "ops/linear/linear_cuda.h"

namespace moewb::engine::cuda {

struct LossSavedCuda {
  CceSavedCuda cce;                  // loss.kind = "cce"
  ChunkLossSavedCuda chunk;          // loss.kind = "chunk"
  DeviceTensor<float> logits;        // [N, V] fp32 (dense only, as the three below)
  DeviceTensor<float> lse;           // [N]
  DeviceTensor<float> tokenLoss;     // [N]
  DeviceTensor<int32_t> validCount;  // [1]
};

LossStateCuda::LossStateCuda() = default;
LossStateCuda::~LossStateCuda() = default;
LossStateCuda::LossStateCuda(LossStateCuda&&) noexcept = default;
LossStateCuda& LossStateCuda::operator=(LossStateCuda&&) noexcept = default;

namespace {

// Vocabulary columns of a filtered backward's strips at least (the cuBLAS logit GEMM of a narrow
// strip runs far below its rate; the filter tiles stay the CPU reference's blocks).
constexpr int64_t kFilteredStripCols = 4096;

// The CPU loss head's options (model/cpu/lm_loss.h), so both backends filter and chunk alike:
// with filtering, tiles of the CPU's token block x vocabulary block in strips of whole tiles at
// least kFilteredStripCols wide.
CceCudaOptions cceOptions(const ModelDims& dims) {
  const CceOptions cpu = cceOptionsOf(dims);
  CceCudaOptions options;
  options.vocabBlock = cpu.vocabBlock;
  options.filterEps = cpu.filterEps;
  options.filterTokenBlock = cpu.tokenBlock;
  options.filterWeightGrad = cpu.filterWeightGrad;
  options.loss = cpu.loss;
  if (cpu.filterEps != 0) {
    options.filterVocabBlock = cpu.vocabBlock;
    options.vocabBlock =
        std::max<int64_t>(1, kFilteredStripCols / cpu.vocabBlock) * cpu.vocabBlock;
  }
  return options;
}

ChunkLossCudaOptions chunkOptions(const ModelDims& dims) {
  const ChunkLossOptions cpu = chunkLossOptionsOf(dims);
  ChunkLossCudaOptions options;
  options.chunkTokens = cpu.chunkTokens;
  options.loss = cpu.loss;
  return options;
}

}  // namespace

Status lossForwardCuda(CudaContext& context, const ModelDims& dims, const DeviceTensor<bf16>& h,
                       const bf16* lmHead, const DeviceTensor<int32_t>& targets,
                       LossStateCuda& state) {
  const int64_t n = h.dim(0), d = h.dim(1), v = dims.vocabSize;
  state.saved = std::make_unique<LossSavedCuda>();
  LossSavedCuda& s = *state.saved;
  MOEWB_ASSIGN_OR_RETURN(state.loss, context.newTensor<float>({1}, MemoryCategory::kActivations));
  if (dims.loss.kind == "cce") {
    return cceForwardCuda(context, h.data(), lmHead, targets.data(), n, d, v, cceOptions(dims),
                          s.cce, state.loss.data(), nullptr);
  }
  if (dims.loss.kind == "chunk") {
    return chunkLossForwardCuda(context, h.data(), lmHead, targets.data(), n, d, v,
                                chunkOptions(dims), s.chunk, state.loss.data(), nullptr);
  }
  // Dense only: the [N, V] fp32 logits and the per-token buffers (cce and chunk never hold
  // the logits of all tokens: that is what they are for).
  MOEWB_ASSIGN_OR_RETURN(s.logits, context.newTensor<float>({n, v}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(s.lse, context.newTensor<float>({n}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(s.tokenLoss, context.newTensor<float>({n}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(s.validCount,
                         context.newTensor<int32_t>({1}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(gemm(context, n, v, d, 1.0f, GemmOperand{h.data(), DType::kBf16, d, false},
                             GemmOperand{lmHead, DType::kBf16, d, true}, 0.0f,
                             GemmOutput{s.logits.data(), DType::kF32, v}));
  return crossEntropyForwardCuda(context.stream(), s.logits.data(), targets.data(), n, v,
                                 s.lse.data(), s.tokenLoss.data(), state.loss.data(),
                                 s.validCount.data());
}

Result<DeviceTensor<bf16>> lossBackwardCuda(CudaContext& context, const ModelDims& dims,
                                            const DeviceTensor<bf16>& h, const bf16* lmHead,
                                            const DeviceTensor<int32_t>& targets,
                                            LossStateCuda& state, float dLoss,
                                            float* lmHeadGrad) {
  const int64_t n = h.dim(0), d = h.dim(1), v = dims.vocabSize;
  LossSavedCuda& s = *state.saved;
  if (dims.loss.kind != "dense") {
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dh,
                           context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    if (dims.loss.kind == "cce") {
      MOEWB_RETURN_IF_ERROR(cceBackwardCuda(context, h.data(), lmHead, targets.data(), n, d, v,
                                            cceOptions(dims), s.cce, dLoss, dh.data(), lmHeadGrad));
    } else {
      MOEWB_RETURN_IF_ERROR(chunkLossBackwardCuda(context, s.chunk, dLoss, dh.data(), lmHeadGrad));
    }
    return dh;
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dLogits,
                         context.newTensor<bf16>({n, v}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(crossEntropyBackwardCuda(context.stream(), s.logits.data(), targets.data(),
                                                 s.lse.data(), s.validCount.data(), dLoss, n, v,
                                                 dLogits.data()));
  s.logits = DeviceTensor<float>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dh,
                         context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardDataCuda(context, dLogits.data(), lmHead, dh.data(), n, d, v));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardWeightCuda(context, dLogits.data(), h.data(), lmHeadGrad, n, d, v));
  return dh;
}

}  // namespace moewb::engine::cuda
