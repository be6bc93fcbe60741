// Lightning indexer of DeepSeek sparse attention (ENGINE-MATH §3.2) and its KL training
// objective (§3.5), at our scale: the indexer reads the layer input x directly (no MLA latent).
//
//   qI[n, j] = (x[n] WqI^T)_j                     j < HI heads of width dI
//   kI[n]    = LayerNorm(x[n] WkI^T) * gain + bias  ONE key per token, shared by all heads
//   wI[n, j] = (x[n] Ww^T)_j * HI^-0.5
//   I[t, s]  = sum_j wI[t, j] * dI^-0.5 * ReLU(qI[t, j] . kI[s])      for s <= t
// The key norm is a LayerNorm with gain and bias (as in DeepSeek-V3.2's Indexer.k_norm), eps
// IndexerDims::normEps, statistics in the tensor precision.
// Selection: per query the top-k keys of I[t, :] over s <= t (all of them when t+1 <= k), ties
// toward the lower position (selection.h).
// KL objective over a selection (dense warm-up: the causal one; sparse stage: the top-k):
//   pI_t = softmax over the row's keys of I[t, :];  KL_t = sum_s p*_t,s (log p*_t,s - log pI_t,s)
// with the target p* given (detached; the layer builds it from the attention probabilities).
// Gradient: dI[t, s] = scale * (pI_t,s - p*_t,s); it flows into WqI, WkI, gain, bias and Ww
// only: the indexer's input x is detached, so indexerBackward returns no dx.
// Costs (N tokens, W selected keys per query): projections 2 N D (HI dI + dI + HI) flops each
// way. Scores are a GEMM per (sequence, 16-query tile) over all keys before the tile's end, about
// N T HI dI flops per scoring pass: one pass for the top-k and one for the logits in the sparse
// stage, one in the dense stage; the backward repeats that GEMM and adds two of the same size (dqI,
// dkI), plus O(N W HI) for the selected entries. Saved: N (HI dI + 2 dI + HI + 1) values.
// Parallel over (sequence, tile) forward and over sequences backward (dkI accumulates tile by
// tile in order); every reduction has a fixed order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct IndexerDims {
  int64_t batch = 0;      // sequences B
  int64_t seqLen = 0;     // tokens per sequence T
  int64_t dModel = 0;     // input width D
  int64_t numHeads = 0;   // indexer heads HI
  int64_t headDim = 0;    // indexer head width dI
  double normEps = 1e-6;  // LayerNorm epsilon of the key
  int64_t tokens() const { return batch * seqLen; }
};

template <typename T>
struct IndexerWeights {
  const Tensor<T>& wq;        // [HI*dI, D]
  const Tensor<T>& wk;        // [dI, D]
  const Tensor<T>& normGain;  // [dI]
  const Tensor<T>& normBias;  // [dI]
  const Tensor<T>& ww;        // [HI, D]
};

template <typename T>
struct IndexerGrads {
  Tensor<T>& wq;        // [HI*dI, D], accumulated
  Tensor<T>& wk;        // [dI, D]
  Tensor<T>& normGain;  // [dI]
  Tensor<T>& normBias;  // [dI]
  Tensor<T>& ww;        // [HI, D]
};

template <typename T>
struct IndexerSaved {
  Tensor<T> q;     // [N, HI*dI] query heads
  Tensor<T> kHat;  // [N, dI] normalised key before gain and bias
  Tensor<T> rstd;  // [N] 1/sqrt(var + eps) of the key
  Tensor<T> k;     // [N, dI] the shared key
  Tensor<T> w;     // [N, HI] head weights, HI^-0.5 included
};

// Projections and the key LayerNorm: fills `saved` from x [N, D].
template <typename T>
void indexerForward(ThreadPool& pool, const IndexerDims& dims, const Tensor<T>& x,
                    const IndexerWeights<T>& weights, IndexerSaved<T>& saved);

// Top-k selection [N, min(topK, T)] of the indexer scores over s <= t (see selection.h).
template <typename T>
Tensor<int32_t> indexerTopK(ThreadPool& pool, const IndexerDims& dims, const IndexerSaved<T>& saved,
                            int64_t topK);

// Scores of the selected keys: logits[n, slot] = I[t, selected[n, slot]], 0 in padding slots.
template <typename T>
Tensor<T> indexerLogits(ThreadPool& pool, const IndexerDims& dims, const IndexerSaved<T>& saved,
                        const Tensor<int32_t>& selected /*[N, W]*/);

// Softmax of each row's valid logits into probs [N, W] (0 in padding) and KL(target || probs) per
// row. Returns sum over rows of the KL (accumulated in double, in row order). target [N, W]
// rows must be distributions over the valid slots (zeros allowed: 0 log 0 = 0).
template <typename T>
double indexerKlForward(ThreadPool& pool, const Tensor<T>& logits, const Tensor<T>& target,
                        const Tensor<int32_t>& selected, Tensor<T>& probs);

// d(scale * sum_rows KL)/dlogits = scale * (probs - target) on valid slots, 0 on padding.
template <typename T>
Tensor<T> indexerKlBackward(ThreadPool& pool, const Tensor<T>& probs, const Tensor<T>& target,
                            const Tensor<int32_t>& selected, double scale);

// Adds the gradients of sum_{n, slot} dLogits[n, slot] * logits[n, slot] into `grads`.
template <typename T>
void indexerBackward(ThreadPool& pool, const IndexerDims& dims, const Tensor<T>& x,
                     const IndexerSaved<T>& saved, const Tensor<int32_t>& selected,
                     const Tensor<T>& dLogits /*[N, W]*/, const IndexerWeights<T>& weights,
                     const IndexerGrads<T>& grads);

}  // namespace moewb::engine
