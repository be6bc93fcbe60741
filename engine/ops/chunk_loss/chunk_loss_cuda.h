// Chunk Loss (ops/chunk_loss/chunk_loss.h) on the GPU: the LM head fused with cross-entropy,
// chunked along tokens (maths and options in linear_loss.h: ignore index, soft-cap, z-loss).
//
// chunkLossForwardCuda counts the valid targets on the device, then per chunk of Nc tokens: one
// cuBLAS GEMM materialises z_c[Nc, V] (fp32), a kernel forms its rows' lse (online max/sum over
// the whole vocabulary), another writes dz_c (bf16, scaled by 1 / N_valid), then dh_c = dz_c Wv
// (bf16) and dWv_acc (+)= dz_c^T h_c (fp32). All gradients exist when the forward returns (for
// dLoss = 1); chunkLossBackwardCuda scales them by the upstream dLoss. Loss, z-loss and N_valid
// stay on the device (no host synchronisation). Shares the strip kernels of ops/cce/cce_cuda.cu.
// Exact and deterministic. Peak extra memory: Nc*V*(4 + 2) bytes + the saved dh [N, D] bf16 and
// dWv [V, D] fp32. Costs: 6 N V D flops in the forward; the backward is two elementwise passes.
// Targets equal to loss.ignoreIndex or outside [0, V) are ignored.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/chunk_loss/linear_loss.h"

namespace moewb::engine::cuda {

struct ChunkLossCudaOptions {
  int64_t chunkTokens = 0;  // Nc; 0 = chunkLossAutoTokens(N, V, D) (ops/chunk_loss/chunk_loss.h)
  LinearLossOptions loss;
};

// What the forward produces for the backward (gradients for dLoss = 1).
struct ChunkLossSavedCuda {
  DeviceTensor<bf16> dh;             // [N, D]
  DeviceTensor<float> dWv;           // [V, D]
  DeviceTensor<float> lse;           // [N]
  DeviceTensor<int32_t> validCount;  // [1]
};

// From h[n, d], wv[vocab, d] (bf16) and targets[n]: fills `saved` (kActivations) and writes the
// device scalars loss[0] (mean CE over valid tokens, 0 when none) and, when not null, zLoss[0].
// Errors: kResourceExhausted, kInternal (cuBLAS), launch errors.
Status chunkLossForwardCuda(CudaContext& context, const bf16* h, const bf16* wv,
                            const int32_t* targets, int64_t n, int64_t d, int64_t vocab,
                            const ChunkLossCudaOptions& options, ChunkLossSavedCuda& saved,
                            float* loss, float* zLoss);

// dh[n, d] (bf16, overwritten) = dLoss * saved.dh; dWv[vocab, d] (fp32) += dLoss * saved.dWv.
// Consumes `saved` (its tensors are released). Errors: launch errors.
Status chunkLossBackwardCuda(CudaContext& context, ChunkLossSavedCuda& saved, float dLoss, bf16* dh,
                             float* dWv);

}  // namespace moewb::engine::cuda
