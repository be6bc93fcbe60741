// CCE on the GPU, host side: the strip loops over cuBLAS GEMMs and the kernels of cce_cuda.cu
// (see cce_cuda.h).
#include "ops/cce/cce_cuda.h"

#include <algorithm>
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gemm.h"
#include "moewb/base/check.h"
#include "ops/cce/cce.h"
#include "ops/cce/cce_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

// z[rows, cols] (fp32, ld cols) = h[rowBegin.., d] wv[colBegin.., d]^T.
Status logitStrip(CudaContext& context, const bf16* h, const bf16* wv, int64_t d, int64_t rowBegin,
                  int64_t rows, int64_t colBegin, int64_t cols, float* z) {
  return gemm(context, rows, cols, d, 1.0f, GemmOperand{h + rowBegin * d, DType::kBf16, d, false},
              GemmOperand{wv + colBegin * d, DType::kBf16, d, true}, 0.0f,
              GemmOutput{z, DType::kF32, cols});
}

}  // namespace

Status cceForwardCuda(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                      int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                      CceSavedCuda& saved, float* loss, float* zLoss) {
  MOEWB_CHECK(options.groupTokens > 0 && options.vocabBlock > 0 && n >= 0 && vocab > 0);
  cudaStream_t stream = context.stream();
  MOEWB_ASSIGN_OR_RETURN(saved.lse, context.newTensor<float>({n}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.validCount,
                         context.newTensor<int32_t>({1}, MemoryCategory::kActivations));
  const int64_t group = std::max<int64_t>(1, std::min(options.groupTokens, n));
  const int64_t block = std::min(options.vocabBlock, vocab);
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> runMax, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> runSum, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> targetLogit, context.newTensor<float>({n}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> strip,
                         context.newTensor<float>({group, block}, scratch));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, runMax.data(), -INFINITY, n));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, runSum.data(), 0.0f, n));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, targetLogit.data(), 0.0f, n));
  const float cap = float(options.loss.softCap);
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t rows = std::min(group, n - g0);
    for (int64_t v0 = 0; v0 < vocab; v0 += block) {
      const int64_t cols = std::min(block, vocab - v0);
      MOEWB_RETURN_IF_ERROR(logitStrip(context, h, wv, d, g0, rows, v0, cols, strip.data()));
      MOEWB_RETURN_IF_ERROR(linearLossFoldStrip(stream, strip.data(), rows, cols, g0, v0, targets,
                                                cap, runMax.data(), runSum.data(),
                                                targetLogit.data()));
    }
  }
  return linearLossFinish(stream, runMax.data(), runSum.data(), targetLogit.data(), targets, n,
                          vocab, options.loss, saved.lse.data(), loss, zLoss,
                          saved.validCount.data());
}

Status cceBackwardCuda(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                       int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                       const CceSavedCuda& saved, float dLoss, bf16* dh, float* dWv) {
  MOEWB_CHECK(options.groupTokens > 0 && options.vocabBlock > 0 && vocab > 0);
  if (n <= 0 || d <= 0) return Status::ok();
  cudaStream_t stream = context.stream();
  CceOptions refRule;  // the reference's threshold rule (kCceFilterAuto -> epsilon<float> / 32)
  refRule.filterEps = options.filterEps;
  const double threshold = cceFilterThreshold<float>(refRule);
  const bool filter = threshold > 0;
  MOEWB_CHECK(!filter || options.filterTokenBlock > 0);
  // Filter tiles: tileRows tokens from token 0 on; strips hold whole tiles (as cce.h's groups).
  const int64_t tileRows = filter ? std::min(options.filterTokenBlock, n) : 1;
  const int64_t group =
      filter ? std::min(n, std::max<int64_t>(1, options.groupTokens / tileRows) * tileRows)
             : std::min(options.groupTokens, n);
  const int64_t block = std::min(options.vocabBlock, vocab);
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> strip,
                         context.newTensor<float>({group, block}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> grad, context.newTensor<bf16>({group, block}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dhAcc, context.newTensor<float>({group, d}, scratch));
  // With the filter: G with the filtered tiles zeroed (for dh; for dWv too with filterWeightGrad,
  // then in place in `grad`), and every tile's max |dz / g_t| ([vocab blocks, token tiles]).
  DeviceTensor<bf16> keptStorage;
  DeviceTensor<int32_t> tileMax;
  const int64_t tokenTiles = (n + tileRows - 1) / tileRows;
  const int64_t vocabBlocks = (vocab + block - 1) / block;
  if (filter) {
    if (!options.filterWeightGrad) {
      MOEWB_ASSIGN_OR_RETURN(keptStorage, context.newTensor<bf16>({group, block}, scratch));
    }
    MOEWB_ASSIGN_OR_RETURN(tileMax, context.newTensor<int32_t>({vocabBlocks, tokenTiles}, scratch));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        tileMax.data(), 0, size_t(vocabBlocks * tokenTiles) * sizeof(int32_t), stream));
  }
  bf16* gradAll = grad.data();  // G for dWv
  bf16* gradDh = filter && !options.filterWeightGrad ? keptStorage.data() : grad.data();  // for dh
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t rows = std::min(group, n - g0);
    for (int64_t v0 = 0; v0 < vocab; v0 += block) {
      const int64_t cols = std::min(block, vocab - v0);
      MOEWB_RETURN_IF_ERROR(logitStrip(context, h, wv, d, g0, rows, v0, cols, strip.data()));
      if (filter) {
        int32_t* stripTileMax = tileMax.data() + (v0 / block) * tokenTiles + g0 / tileRows;
        MOEWB_RETURN_IF_ERROR(cceGradStripTileMax(
            stream, strip.data(), rows, cols, g0, v0, targets, vocab, options.loss,
            saved.lse.data(), saved.validCount.data(), dLoss, tileRows, gradAll, stripTileMax));
        MOEWB_RETURN_IF_ERROR(
            cceFilterStrip(stream, gradAll, rows, cols, tileRows, stripTileMax, threshold, gradDh));
      } else {
        MOEWB_RETURN_IF_ERROR(linearLossGradStrip(stream, strip.data(), rows, cols, g0, v0, targets,
                                                  vocab, options.loss, saved.lse.data(),
                                                  saved.validCount.data(), dLoss, gradAll));
      }
      // dhAcc[rows, d] (+)= G[rows, cols] Wv[v0.., d].
      MOEWB_RETURN_IF_ERROR(gemm(context, rows, d, cols, 1.0f,
                                 GemmOperand{gradDh, DType::kBf16, cols, false},
                                 GemmOperand{wv + v0 * d, DType::kBf16, d, false},
                                 v0 == 0 ? 0.0f : 1.0f, GemmOutput{dhAcc.data(), DType::kF32, d}));
      // dWv[v0.., d] += G^T h[g0.., d] (G with the filtered tiles zeroed if filterWeightGrad:
      // then gradAll was filtered in place).
      MOEWB_RETURN_IF_ERROR(gemm(context, cols, d, rows, 1.0f,
                                 GemmOperand{gradAll, DType::kBf16, cols, true},
                                 GemmOperand{h + g0 * d, DType::kBf16, d, false}, 1.0f,
                                 GemmOutput{dWv + v0 * d, DType::kF32, d}));
    }
    MOEWB_RETURN_IF_ERROR(castFloatToBf16(stream, dhAcc.data(), dh + g0 * d, rows * d));
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
