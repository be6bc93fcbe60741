// Chunk Loss on the GPU, host side: the token-chunk loop over cuBLAS GEMMs and the strip kernels
// shared with CCE (see chunk_loss_cuda.h).
#include "ops/chunk_loss/chunk_loss_cuda.h"

#include <algorithm>
#include <cmath>

#include "runtime/cuda/gemm.h"
#include "moewb/base/check.h"
#include "ops/cce/cce_cuda_kernels.h"
#include "ops/chunk_loss/chunk_loss.h"

namespace moewb::engine::cuda {

Status chunkLossForwardCuda(CudaContext& context, const bf16* h, const bf16* wv,
                            const int32_t* targets, int64_t n, int64_t d, int64_t vocab,
                            const ChunkLossCudaOptions& options, ChunkLossSavedCuda& saved,
                            float* loss, float* zLoss) {
  MOEWB_CHECK(options.chunkTokens >= 0 && n >= 0 && d >= 0 && vocab > 0);
  cudaStream_t stream = context.stream();
  const MemoryCategory kept = MemoryCategory::kActivations;
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(saved.dh, context.newTensor<bf16>({n, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.dWv, context.newTensor<float>({vocab, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.lse, context.newTensor<float>({n}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.validCount, context.newTensor<int32_t>({1}, kept));
  const int64_t chunk =
      std::max<int64_t>(1, options.chunkTokens > 0 ? std::min(options.chunkTokens, n)
                                                   : chunkLossAutoTokens(n, vocab, d));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> runMax, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> runSum, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> targetLogit, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<float> logits,
      context.newTensor<float>({std::min(chunk, std::max<int64_t>(n, 1)), vocab}, scratch));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<bf16> grad,
      context.newTensor<bf16>({std::min(chunk, std::max<int64_t>(n, 1)), vocab}, scratch));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, runMax.data(), -INFINITY, n));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, runSum.data(), 0.0f, n));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, targetLogit.data(), 0.0f, n));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, saved.dWv.data(), 0.0f, vocab * d));
  MOEWB_RETURN_IF_ERROR(linearLossCountValid(stream, targets, n, vocab, options.loss.ignoreIndex,
                                             saved.validCount.data()));
  const float cap = float(options.loss.softCap);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t rows = std::min(chunk, n - c0);
    // z_c[rows, V] = h_c Wv^T (fp32).
    MOEWB_RETURN_IF_ERROR(gemm(context, rows, vocab, d, 1.0f,
                               GemmOperand{h + c0 * d, DType::kBf16, d, false},
                               GemmOperand{wv, DType::kBf16, d, true}, 0.0f,
                               GemmOutput{logits.data(), DType::kF32, vocab}));
    MOEWB_RETURN_IF_ERROR(linearLossFoldStrip(stream, logits.data(), rows, vocab, c0, 0, targets,
                                              cap, runMax.data(), runSum.data(),
                                              targetLogit.data()));
    MOEWB_RETURN_IF_ERROR(
        linearLossLseRows(stream, runMax.data(), runSum.data(), c0, rows, saved.lse.data()));
    MOEWB_RETURN_IF_ERROR(linearLossGradStrip(stream, logits.data(), rows, vocab, c0, 0, targets,
                                              vocab, options.loss, saved.lse.data(),
                                              saved.validCount.data(), 1.0f, grad.data()));
    // dh_c[rows, D] = dz_c Wv;  dWv += dz_c^T h_c.
    MOEWB_RETURN_IF_ERROR(gemm(context, rows, d, vocab, 1.0f,
                               GemmOperand{grad.data(), DType::kBf16, vocab, false},
                               GemmOperand{wv, DType::kBf16, d, false}, 0.0f,
                               GemmOutput{saved.dh.data() + c0 * d, DType::kBf16, d}));
    MOEWB_RETURN_IF_ERROR(gemm(context, vocab, d, rows, 1.0f,
                               GemmOperand{grad.data(), DType::kBf16, vocab, true},
                               GemmOperand{h + c0 * d, DType::kBf16, d, false}, 1.0f,
                               GemmOutput{saved.dWv.data(), DType::kF32, d}));
  }
  return linearLossFinish(stream, runMax.data(), runSum.data(), targetLogit.data(), targets, n,
                          vocab, options.loss, saved.lse.data(), loss, zLoss,
                          saved.validCount.data());
}

Status chunkLossBackwardCuda(CudaContext& context, ChunkLossSavedCuda& saved, float dLoss, bf16* dh,
                             float* dWv) {
  cudaStream_t stream = context.stream();
  MOEWB_RETURN_IF_ERROR(linearLossScaleBf16(stream, saved.dh.data(), dLoss, dh, saved.dh.numel()));
  MOEWB_RETURN_IF_ERROR(accumulateFloat(stream, saved.dWv.data(), dLoss, dWv, saved.dWv.numel()));
  saved = ChunkLossSavedCuda();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
