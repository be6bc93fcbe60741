// Private to the fused LM-head losses on the GPU (ops/cce, ops/chunk_loss): the strip kernels
// between their cuBLAS GEMMs. A strip is z[rows, cols] fp32 (ld cols) of the logits of tokens
// rowBegin.. and vocabulary entries colBegin... Host code that allocates stays in .cpp files.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/chunk_loss/linear_loss.h"

namespace moewb::engine::cuda {

// Folds a strip into the running (runMax, runSum) of its rows (soft-capped first when cap > 0)
// and stores the capped target logit into targetLogit[t] when rowBegin <= t, colBegin <= y_t <
// colBegin + cols. Errors: launch errors.
Status linearLossFoldStrip(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                           int64_t rowBegin, int64_t colBegin, const int32_t* targets, float cap,
                           float* runMax, float* runSum, float* targetLogit);

// Single block over all n tokens: lse[t] = runMax + log(runSum); loss[0] = mean over valid
// tokens of lse - targetLogit, zLoss[0] (if not null) = mean of lambda lse^2, validCount[0].
// Valid: y != ignoreIndex and 0 <= y < vocab. Errors: launch errors.
Status linearLossFinish(cudaStream_t stream, const float* runMax, const float* runSum,
                        const float* targetLogit, const int32_t* targets, int64_t n, int64_t vocab,
                        const LinearLossOptions& options, float* lse, float* loss, float* zLoss,
                        int32_t* validCount);

// g[r, c] = bf16(dz) for the strip (ld cols): dz = g_t (exp(zc - lse) (1 + 2 lambda lse) - [v ==
// y]) (1 - (zc / cap)^2 when cap > 0), zc the capped logit, g_t = dLoss / validCount[0] for valid
// tokens and 0 otherwise. Errors: launch errors.
Status linearLossGradStrip(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                           int64_t rowBegin, int64_t colBegin, const int32_t* targets,
                           int64_t vocab, const LinearLossOptions& options, const float* lse,
                           const int32_t* validCount, float dLoss, bf16* g);

// validCount[0] = number of targets with y != ignoreIndex and 0 <= y < vocab (single block).
// Errors: launch errors.
Status linearLossCountValid(cudaStream_t stream, const int32_t* targets, int64_t n, int64_t vocab,
                            int32_t ignoreIndex, int32_t* validCount);

// lse[t] = runMax[t] + log(runSum[t]) for t in [rowBegin, rowBegin + rows). Errors: launch errors.
Status linearLossLseRows(cudaStream_t stream, const float* runMax, const float* runSum,
                         int64_t rowBegin, int64_t rows, float* lse);

// out[i] = bf16(scale * float(in[i])) for i < count (in may equal out). Errors: launch errors.
Status linearLossScaleBf16(cudaStream_t stream, const bf16* in, float scale, bf16* out,
                           int64_t count);

}  // namespace moewb::engine::cuda
