// KDA core (Kimi Delta Attention, ENGINE-MATH §2.2-2.5): the gated delta rule with a decay per
// key channel. Per (sequence b, value head hv) with state S[K, V] (S_0 = initial state or 0):
//   S~  = Diag(exp(g_t)) S_{t-1}
//   S_t = S~ + beta_t k_t (v_t - S~^T k_t)^T
//   o_t = S_t^T q_t                      (q already normalised and scaled by the caller)
// Two forward forms compute the same map:
//   kdaNaiveForward  - the recurrence itself, one token at a time; the oracle. O(T K V) per head.
//   kdaChunkForward  - the chunked WY / UT form (§2.3) with chunks of C tokens (the last one may
//     be partial). Per chunk: the decayed Gram L and the causal q-k matrix Aqk (C^2 K flops
//     each), M = (I + L)^{-1} (16x16 diagonal blocks by forward substitution, merged with GEMMs,
//     ~C^3 / 3), the WY factors W = M Diag(beta) (k ⊙ e^G), U = M Diag(beta) v (C^2 (K + V)),
//     then the corrected values, output and state update (6 C K V + C^2 V). Per head about
//     T (3 C K + 2 C V + C^2 / 3 + 6 K V) flops, i.e. O(T C K + T K V) as in §2.3 (the naive
//     recurrence is ~6 T K V). Saves Aqk and M ([C, C] per chunk) for the backward.
//   kdaChunkBackward - §2.5: recomputes G, W, U and the chunk-entry states from the saved Aqk
//     and M, then runs the chunks in reverse. About 3x the forward's flops (the M^T dM M^T
//     product adds ~C^3 / 2 per chunk, done on the triangles only) plus one [K, V] state per
//     chunk of scratch per task.
// Decay factors (§2.4): chunks are split into sub-blocks of kKdaSubBlock rows. Inside a diagonal
// sub-block exp(G_i - G_j) (j <= i) is a running product of a_t = exp(g_t) <= 1, computed element
// by element; an off-diagonal sub-block factors as exp(G_i - G_r) exp(G_r - G_j) with r the
// sub-block's first row, both factors <= 1, and becomes one GEMM. exp(G_i) and exp(G_c - G_i)
// are running products too. No exponent is ever positive (never exp(-G) alone) and nothing can
// overflow. Factors below kdaDecayFlush<T>() are flushed to zero, so a product of two factors is
// never subnormal (subnormals are ~100x slower on x86); this drops contributions smaller than
// 1e-15 (fp32) or 1e-100 (fp64) of a unit term.
// GVA: HV value heads share H q/k heads (HV a multiple of H; value head hv reads q/k head
// hv / (HV / H)); g and beta belong to the value head. HV == H is plain KDA.
// Layouts (token n = b * T + t, head slices are column blocks):
//   q, k [N, H*K]; v [N, HV*V]; g [N, HV*K] (log decay, expected <= 0); beta [N, HV];
//   o [N, HV*V]; states [B, HV, K, V].
// Threading: one task per (b, hv) forward and per (b, h) backward (the value heads of one q/k
// head run in order inside the task), so results are bit-identical for any thread count.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Rows per sub-block of a chunk (see the file comment).
inline constexpr int64_t kKdaSubBlock = 16;

// Decay factors below this are treated as zero (see the file comment).
template <typename T>
constexpr T kdaDecayFlush() {
  return sizeof(T) == sizeof(float) ? T(1e-15) : T(1e-100);
}

struct KdaCoreDims {
  int64_t batch = 0;          // sequences B
  int64_t seqLen = 0;         // tokens per sequence T (>= 1, any value)
  int64_t numHeads = 0;       // q/k heads H
  int64_t numValueHeads = 0;  // value heads HV, a multiple of H; 0 means H
  int64_t keyDim = 0;         // K
  int64_t valueDim = 0;       // V
  int64_t chunk = 64;         // C, tokens per chunk of the chunked form (>= 1)

  int64_t tokens() const { return batch * seqLen; }
  int64_t valueHeads() const { return numValueHeads > 0 ? numValueHeads : numHeads; }
  int64_t groupSize() const { return valueHeads() / numHeads; }  // value heads per q/k head
  int64_t numChunks() const { return (seqLen + chunk - 1) / chunk; }
};

// What kdaChunkForward keeps for kdaChunkBackward (the raw q, k, v, g, beta and the initial
// state are the caller's and are passed to the backward again).
template <typename T>
struct KdaChunkSaved {
  Tensor<T> aqk;  // [B*HV, NC*C, C] row n*C+i of a head: Aqk[i, :] of chunk n (j <= i, else 0)
  Tensor<T> m;    // [B*HV, NC*C, C] same layout: M = (I + L)^{-1}, unit lower triangular
};

// Gradients of the core with respect to all of its inputs.
template <typename T>
struct KdaCoreGrads {
  Tensor<T> dq;             // [N, H*K] (summed over the value heads of a group)
  Tensor<T> dk;             // [N, H*K]
  Tensor<T> dv;             // [N, HV*V]
  Tensor<T> dg;             // [N, HV*K]
  Tensor<T> dbeta;          // [N, HV]
  Tensor<T> dInitialState;  // [B, HV, K, V]
};

// The recurrence of §2.2, token by token. `initialState` [B, HV, K, V] may be empty (zeros).
// Returns o [N, HV*V] and writes the state after the last token into `finalState` [B, HV, K, V].
template <typename T>
Tensor<T> kdaNaiveForward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                          const Tensor<T>& beta, const Tensor<T>& initialState,
                          Tensor<T>& finalState);

// The chunked form of §2.3; same contract as kdaNaiveForward. Fills `saved` when not null.
template <typename T>
Tensor<T> kdaChunkForward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                          const Tensor<T>& beta, const Tensor<T>& initialState,
                          Tensor<T>& finalState, KdaChunkSaved<T>* saved);

// Backward of kdaChunkForward given dO [N, HV*V] and dFinalState [B, HV, K, V] (may be empty:
// zero). Inputs are those of the forward and its `saved`. Returns every input gradient.
template <typename T>
KdaCoreGrads<T> kdaChunkBackward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& dO,
                                 const Tensor<T>& dFinalState, const Tensor<T>& q,
                                 const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                                 const Tensor<T>& beta, const Tensor<T>& initialState,
                                 const KdaChunkSaved<T>& saved);

}  // namespace moewb::engine
