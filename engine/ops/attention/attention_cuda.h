// Causal multi-head softmax attention (mixer 'A', ops/attention/attention.h) on the GPU, same
// layout and maths as the CPU reference: q, k, v = x Wq^T, x Wk^T, x Wv^T ([N, D], head h in
// columns h*K .. h*K+K-1, token n = b*T + t); per (b, h) S = q k^T / sqrt(K) causally masked,
// P = softmax_rows(S), o = P v; y = concat_h(o) Wo^T.
//
// Design: per sequence b, cuBLAS strided-batched GEMMs over the H heads for S = q k^T (fp32) and
// o = P v (bf16 P), with a fused causal softmax kernel (one warp per row, fp32 max / sum) between
// them. Instead of P, the forward saves the fp32 row log-sum-exp lse[B, H, T]; the backward
// recomputes S with the same GEMM, rebuilds P = exp(S - lse), and runs the mirror GEMMs:
//   dP = do v^T, dv = P^T do, dS = P ⊙ (dP - rowsum(P ⊙ dP)),
//   dq = dS k / sqrt(K), dk = dS^T q / sqrt(K).
// Precision: activations, saved q/k/v/context and weight copies bf16; S, dP, lse and all sums
// fp32; P and dS rounded to bf16 as GEMM operands; weight gradients fp32 (added into); the three
// dx products are summed in fp32 and rounded once.
// Costs: 8 N D^2 + 4 B H T^2 K flops forward (the masked half of S is computed and ignored),
// about twice that backward; workspace per call: fp32 [H, T, T] (two in the backward) and bf16
// [H, T, T] (two in the backward), reused across sequences. 3 launches per sequence forward,
// 6 backward; no host synchronisation.
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

// Core only: context[N, D] and lse[B, H, T] from q, k, v [N, D].
// Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionCoreForwardCuda(CudaContext& context, const AttentionDims& dims, const bf16* q,
                                const bf16* k, const bf16* v, float* lse, bf16* contextOut);

// Core backward: dq, dk, dv [N, D] (overwritten) from dContext [N, D] and the forward's lse.
// Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status attentionCoreBackwardCuda(CudaContext& context, const AttentionDims& dims,
                                 const bf16* dContext, const bf16* q, const bf16* k, const bf16* v,
                                 const float* lse, bf16* dq, bf16* dk, bf16* dv);

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
