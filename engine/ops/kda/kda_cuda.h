// KDA (Kimi Delta Attention, ENGINE-MATH §2) on the GPU: the chunked core forward and backward
// (kda.h) and the gate / short conv / L2 norm (kda_gate.h). The whole mixer layer built on them is
// model/layers/kda_layer_cuda.h.
//
// Core (kernels in kda_chunk_kernels.cuh, kda_recurrent_r3.cuh, kda_products_r3.cuh,
// kda_intra_mma.cuh, kda_intra_r5.cuh, kda_bwd_mma.cuh and kda_bwd_chunk.cuh, launched from
// kda_chunk_cuda.cu, which says which runs when; allocation in kda_chunk_cuda.cpp), chunked
// WY / UT form of §2.3 with every sum accumulated in fp32:
//   intra-chunk kernel   one CTA per (chunk, b, hv), all chunks in parallel: G = cumsum(g), the
//                        decayed Aqk and L (exp(G_i - G_j), j <= i, never a positive exponent),
//                        M = (I + L)^{-1} by forward substitution (one column per thread, fp32),
//                        and the WY factors W = M Diag(beta) (k ⊙ e^G), U = M Diag(beta) v, plus
//                        q ⊙ e^G, k ⊙ e^{G_C - G} and e^{G_C} (fp32 workspace). When chunk and
//                        keyDim are multiples of 16 and valueDim of 8: Aqk / L off the diagonal
//                        16-token blocks and W / U on tensor cores (block J < I factored through
//                        the first row r of I, exp(G_i - G_r) exp(G_r - G_j), both <= 1); the
//                        diagonal blocks on tensor cores too (through their first row x0:
//                        e^{G_x0 - G_j} <= e^40) where a block decays at most 40, elementwise
//                        otherwise, and M by blocks (16-row inverses, then the merges on tensor
//                        cores; round 8); other shapes: fp32 FMA throughout.
//   recurrent kernel     one CTA (16 warps) per (b, hv, value tile of 32) walking the chunks in
//                        order (8 warps and tiles of 16 when the tile-32 grid would leave SMs
//                        idle), the transposed state slice S^T [32, K] in fp32 shared memory
//                        (plus its bf16 hi / lo split, the tensor-core operand):
//                        Vn = U - W S, O = (q ⊙ e^G) S + Aqk Vn, S <- e^{G_C} S +
//                        (k ⊙ e^{G_C - G})^T Vn, the products on tensor cores (below), the state
//                        update an fp32 FMA per element; the chunk's operands stream in with
//                        cp.async one stage ahead.
//   backward             recomputes W, U and the chunk-entry states (forward recurrent kernel)
//                        unless the forward kept them (keepIntermediates, kda.keep_intermediates),
//                        runs the reverse state-gradient recurrence per (b, hv, value tile)
//                        (dVn, dS per chunk, tensor cores as above), then per (chunk, b, hv) the
//                        products dO S^T, Vn dS^T, dVn S^T, dO Vn^T, dVn v^T on tensor cores and
//                        one CTA for the rest of §2.5 (dAqk, WY / UT backward, pairwise products,
//                        reverse cumsum of dG); for the shapes above its dW (k ⊙ e^G)^T,
//                        (M Diag(beta))^T dW / dVn and the off-diagonal 16-token blocks of the
//                        pairwise products run on tensor cores (same block factoring), the
//                        small C x C steps and diagonal blocks in fp32.
//   Tensor cores: mma.sync m16n8k16 with each fp32 operand split into bf16 hi + lo and the three
//   products hi·hi + hi·lo + lo·hi accumulated in fp32 (relative error ~1e-5, the accuracy of the
//   fp32 kernels for the tests' tolerances); bf16 appears only as MMA operands.
//   Determinism: every sum has a fixed order; dq / dk are summed with fp32 atomics, each element by
//   one thread of one CTA when HV == H (bitwise run-to-run deterministic), by the CTAs of the value
//   heads of a group otherwise (not deterministic across a GVA group).
//   Limits: keyDim, valueDim <= 128, chunk <= 64 (the model's K = V = 128, C = 64: the per-chunk
//   kernels hold [C, K] fp32 tiles in shared memory, up to ~200 KB per CTA at K = 128, C = 64,
//   and the recurrences pad to K = 128, C = 64; errors are kInvalidArgument). Any T >= 1 (the last
//   chunk may be partial).
//   Costs per (b, hv) and chunk: forward ~C^2 K exps + (C^2 K + C^3 / 6 + C^2 (K + V) / 2) FMAs
//   + 4 C K V MMA multiply-adds (x3 for the split), the backward about 3x that; on the
//   tensor-core intra / per-chunk kernels ~C^2 K / 7 exps (diagonal blocks) and the C^2 K terms
//   become MMAs. Workspace: 5
//   [B*HV*T', K or V] fp32 rows (T' = T rounded up to C) and, in the backward, 2 [B*HV, NC, K, V]
//   fp32 (chunk-entry states and their gradients), 3 more [B*HV*T', K or V], 2 [B*HV*T', C] and
//   [B*HV*NC, K] (the backward products; three more [B*HV*T', K] reuse the forward workspace).
//   With keepIntermediates the forward's workspace, the entry states and [B*HV*T', V] Vn are
//   activations instead (kdaKeptIntermediateBytes) and the backward allocates only the three.
// Dtypes: q, k, v, o and dq, dk, dv, dO are bf16 (activations); g, beta, dg, dbeta, states and the
// saved Aqk / M are fp32. Layouts as in kda.h (token n = b * T + t, heads are column blocks).
//
// Gate, conv, L2 norm (kda_gate_cuda.cu, workspaces in kda_gate_cuda.cpp): element-wise and
// per-row kernels; every reduction over tokens (dA_log, dt_bias, conv taps, norm weight, bg) runs
// as fixed row-split partial sums folded in a fixed order, so results are deterministic. Weights
// are bf16 compute copies; weight gradients are fp32 and ADDED into.
//
// Every launcher queues work on `stream` / the context's stream and returns the launch or
// allocation error; nothing synchronises with the host.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "ops/kda/kda.h"
#include "ops/kda/kda_gate.h"

namespace moewb::engine::cuda {

// Largest key / value head dim and chunk the core kernels take.
inline constexpr int64_t kKdaCudaMaxHeadDim = 128;
inline constexpr int64_t kKdaCudaMaxChunk = 64;

// What kdaChunkForwardCuda keeps for kdaChunkBackwardCuda (kActivations), layout of KdaChunkSaved.
// The second group is filled only when the forward keeps its intermediates (kda.keep_intermediates;
// R = B*HV*NC*C padded rows): then the backward reads them instead of recomputing them (the intra
// kernel with the saved M and the forward recurrence: the same kernels on the same inputs, so the
// same bits); kdaKeptIntermediateBytes counts them.
struct KdaChunkSavedCuda {
  DeviceTensor<float> aqk;  // [B*HV, NC*C, C] Aqk of each chunk (j <= i, else 0)
  DeviceTensor<float> m;    // [B*HV, NC*C, C] M = (I + L)^{-1} of each chunk (unit lower)
  // Kept intermediates (empty unless kept).
  DeviceTensor<float> w, u, qg, kDec;  // [R, K], [R, V], [R, K], [R, K]: the WY workspace
  DeviceTensor<float> eGC;             // [B*HV*NC, K] e^{G_C}
  DeviceTensor<float> states;          // [B*HV*NC, K, V] chunk-entry states
  DeviceTensor<float> vn;              // [R, V] Vn = U - W S (rows past the sequence unwritten)

  bool keptIntermediates() const { return !states.empty(); }
};

// Bytes kdaChunkForwardCuda keeps beyond Aqk and M when keepIntermediates is set: fp32 W, U,
// q ⊙ e^G, k ⊙ e^{G_C - G}, Vn ([R, K or V] each), e^{G_C} [B*HV*NC, K] and the entry states
// [B*HV*NC, K, V]. At B=2 T=8192 H=16 K=V=128 C=64: ~0.94 GB per layer.
int64_t kdaKeptIntermediateBytes(const KdaCoreDims& dims);

// Gradient outputs of kdaChunkBackwardCuda (device pointers, preallocated by the caller; every
// element is written). dInitialState may be null (not wanted).
struct KdaCoreGradsCuda {
  bf16* dq = nullptr;              // [N, H*K] (summed over the value heads of a group)
  bf16* dk = nullptr;              // [N, H*K]
  bf16* dv = nullptr;              // [N, HV*V]
  float* dg = nullptr;             // [N, HV*K]
  float* dbeta = nullptr;          // [N, HV]
  float* dInitialState = nullptr;  // [B, HV, K, V] or null
};

// The chunked forward of §2.3 (kdaChunkForward). initialState [B, HV, K, V] may be null (zeros);
// finalState [B, HV, K, V] may be null (not written). Writes o [N, HV*V] and allocates `saved`;
// with keepIntermediates also its kept group (kActivations, kdaKeptIntermediateBytes) in place of
// the forward's workspace, which the backward then does not recompute. Same o and finalState bits
// either way. Errors: kInvalidArgument (dims out of the limits above), kResourceExhausted,
// kInternal.
Status kdaChunkForwardCuda(CudaContext& context, const KdaCoreDims& dims, const bf16* q,
                           const bf16* k, const bf16* v, const float* g, const float* beta,
                           const float* initialState, bf16* o, float* finalState,
                           KdaChunkSavedCuda& saved, bool keepIntermediates = false);

// The backward of kdaChunkForwardCuda (kdaChunkBackward) given dO [N, HV*V] and dFinalState
// [B, HV, K, V] (null: zero). Inputs are those of the forward and its `saved`. When `saved` holds
// the kept intermediates the backward reads them (skipping the intra-chunk and recurrent
// recompute) and takes three [R, K] scratch tensors instead; the gradients are the same bits.
Status kdaChunkBackwardCuda(CudaContext& context, const KdaCoreDims& dims, const bf16* dO,
                            const float* dFinalState, const bf16* q, const bf16* k, const bf16* v,
                            const float* g, const float* beta, const float* initialState,
                            const KdaChunkSavedCuda& saved, const KdaCoreGradsCuda& grads);

// g [N, H*K] (fp32) from f [N, H*K], aLog [H], dtBias [H*K] (kdaGateForward). n = rows.
Status kdaGateForwardCuda(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                          const bf16* f, const bf16* aLog, const bf16* dtBias, float* g);

// df [N, H*K] from dg [N, H*K] and the forward's f, g; ADDS into dALog [H] and dDtBias [H*K]
// (fp32). Uses a workspace from `context` (2 x [min(64, N/32+1), H*K] fp32).
Status kdaGateBackwardCuda(CudaContext& context, const KdaGateParams& params, int64_t n,
                           const float* dg, const bf16* f, const float* g, const bf16* aLog,
                           const bf16* dtBias, bf16* df, float* dALog, float* dDtBias);

// Causal depthwise conv (taps w [Ch, W], w[c, W-1] on the current token) + SiLU over
// x [B*T, Ch]: writes y [N, Ch] and the conv output before SiLU, preActivation [N, Ch].
Status kdaShortConvForwardCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t channels,
                               int64_t width, const bf16* x, const bf16* w, bf16* y,
                               bf16* preActivation);

// dx [N, Ch] from dy [N, Ch]; ADDS into dw [Ch, W] (fp32). Workspace from `context`.
Status kdaShortConvBackwardCuda(CudaContext& context, int64_t batch, int64_t seqLen,
                                int64_t channels, int64_t width, const bf16* dy, const bf16* x,
                                const bf16* w, const bf16* preActivation, bf16* dx, float* dw);

// y = scale x / sqrt(|x_h|^2 + eps) per (row, head) of x [N, H*K]; rinv [N, H] (fp32).
Status kdaL2NormForwardCuda(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                            double scale, double eps, const bf16* x, bf16* y, float* rinv);

// dx = scale (dy - y (y·dy)) rinv per head, y = x rinv.
Status kdaL2NormBackwardCuda(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                             double scale, const bf16* dy, const bf16* x, const float* rinv,
                             bf16* dx);

}  // namespace moewb::engine::cuda
