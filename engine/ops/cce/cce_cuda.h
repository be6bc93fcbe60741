// CCE (ops/cce/cce.h) on the GPU: the LM head linear fused with cross-entropy, tiled along the
// vocabulary (and along tokens) so that the full logits [N, V] never exist. Maths, options and
// the ignore-index rule as ops/chunk_loss/linear_loss.h (soft-cap, z-loss).
//
// Design: the sequence is walked in strips of [groupTokens, vocabBlock]. Forward, per strip:
// one cuBLAS GEMM z = h_group Wv_block^T (bf16 operands, fp32 strip), then a kernel folds the
// strip into running fp32 (max, sum) per token (online log-sum-exp) and picks up the target
// logit when the target falls in the block; a final single-block kernel forms lse, the mean CE and
// z-loss over the valid tokens (double, fixed order) on the device. Backward, per token group:
// for each vocabulary block, recompute the strip, turn it into G = dz (bf16), dh_group += G
// Wv_block (fp32 workspace, rounded to bf16 once per group) and dWv_block += G^T h_group (fp32,
// added into the gradient). Exact unless filterEps != 0, and deterministic (cuBLAS GEMMs and
// fixed-order kernels; the filter's only atomics are order-free integer maxima). Memory beyond
// inputs/outputs: fp32 strip groupTokens*vocabBlock (+ a bf16 one and an fp32 [groupTokens, D] dh
// accumulator in the backward) and four fp32 [N] vectors; never N*V unless the options ask for
// strips that large. Costs: forward 2 N V D flops, backward 6 N V D; ceil(N/group) * ceil(V/block)
// strips, 2 launches per forward strip, 4 per backward strip. No host synchronisation (N_valid
// stays on the device). Targets equal to loss.ignoreIndex or outside [0, V) are ignored (the CPU
// reference CHECKs the latter).
// Gradient filtering (filterEps != 0), as ops/cce/cce.h: the logit gradient is cut into tiles of
// filterTokenBlock tokens x filterVocabBlock vocabulary entries (0: vocabBlock), aligned at token
// 0 and entry 0 as the reference's token and vocabulary blocks (strips are rounded down to whole
// tiles); a tile whose every |dz / g_t| (fp32, before the bf16 rounding; ignored rows count 0) is
// below the threshold adds nothing to dh (and, with filterWeightGrad, nothing to dWv). Decided on
// the device (ops/cce/cce_filter_cuda.h): the gradient kernel writes each tile's maximum, and the
// dh GEMM (and with filterWeightGrad the dWv GEMM) skips the filtered tiles' work: its CTAs list
// the K steps that meet a kept tile and multiply only those, so the cost falls with the share of
// tiles filtered (the bf16 tensor-core mainloop of the grouped experts; where d or the tile width
// is not a multiple of 8, the filtered tiles are zeroed and cuBLAS multiplies the whole strip).
// Same result as cceBackward with tokenBlock = filterTokenBlock, vocabBlock = the tile width,
// filterEps and filterWeightGrad (up to fp32 vs reference precision on tiles whose maximum lies
// at the threshold). Costs over the exact backward: a bf16 strip's padding and the tile maxima.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/chunk_loss/linear_loss.h"

namespace moewb::engine::cuda {

struct CceCudaOptions {
  int64_t groupTokens = 4096;  // token rows per strip (> 0)
  int64_t vocabBlock = 4096;   // vocabulary columns per strip (> 0)
  // Threshold on |dz / g_t| per tile (ops/cce/cce.h); 0 = exact, < 0 (kCceFilterAuto) =
  // cceFilterThreshold<float>, i.e. FLT_EPSILON / 32.
  double filterEps = 0.0;
  int64_t filterTokenBlock = 64;  // tokens per filter tile (CceOptions::tokenBlock, > 0)
  // Vocabulary entries per filter tile (CceOptions::vocabBlock); 0 = vocabBlock. Strips are then
  // the largest multiple of it up to vocabBlock.
  int64_t filterVocabBlock = 0;
  bool filterWeightGrad = false;  // also filter dWv (as CceOptions::filterWeightGrad)
  LinearLossOptions loss;
};

struct CceSavedCuda {
  DeviceTensor<float> lse;           // [N] log-sum-exp of the (capped) logits
  DeviceTensor<int32_t> validCount;  // [1] N_valid of the forward
};

// From h[n, d], wv[vocab, d] (bf16) and targets[n]: fills `saved` (kActivations) and writes the
// device scalars loss[0] (mean CE over valid tokens, 0 when none) and, when not null, zLoss[0]
// (mean lambda lse^2). Errors: kResourceExhausted, kInternal (cuBLAS), launch errors.
Status cceForwardCuda(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                      int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                      CceSavedCuda& saved, float* loss, float* zLoss);

// dh[n, d] (bf16, overwritten) = dLoss * d(objective)/dh and dWv[vocab, d] (fp32) += dLoss *
// d(objective)/dWv, objective = loss + zLoss. Same inputs and options as the forward that filled
// `saved`. Errors: kResourceExhausted, kInternal (cuBLAS), launch errors.
Status cceBackwardCuda(CudaContext& context, const bf16* h, const bf16* wv, const int32_t* targets,
                       int64_t n, int64_t d, int64_t vocab, const CceCudaOptions& options,
                       const CceSavedCuda& saved, float dLoss, bf16* dh, float* dWv);

}  // namespace moewb::engine::cuda
