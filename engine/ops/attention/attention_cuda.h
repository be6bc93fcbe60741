// Causal multi-head softmax attention (mixer 'A', ops/attention/attention.h) on the GPU, same
// layout and maths as the CPU reference: q, k, v = x Wq^T, x Wk^T, x Wv^T ([N, D], head h in
// columns h*K .. h*K+K-1, token n = b*T + t); per (b, h) S = q k^T / sqrt(K) causally masked,
// P = softmax_rows(S), o = P v; y = concat_h(o) Wo^T.
//
// Design. Head dims 64 and 128 run the flash kernels (flash_attention_cuda.cuh, FA2-style
// mma.sync m16n8k16 bf16 with fp32 accumulation, no T x T buffer):
//   forward: one CTA of 8 warps per 128 queries of one (b, h), key tiles of 64 from the diagonal
//     down, online softmax with exp2 (log2 e folded into the scale), masking only tiles that
//     cross the diagonal, fully masked tiles skipped, query blocks launched longest first;
//     writes context and lse[B, H, T] = ln sum_{s<=t} exp(scale q_t.k_s) (natural log).
//   backward (deterministic, no atomics): delta = rowsum(dO * O) (fp32 [B, H, T] workspace);
//     a key-block-parallel kernel (128 keys per CTA, loops over query tiles) recomputes
//     P = exp(S - lse) and dP = dO v^T and accumulates dv = P^T dO, dk = dS^T q / sqrt(K) with
//     dS = P ⊙ (dP - delta); a query-block-parallel kernel recomputes S and dP again for
//     dq = dS k / sqrt(K). Every output element has one owner and a fixed summation order.
// Other head dims keep the cuBLAS path (also exported below as the GPU-side reference): per
// sequence b, strided-batched GEMMs over the H heads for S = q k^T (fp32) and o = P v (bf16 P)
// with a fused causal softmax kernel (one warp per row) between them; the backward recomputes S,
// rebuilds P = exp(S - lse) and runs the mirror GEMMs dP = do v^T, dv = P^T do,
// dS = P ⊙ (dP - rowsum(P ⊙ dP)), dq = dS k / sqrt(K), dk = dS^T q / sqrt(K).
// Precision: activations, saved q/k/v/context and weight copies bf16; S, dP, lse, delta and all
// sums fp32; P and dS rounded to bf16 as MMA/GEMM operands; weight gradients fp32 (added into);
// the three dx products are summed in fp32 and rounded once. The flash and cuBLAS paths agree to
// bf16 rounding (~1e-2 relative), not bitwise.
// Costs (core, causal, per (b, h), T^2/2 unmasked pairs): flash forward 2 T^2 K flops, flash
// backward 7 T^2 K (S and dP are computed in both backward kernels, 3.5x the forward where 2.5x
// is the minimum with dq atomics); workspace: none forward, fp32 [B, H, T] backward; 1 launch
// forward, 3 backward. Measured on an H200 (bench/scratch/flash_attention_01.md): B=8 T=4096
// H=16 K=128 forward 2.21 ms, backward 7.06 ms (SDPA fwd+bwd 5.12 ms in the same call); T=32768
// runs (68.5 ms fwd+bwd at B=1). The cuBLAS path computes the full T x T
// (4 B H T^2 K flops forward, about twice that backward) with fp32 + bf16 [H, T, T] workspace
// (two of each backward), 3 launches per sequence forward, 6 backward. Layer projections add
// 8 N D^2 forward, 16 N D^2 backward. No host synchronisation anywhere.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/attention/attention.h"

namespace moewb::engine::cuda {

struct AttentionWeightsCuda {
  const bf16* wq = nullptr;  // [D, D]
  const bf16* wk = nullptr;  // [D, D]
  const bf16* wv = nullptr;  // [D, D]
  const bf16* wo = nullptr;  // [D, D]
};

struct AttentionGradsCuda {
  float* wq = nullptr;  // [D, D], added into
  float* wk = nullptr;  // [D, D]
  float* wv = nullptr;  // [D, D]
  float* wo = nullptr;  // [D, D]
};

struct AttentionSavedCuda {
  DeviceTensor<bf16> q;        // [N, D]
  DeviceTensor<bf16> k;        // [N, D]
  DeviceTensor<bf16> v;        // [N, D]
  DeviceTensor<bf16> context;  // [N, D] concatenated head outputs (the input of Wo)
  DeviceTensor<float> lse;     // [B, H, T] row log-sum-exp of the scaled, masked scores
};

// Core only: context[N, D] and lse[B, H, T] from q, k, v [N, D] (flash kernels for K in {64, 128},
// else the cuBLAS path). Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionCoreForwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* q,
                                const bf16* k, const bf16* v, float* lse, bf16* contextOut);

// Core backward: dq, dk, dv [N, D] (overwritten) from dContext [N, D], the forward's output
// contextIn [N, D] and lse [B, H, T]. Deterministic (bitwise equal run to run).
// Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionCoreBackwardCuda(CudaContext& context, const AttentionDims& dims,
                                 const bf16* dContext, const bf16* q, const bf16* k, const bf16* v,
                                 const bf16* contextIn, const float* lse, bf16* dq, bf16* dk,
                                 bf16* dv);

// The cuBLAS core for any head dim: the fallback behind the two functions above and the GPU-side
// reference of the flash path in tests. Same contracts; workspace fp32 + bf16 [H, T, T] forward,
// twice that backward. Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionCoreForwardCublas(CudaContext& context, const AttentionDims& dims, const bf16* q,
                                  const bf16* k, const bf16* v, float* lse, bf16* contextOut);
Status attentionCoreBackwardCublas(CudaContext& context, const AttentionDims& dims,
                                   const bf16* dContext, const bf16* q, const bf16* k,
                                   const bf16* v, const float* lse, bf16* dq, bf16* dk, bf16* dv);

// Full layer: y[N, D] (overwritten) from x[N, D]; allocates and fills `saved` (kActivations).
// Errors: kResourceExhausted, kInternal (cuBLAS), launch errors.
Status attentionForwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* x,
                            const AttentionWeightsCuda& weights, AttentionSavedCuda& saved,
                            bf16* y);

// Full layer backward: dx[N, D] (overwritten); adds the weight gradients into `grads`.
// Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionBackwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* dy,
                             const bf16* x, const AttentionWeightsCuda& weights,
                             const AttentionSavedCuda& saved, const AttentionGradsCuda& grads,
                             bf16* dx);

}  // namespace moewb::engine::cuda
