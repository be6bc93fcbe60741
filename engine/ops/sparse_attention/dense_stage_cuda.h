// The gated sparse attention layer's dense warm-up stage (SparseStage::kDenseWarmup: every query
// attends to all its causal keys) on FA2-style flash kernels (dense_stage_cuda.cuh), instead of the
// gathered core over the causal selection (sparse_attention_core_{fwd,bwd}.cuh). Same math as
// sparse_attention_core_ref.cpp: MQA / GQA (query head h reads kv head h / (H / Hkv)), a per-head
// sink logit kappa_h in the softmax denominator, scale 1/sqrt(dh), causal. What changes is what is
// saved: the log-sum-exp lse [B, H, T] (fp32, natural log, the sink included:
// lse_th = ln(exp(kappa_h) + sum_{s<=t} exp(q_th.k_s / sqrt(dh)))) instead of probs [N, H, T], so
// a layer at B=4 T=4096 H=16 saves 1 MB instead of 4.3 GB, and the indexer target
// p*[t, s] = normalize_{s<=t} sum_h exp(q_th.k_s / sqrt(dh) - lse_th) is recomputed on tensor
// cores from q, k and lse.
//
// Layer wiring (sparse_attention_layer_cuda.cpp): when denseStageFlashApplies(dims), the layer's
// SparseAttentionSavedCuda::probs holds lse [B, H, T] (not probs [N, H, W]); sinkProbs [N, H],
// selected (the causal selection, read by the indexer objective) and indexerTarget [N, T] keep
// their meaning. Otherwise the dense stage runs through the gathered core as before.
//
// Costs (N = B T tokens): forward 2 N T H dh FLOPs over the causal half (fwd 4 B H T^2 dh / 2);
// target N T H dh; backward 3.5x the forward (S and dP recomputed by the dQ pass: no atomics).
// Workspace of the backward: denseStageBackwardWorkspaceFloats(dims) fp32 values (delta, sink
// terms, per-split dK/dV partials). Deterministic: one owner per output element, fixed orders.
// Nothing here synchronises with the host; every launcher queues work on `stream` and returns the
// launch error as a Status.
#pragma once

#include <cstdint>

#include "ops/sparse_attention/sparse_attention.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// The path selection: false routes the dense stage through the gathered core (round-1 path).
inline constexpr bool kDenseStageFlash = true;
inline constexpr int64_t kDenseStageMaxHeads = 128;  // the target kernel's rows per CTA

// True when the layer's dense stage runs here: stage kDenseWarmup, kDenseStageFlash, headDim 64
// or 128, 1 <= numHeads <= kDenseStageMaxHeads, kvHeads divides numHeads, T <= 65535 * 128.
bool denseStageFlashApplies(const SparseAttentionDims& dims);

// Forward: context [N, H*dh] bf16, lse [B, H, T] fp32 and sinkProbs [N, H] fp32 (all overwritten)
// from q [N, H*dh], k, v [N, Hkv*dh] bf16 and sink [H] bf16. One launch.
// Errors: kInvalidArgument when !denseStageFlashApplies(dims) (stage aside), launch errors.
Status denseStageForwardCuda(cudaStream_t stream, const SparseAttentionDims& dims, const bf16* q,
                             const bf16* k, const bf16* v, const bf16* sink, float* lse,
                             float* sinkProbs, bf16* context);

// Indexer target p* [N, T] fp32 (overwritten; row n = b T + t, column s = key position, 0 for
// s > t, i.e. the layout of the causal selection's [N, W = T] slots) from q, k and the forward's
// lse. One launch. Errors as denseStageForwardCuda.
Status denseStageTargetCuda(cudaStream_t stream, const SparseAttentionDims& dims, const bf16* q,
                            const bf16* k, const float* lse, float* target);

// fp32 values of workspace denseStageBackwardCuda needs for these dims.
int64_t denseStageBackwardWorkspaceFloats(const SparseAttentionDims& dims);

// Backward from dContext [N, H*dh]: dq [N, H*dh], dk, dv [N, Hkv*dh] bf16 (overwritten) and the
// sink gradient ADDED into dSink [H] fp32 (dkappa_h = -sum_t p_sink[t, h] delta[t, h],
// delta = rowsum(dContext * context)). q, k, v, context, lse, sinkProbs are the forward's;
// workspace holds denseStageBackwardWorkspaceFloats(dims) floats. Five launches.
// Errors as denseStageForwardCuda.
Status denseStageBackwardCuda(cudaStream_t stream, const SparseAttentionDims& dims,
                              const bf16* dContext, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* context, const float* lse, const float* sinkProbs,
                              float* workspace, bf16* dq, bf16* dk, bf16* dv, float* dSink);

}  // namespace moewb::engine::cuda
