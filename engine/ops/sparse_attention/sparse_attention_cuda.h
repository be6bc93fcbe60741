// Gated sparse attention (ENGINE-MATH §3, sparse_attention.h / indexer.h / selection.h) on the
// GPU, forward and backward, in four parts:
//   indexer_cuda.cu                 lightning indexer: projections (fp32 outputs), key LayerNorm,
//                                   scores I[t, s], logits of a selection, KL objective, backward.
//                                   HI = 8, dI in {64, 128}: scores, logits and the query-side
//                                   backward on tensor cores (indexer_mma.cuh, 3xbf16 products);
//                                   other shapes scalar fp32.
//   selection_cuda.cu               causal selection, per-row top-k of the scores (radix select,
//                                   ties toward the lower position exactly as topKRow), and the
//                                   transposed selection (stable radix sort by key).
//   sparse_attention_core_cuda.cu   softmax attention with sink over a selection, its backward
//                                   (dq per query; dk/dv gathered per key through the transposed
//                                   selection, no float atomics), the sink gradient and the indexer
//                                   target p*. Kernels in sparse_attention_core_{fwd,bwd}.cuh: for
//                                   dh in {64, 128} on tensor cores: forward and dq per query token
//                                   (one CTA per token and 16 heads of a kv head, heads on M of
//                                   mma.sync, gathered 64-key blocks of K and V), dk/dv per
//                                   (64-key block, query span) with fp32 partials added in span
//                                   order; other dh one warp per (query, head) and per key
//                                   (transposed selection).
//   sparse_attention_layer_cuda.cpp the whole layer: projections through linear_cuda.h, gate, core,
//                                   output projection, indexer objective; backward.
// The .cu files hold kernels and raw launchers (sparse_attention_cuda_kernels.h); the entry points
// that allocate scratch or saved state live in indexer_cuda.cpp, selection_cuda.cpp and
// sparse_attention_core_cuda.cpp (nvcc cannot compile the allocator's Result<DeviceTensor> path).
//
// Precision: x, q, k, v, gate, context, gated, y and their gradients are bf16. Softmax statistics
// (probs, sinkProbs), the indexer's activations (qI, kI, kHat, rstd, wI), its scores/logits, its
// probabilities, p* and the KL are fp32: the top-k is discontinuous, so the scores are kept
// near-exact to pick the reference's keys (fp32 FMA, or bf16 hi/lo split products on tensor
// cores: ~4e-6 relative to fp64); the indexer is small (HI dI + dI + HI columns per token).
// Every reduction accumulates in fp32 (the KL sum over rows in double) and runs in a fixed
// order: results are bitwise reproducible.
// Layouts as in the reference: token n = b T + t; heads are column blocks; a selection is int32
// [N, W], each row ascending key positions s <= t followed by -1 padding (selection.h), W = T in
// the dense warm-up stage, min(topK, T) in the sparse one.
// Limits (kInvalidArgument): headDim <= 256; indexerHeads * indexerDim + indexerHeads <= 12288
// (the score kernel keeps a query's indexer row in shared memory); N * W < 2^31.
// Nothing here synchronises with the host; every launcher queues work on `stream` / the
// context's stream and returns the launch or allocation error. Scratch comes from the context's
// allocator (kWorkspace), saved state is kActivations.
// Core precision on tensor cores: logits are bf16 products summed in fp32 (probs ~1e-6
// relative); P and dz are rounded to bf16 as MMA operands (context, dq, dk, dv ~2e-3 relative).
// Costs (N tokens, W keys per query): scores N T HI dI FMAs (scalar fp32, no tensor cores yet);
// top-k 8 passes over each row's t + 1 scores; core forward 2 N H W dh, backward ~4 N H W dh;
// the transposed selection one radix sort of N W (key, entry) pairs.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "ops/sparse_attention/indexer.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace moewb::engine::cuda {

inline constexpr int64_t kSparseCudaMaxHeadDim = 256;
inline constexpr int64_t kSparseCudaMaxIndexerRow = 12288;  // HI dI + HI floats of shared memory

// ---------------------------------------------------------------------------------------------
// Indexer (indexer_cuda.cu)

// Device views of the indexer's bf16 compute weights (shapes as IndexerWeights).
struct IndexerWeightsCuda {
  const bf16* wq;        // [HI*dI, D]
  const bf16* wk;        // [dI, D]
  const bf16* normGain;  // [dI]
  const bf16* normBias;  // [dI]
  const bf16* ww;        // [HI, D]
};

// fp32 gradients of the indexer weights; indexerBackwardCuda ADDS into them.
struct IndexerGradsCuda {
  float* wq;        // [HI*dI, D]
  float* wk;        // [dI, D]
  float* normGain;  // [dI]
  float* normBias;  // [dI]
  float* ww;        // [HI, D]
};

// IndexerSaved on the device (kActivations, all fp32).
struct IndexerSavedCuda {
  DeviceTensor<float> q;     // [N, HI*dI] query heads
  DeviceTensor<float> kHat;  // [N, dI] normalised key before gain and bias
  DeviceTensor<float> rstd;  // [N] 1/sqrt(var + eps) of the key
  DeviceTensor<float> k;     // [N, dI] the shared key
  DeviceTensor<float> w;     // [N, HI] head weights, HI^-0.5 included
};

// indexerForward: projections of x [N, D] (bf16 operands, fp32 outputs) and the key LayerNorm;
// allocates and fills `saved`. Errors: kInvalidArgument, kResourceExhausted, kInternal.
Status indexerForwardCuda(CudaContext& context, const IndexerDims& dims, const bf16* x,
                          const IndexerWeightsCuda& weights, IndexerSavedCuda& saved);

// Dense scores [N, T] fp32: scores[n, s] = I[t, s] for s <= t, 0 for s > t (every element
// written). In the causal selection's layout this is also the dense stage's logits [N, T].
Status indexerScoresCuda(cudaStream_t stream, const IndexerDims& dims, const float* q,
                         const float* k, const float* w, float* scores);

// indexerLogits: logits [N, W] fp32 = I[t, selected[n, slot]] on valid slots, 0 on padding.
// Bitwise equal to the matching entries of indexerScoresCuda.
Status indexerLogitsCuda(cudaStream_t stream, const IndexerDims& dims, const float* q,
                         const float* k, const float* w, const int32_t* selected, int64_t width,
                         float* logits);

// indexerKlForward: probs [N, W] (softmax of each row's valid logits, 0 on padding) and
// klSum [1] = sum over rows of KL(target || probs) (rows in fp32, the row sum in double).
Status indexerKlForwardCuda(CudaContext& context, const float* logits, const float* target,
                            const int32_t* selected, int64_t n, int64_t width, float* probs,
                            float* klSum);

// indexerKlBackward: dLogits [N, W] = scale (probs - target) on valid slots, 0 on padding.
Status indexerKlBackwardCuda(cudaStream_t stream, const float* probs, const float* target,
                             const int32_t* selected, int64_t n, int64_t width, double scale,
                             float* dLogits);

// The transposed selection on the device (SelectionTranspose): the entries of key token m are
// entries[keyStart[m] .. keyStart[m + 1]), each query token * W + slot, ascending query order.
struct SelectionTransposeCuda {
  DeviceTensor<int32_t> keyStart;  // [N + 1]
  DeviceTensor<int32_t> entries;   // [N * W] (the valid ones first; the rest undefined)
};

// indexerBackward: adds the gradients of sum dLogits[n, slot] logits[n, slot] into `grads`.
// x [N, D] bf16, selected [N, W] and its transpose `byKey` (transposeSelectionCuda).
Status indexerBackwardCuda(CudaContext& context, const IndexerDims& dims, const bf16* x,
                           const IndexerSavedCuda& saved, const int32_t* selected, int64_t width,
                           const SelectionTransposeCuda& byKey, const float* dLogits,
                           const IndexerWeightsCuda& weights, const IndexerGradsCuda& grads);

// ---------------------------------------------------------------------------------------------
// Selection (selection_cuda.cu)

// causalSelection: selected [B*T, T], row t = 0..t then -1.
Status causalSelectionCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, int32_t* selected);

// indexerTopK over dense scores [N, T] (indexerScoresCuda): selected [N, W], W = min(topK, T);
// per row topKRow(scores row, t + 1, W, ...): the min(t+1, W) largest of s <= t, ties toward the
// lower position, ascending, then -1. Scores must be finite. One CTA per row.
Status indexerTopKCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, const float* scores,
                       int64_t topK, int32_t* selected);

// transposeSelection of selected [N, W] for sequences of seqLen; allocates `out` (kWorkspace).
Status transposeSelectionCuda(CudaContext& context, const int32_t* selected, int64_t n,
                              int64_t width, int64_t seqLen, SelectionTransposeCuda& out);

// ---------------------------------------------------------------------------------------------
// Core (sparse_attention_core_cuda.cu)

// sparseAttentionCoreForward: q [N, H*dh], k, v [N, Hkv*dh] bf16, sink [H] bf16, selected
// [N, W] -> probs [N, H, W] fp32 (0 on padding), sinkProbs [N, H] fp32, context [N, H*dh] bf16.
Status sparseAttentionCoreForwardCuda(cudaStream_t stream, const SparseAttentionDims& dims,
                                      const bf16* q, const bf16* k, const bf16* v, const bf16* sink,
                                      const int32_t* selected, int64_t width, float* probs,
                                      float* sinkProbs, bf16* context);

// Saved tensors the core backward reads (device pointers of the forward).
struct SparseCoreSavedView {
  const bf16* q;            // [N, H*dh]
  const bf16* k;            // [N, Hkv*dh]
  const bf16* v;            // [N, Hkv*dh]
  const bf16* context;      // [N, H*dh]
  const int32_t* selected;  // [N, W]
  int64_t width;            // W
  const float* probs;       // [N, H, W]
  const float* sinkProbs;   // [N, H]
};

// sparseAttentionCoreBackward: dq [N, H*dh], dk, dv [N, Hkv*dh] bf16 (overwritten) from dContext
// [N, H*dh]; ADDS the sink gradient into dSink [H] (fp32). dk/dv per key in a fixed order: for
// dh 64 / 128 per query span (max(1024, ceil(T / 8)) tokens) in query order, the spans' fp32
// partials added in span order (workspace 2 parts N Hkv dh floats; `byKey` unused); otherwise
// over the (query, slot) pairs of `byKey` in query order, each kv head summing its query heads
// in order.
Status sparseAttentionCoreBackwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                       const bf16* dContext, const SparseCoreSavedView& saved,
                                       const SelectionTransposeCuda& byKey, bf16* dq, bf16* dk,
                                       bf16* dv, float* dSink);

// indexerTargetFromProbs: target [N, W] fp32 = per row sum over heads of probs [N, H, W],
// normalised over the valid slots (0 on padding).
Status indexerTargetFromProbsCuda(cudaStream_t stream, const float* probs, const int32_t* selected,
                                  int64_t n, int64_t heads, int64_t width, float* target);

// Output gate (sparse_attention_core_cuda.cu), over n = N * H*dh elements: gate = sigmoid(gatePre)
// (fp32, stored bf16; gatePre may alias gate) and gated = context * gate.
Status sparseGateForwardCuda(cudaStream_t stream, const bf16* gatePre, const bf16* context,
                             int64_t n, bf16* gate, bf16* gated);

// Gate backward: dGatePre = dGated context gate (1 - gate), dContext = dGated gate.
Status sparseGateBackwardCuda(cudaStream_t stream, const bf16* dGated, const bf16* context,
                              const bf16* gate, int64_t n, bf16* dGatePre, bf16* dContext);

// kl[0] = klSum[0] / tokens (0 when tokens == 0), loss[0] = coef * kl[0].
Status sparseIndexerLossCuda(cudaStream_t stream, const float* klSum, int64_t tokens, double coef,
                             float* kl, float* loss);

// ---------------------------------------------------------------------------------------------
// Layer (sparse_attention_layer_cuda.cpp)

// Device views of the layer's bf16 compute weights (shapes as SparseAttentionWeights).
struct SparseAttentionWeightsCuda {
  const bf16* wq;          // [H*dh, D]
  const bf16* wk;          // [Hkv*dh, D]
  const bf16* wv;          // [Hkv*dh, D]
  const bf16* wo;          // [D, H*dh]
  const bf16* wgate;       // [H*dh, D]
  const bf16* sink;        // [H]
  const bf16* wqI;         // [HI*dI, D]
  const bf16* wkI;         // [dI, D]
  const bf16* kINormGain;  // [dI]
  const bf16* kINormBias;  // [dI]
  const bf16* ww;          // [HI, D]
  IndexerWeightsCuda indexer() const { return {wqI, wkI, kINormGain, kINormBias, ww}; }
};

// fp32 gradients, same fields and shapes; the backward ADDS into them.
struct SparseAttentionGradsCuda {
  float* wq;
  float* wk;
  float* wv;
  float* wo;
  float* wgate;
  float* sink;
  float* wqI;
  float* wkI;
  float* kINormGain;
  float* kINormBias;
  float* ww;
  IndexerGradsCuda indexer() const { return {wqI, wkI, kINormGain, kINormBias, ww}; }
};

// SparseAttentionSaved on the device (kActivations).
struct SparseAttentionSavedCuda {
  DeviceTensor<bf16> q;               // [N, H*dh]
  DeviceTensor<bf16> k;               // [N, Hkv*dh]
  DeviceTensor<bf16> v;               // [N, Hkv*dh]
  DeviceTensor<bf16> gate;            // [N, H*dh] sigmoid(x Wgate^T)
  DeviceTensor<bf16> context;         // [N, H*dh] attention output before the gate
  DeviceTensor<bf16> gated;           // [N, H*dh] context ⊙ gate, the input of Wo
  DeviceTensor<int32_t> selected;     // [N, W]
  DeviceTensor<float> probs;          // [N, H, W]
  DeviceTensor<float> sinkProbs;      // [N, H]
  IndexerSavedCuda indexer;           // indexer activations
  DeviceTensor<float> indexerProbs;   // [N, W] softmax of the indexer logits over the selection
  DeviceTensor<float> indexerTarget;  // [N, W] p*, detached
  DeviceTensor<float> indexerKl;      // [1] mean over query tokens of KL(p* || indexerProbs)
  DeviceTensor<float> indexerLoss;    // [1] indexerLossCoef * indexerKl (the aux loss to report)
};

// sparseAttentionForward: y [N, D] bf16 (preallocated) for x [N, D]; allocates and fills
// `saved`, including the KL and the weighted aux loss as [1] fp32 device tensors (read them once
// per step). dims.stage picks the causal (dense warm-up) or top-k (sparse) selection.
// Errors: kInvalidArgument (shapes, limits above), kResourceExhausted, kInternal.
Status sparseAttentionForwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                  const bf16* x, const SparseAttentionWeightsCuda& weights,
                                  SparseAttentionSavedCuda& saved, bf16* y);

// sparseAttentionBackward of (dy . y + indexerLoss): dx [N, D] bf16 (overwritten, or added into
// when accumulateDx; LM path only) and every weight gradient ADDED into `grads`. The indexer
// grads are untouched when indexerLossCoef == 0. `x`, `saved` are those of the forward.
Status sparseAttentionBackwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                   const bf16* dy, const bf16* x,
                                   const SparseAttentionWeightsCuda& weights,
                                   const SparseAttentionSavedCuda& saved,
                                   const SparseAttentionGradsCuda& grads, bf16* dx,
                                   bool accumulateDx = false);

}  // namespace moewb::engine::cuda
