// CCE on the GPU, host side: the strip loops over cuBLAS GEMMs and the kernels of cce_cuda.cu
// (see cce_cuda.h).
#include "ops/cce/cce_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gemm.h"
#include "moewb/base/check.h"
#include "ops/cce/cce.h"
#include "ops/cce/cce_cuda_kernels.h"
#include "ops/cce/cce_filter_cuda.h"

namespace moewb::engine::cuda {
namespace {

// z[rows, cols] (fp32, ld cols) = h[rowBegin.., d] wv[colBegin.., d]^T.
Status logitStrip(CudaContext& context, const bf16* h, const bf16* wv, int64_t d, int64_t rowBegin,
                  int64_t rows, int64_t colBegin, int64_t cols, float* z) {
  return gemm(context, rows, cols, d, 1.0f, GemmOperand{h + rowBegin * d, DType::kBf16, d, false},
              GemmOperand{wv + colBegin * d, DType::kBf16, d, true}, 0.0f,
              GemmOutput{z, DType::kF32, cols});
}

// dhAcc[rows, d] = (accumulate ? dhAcc : 0) + G[rows, cols] wv[v0.., d] (G bf16, ld ldG).
Status stripDhGemm(CudaContext& context, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                   const bf16* wvBlock, int64_t d, bool accumulate, float* dhAcc) {
  return gemm(context, rows, d, cols, 1.0f, GemmOperand{g, DType::kBf16, ldG, false},
              GemmOperand{wvBlock, DType::kBf16, d, false}, accumulate ? 1.0f : 0.0f,
              GemmOutput{dhAcc, DType::kF32, d});
}

// dWvBlock[cols, d] += G[rows, cols]^T hGroup[rows, d] (G bf16, ld ldG).
Status stripDwGemm(CudaContext& context, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                   const bf16* hGroup, int64_t d, float* dWvBlock) {
  return gemm(context, cols, d, rows, 1.0f, GemmOperand{g, DType::kBf16, ldG, true},
              GemmOperand{hGroup, DType::kBf16, d, false}, 1.0f,
              GemmOutput{dWvBlock, DType::kF32, d});
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

namespace {

// The exact backward: per token group and vocabulary block, the recomputed strip, G and the two
// cuBLAS GEMMs.
Status exactBackward(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                     int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                     const CceSavedCuda& saved, float dLoss, bf16* dh, float* dWv) {
  cudaStream_t stream = context.stream();
  const int64_t group = std::min(options.groupTokens, n);
  const int64_t block = std::min(options.vocabBlock, vocab);
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> strip,
                         context.newTensor<float>({group, block}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> grad, context.newTensor<bf16>({group, block}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dhAcc, context.newTensor<float>({group, d}, scratch));
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t rows = std::min(group, n - g0);
    for (int64_t v0 = 0; v0 < vocab; v0 += block) {
      const int64_t cols = std::min(block, vocab - v0);
      MOEWB_RETURN_IF_ERROR(logitStrip(context, h, wv, d, g0, rows, v0, cols, strip.data()));
      MOEWB_RETURN_IF_ERROR(linearLossGradStrip(stream, strip.data(), rows, cols, g0, v0, targets,
                                                vocab, options.loss, saved.lse.data(),
                                                saved.validCount.data(), dLoss, grad.data()));
      MOEWB_RETURN_IF_ERROR(stripDhGemm(context, grad.data(), cols, rows, cols, wv + v0 * d, d,
                                        v0 != 0, dhAcc.data()));
      MOEWB_RETURN_IF_ERROR(
          stripDwGemm(context, grad.data(), cols, rows, cols, h + g0 * d, d, dWv + v0 * d));
    }
    MOEWB_RETURN_IF_ERROR(castFloatToBf16(stream, dhAcc.data(), dh + g0 * d, rows * d));
  }
  return Status::ok();
}

// The filtered backward (cce_filter_cuda.h): strips of whole filter tiles; G with each tile's
// maximum, the filtered tiles zeroed, then the tile-skipping GEMMs (cuBLAS for shapes they do not
// take).
Status filteredBackward(CudaContext& context, const bf16* h, const bf16* wv,
                        const int32_t* targets, int64_t n, int64_t d, int64_t vocab,
                        const CceCudaOptions& options, double threshold,
                        const CceSavedCuda& saved, float dLoss, bf16* dh, float* dWv) {
  MOEWB_CHECK(options.filterTokenBlock > 0 && options.filterVocabBlock >= 0);
  cudaStream_t stream = context.stream();
  CceFilterTiles tiles;
  tiles.tileRows = std::min(options.filterTokenBlock, n);
  tiles.tileCols = std::min(
      options.filterVocabBlock > 0 ? options.filterVocabBlock : options.vocabBlock, vocab);
  tiles.tokenTiles = (n + tiles.tileRows - 1) / tiles.tileRows;
  tiles.keepBits = cceKeepBits(threshold);
  // Strips hold whole tiles (as cce.h's groups and blocks).
  const int64_t group =
      std::min(n, std::max<int64_t>(1, options.groupTokens / tiles.tileRows) * tiles.tileRows);
  const int64_t block = std::min(
      vocab, std::max<int64_t>(1, options.vocabBlock / tiles.tileCols) * tiles.tileCols);
  const int64_t ldG = (block + 7) / 8 * 8;
  const int64_t vocabTiles = (vocab + tiles.tileCols - 1) / tiles.tileCols;
  constexpr int64_t kIndexLimit = int64_t(1) << 31;  // the filter kernels index in 32 bits
  if (n >= kIndexLimit || vocab >= kIndexLimit || vocabTiles * tiles.tokenTiles >= kIndexLimit ||
      tiles.tileRows * tiles.tileCols >= kIndexLimit) {
    return invalidArgument("CCE gradient filtering: " + std::to_string(n) + " tokens x " +
                           std::to_string(vocab) + " vocabulary entries in tiles of " +
                           std::to_string(tiles.tileRows) + " x " +
                           std::to_string(tiles.tileCols) +
                           " exceed the filter's 2^31 indices; use larger tiles or no filter");
  }
  const bool skipping = cceSkipGemmSupported(group, block, d, tiles.tileCols);
  const MemoryCategory scratch = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> strip,
                         context.newTensor<float>({group, block}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> grad, context.newTensor<bf16>({group, ldG}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dhAcc, context.newTensor<float>({group, d}, scratch));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> tileMax,
                         context.newTensor<int32_t>({vocabTiles, tiles.tokenTiles}, scratch));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      tileMax.data(), 0, size_t(vocabTiles * tiles.tokenTiles) * sizeof(int32_t), stream));
  tiles.tileMax = tileMax.data();
  // G with the filtered tiles zeroed, for dh: in place when dWv is filtered too, else a copy (dWv
  // takes the whole G).
  DeviceTensor<bf16> keptStorage;
  if (!options.filterWeightGrad) {
    MOEWB_ASSIGN_OR_RETURN(keptStorage, context.newTensor<bf16>({group, ldG}, scratch));
    // Finite from the start: the skipping GEMM reads the padding past a short last strip.
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(keptStorage.data(), 0, size_t(group * ldG) * sizeof(bf16), stream));
  }
  bf16* gradAll = grad.data();
  bf16* gradDh = keptStorage.empty() ? grad.data() : keptStorage.data();
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t rows = std::min(group, n - g0);
    for (int64_t v0 = 0; v0 < vocab; v0 += block) {
      const int64_t cols = std::min(block, vocab - v0);
      MOEWB_RETURN_IF_ERROR(logitStrip(context, h, wv, d, g0, rows, v0, cols, strip.data()));
      MOEWB_RETURN_IF_ERROR(cceGradStripTiles(stream, strip.data(), rows, cols, g0, v0, targets,
                                              vocab, options.loss, saved.lse.data(),
                                              saved.validCount.data(), dLoss, tiles, gradAll,
                                              ldG, gradDh));
      // dhAcc[rows, d] (+)= G_kept[rows, cols] Wv[v0.., d]; dWv[v0.., d] += G^T h[g0.., d] (G
      // zeroed in place when filterWeightGrad).
      if (skipping) {
        MOEWB_RETURN_IF_ERROR(cceSkipGemmDh(stream, gradDh, ldG, rows, cols, g0, v0, wv + v0 * d,
                                            d, tiles, v0 != 0, dhAcc.data()));
      } else {
        MOEWB_RETURN_IF_ERROR(stripDhGemm(context, gradDh, ldG, rows, cols, wv + v0 * d, d,
                                          v0 != 0, dhAcc.data()));
      }
      if (skipping && options.filterWeightGrad) {
        MOEWB_RETURN_IF_ERROR(cceSkipGemmDw(stream, gradAll, ldG, rows, cols, g0, v0, h + g0 * d,
                                            d, tiles, dWv + v0 * d));
      } else {
        MOEWB_RETURN_IF_ERROR(
            stripDwGemm(context, gradAll, ldG, rows, cols, h + g0 * d, d, dWv + v0 * d));
      }
    }
    MOEWB_RETURN_IF_ERROR(castFloatToBf16(stream, dhAcc.data(), dh + g0 * d, rows * d));
  }
  return Status::ok();
}

}  // namespace

Status cceBackwardCuda(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                       int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                       const CceSavedCuda& saved, float dLoss, bf16* dh, float* dWv) {
  MOEWB_CHECK(options.groupTokens > 0 && options.vocabBlock > 0 && vocab > 0);
  if (n <= 0 || d <= 0) return Status::ok();
  CceOptions refRule;  // the reference's threshold rule (kCceFilterAuto -> epsilon<float> / 32)
  refRule.filterEps = options.filterEps;
  const double threshold = cceFilterThreshold<float>(refRule);
  if (threshold > 0) {
    return filteredBackward(context, h, wv, targets, n, d, vocab, options, threshold, saved,
                            dLoss, dh, dWv);
  }
  return exactBackward(context, h, wv, targets, n, d, vocab, options, saved, dLoss, dh, dWv);
}

}  // namespace moewb::engine::cuda
