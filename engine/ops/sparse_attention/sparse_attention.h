// Gated sparse attention layer (ENGINE-MATH §3, "Gated DSA" at our scale): GQA/MQA softmax
// attention where each query attends only to the keys its lightning indexer selects, with a
// learnable per-head sink logit and an elementwise sigmoid output gate computed from the layer
// input. No RoPE; scale 1/sqrt(dh).
//
//   q = x Wq^T [N, H dh];  k = x Wk^T, v = x Wv^T [N, Hkv dh]; query head h reads kv head
//   h / (H / Hkv) (Hkv = 1 is MQA: one key per token, shared like the selection itself).
//   Sel_t = causal keys (stage kDenseWarmup) or TopK_s I[t, s] of the indexer (stage kSparse).
//   p[t,h,s] = exp(z - m) / (sum_{s' in Sel_t} exp(z' - m) + exp(sink_h - m)),  z = q.k / sqrt(dh)
//   o[t,h] = sum_s p v;  y = (concat_h o ⊙ sigmoid(x Wgate^T)) Wo^T.
// Indexer objective (§3.5): p*_t = normalize over Sel_t of sum_h p[t,h,:] (detached), and
//   L_I = indexerLossCoef * mean over the N query tokens of KL(p*_t || softmax_{Sel_t} I[t, :]).
// In the dense stage Sel_t is every causal key, so this is the warm-up objective; in the sparse
// stage it is the top-k one with p* renormalised over Sel_t (the sink's mass is dropped by the
// normalisation in both stages). Freezing the non-indexer weights during warm-up, as DeepSeek-V3.2
// does, is the trainer's choice; this op trains whatever gradients the caller applies.
// Gradient routing: the LM loss (dy) reaches x, Wq, Wk, Wv, Wo, Wgate and the sink, never the
// indexer (the top-k is piecewise constant); L_I reaches the indexer weights only (its input x
// and its target are detached). backward() adds both; the caller adds saved.indexerLoss to the
// loss it reports and optimises.
// Costs (N = B T tokens, W = keys per query: T dense, min(k, T) sparse): projections
// 2 N D (3 H dh + 2 Hkv dh) flops forward, twice that backward; core 4 N H W dh forward and
// ~8 N H W dh backward, gathered per (query, selected key), so it scales with W, not T; indexer
// GEMMs of ~N T HI dI flops per scoring pass over all causal keys (indexer.h). Saved:
// N (5 H dh + 2 Hkv dh + H W + 3 W + H) values plus the indexer's. Work is split by token ranges
// or tiles that depend only on the sizes, and every reduction has a fixed order: results are
// identical for any thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/sparse_attention/indexer.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

enum class SparseStage {
  kDenseWarmup,  // attention over all causal keys; the indexer learns to imitate it
  kSparse,       // attention over the indexer's top-k keys
};

struct SparseAttentionDims {
  int64_t batch = 0;         // sequences B
  int64_t seqLen = 0;        // tokens per sequence T
  int64_t dModel = 0;        // layer width D
  int64_t numHeads = 0;      // query heads H
  int64_t kvHeads = 0;       // key/value heads Hkv, H % Hkv == 0 (1 = MQA)
  int64_t headDim = 0;       // dh
  int64_t indexerHeads = 0;  // HI
  int64_t indexerDim = 0;    // dI
  int64_t topK = 0;          // keys per query in the sparse stage (>= 1)
  SparseStage stage = SparseStage::kSparse;
  double indexerLossCoef = 0;    // weight of the mean-over-tokens indexer KL
  double indexerNormEps = 1e-6;  // LayerNorm epsilon of the indexer key

  int64_t tokens() const { return batch * seqLen; }
  int64_t qWidth() const { return numHeads * headDim; }  // H dh
  int64_t kvWidth() const { return kvHeads * headDim; }  // Hkv dh
  // Keys per query row of a selection: T (dense stage) or min(topK, T).
  int64_t selectionWidth() const;
  IndexerDims indexerDims() const;
};

template <typename T>
struct SparseAttentionWeights {
  const Tensor<T>& wq;          // [H*dh, D]
  const Tensor<T>& wk;          // [Hkv*dh, D]
  const Tensor<T>& wv;          // [Hkv*dh, D]
  const Tensor<T>& wo;          // [D, H*dh]
  const Tensor<T>& wgate;       // [H*dh, D]
  const Tensor<T>& sink;        // [H] sink logits kappa_h
  const Tensor<T>& wqI;         // [HI*dI, D]
  const Tensor<T>& wkI;         // [dI, D]
  const Tensor<T>& kINormGain;  // [dI]
  const Tensor<T>& kINormBias;  // [dI]
  const Tensor<T>& ww;          // [HI, D]
  IndexerWeights<T> indexer() const { return {wqI, wkI, kINormGain, kINormBias, ww}; }
};

template <typename T>
struct SparseAttentionGrads {
  Tensor<T>& wq;          // [H*dh, D], accumulated
  Tensor<T>& wk;          // [Hkv*dh, D]
  Tensor<T>& wv;          // [Hkv*dh, D]
  Tensor<T>& wo;          // [D, H*dh]
  Tensor<T>& wgate;       // [H*dh, D]
  Tensor<T>& sink;        // [H]
  Tensor<T>& wqI;         // [HI*dI, D], from the indexer loss only
  Tensor<T>& wkI;         // [dI, D]
  Tensor<T>& kINormGain;  // [dI]
  Tensor<T>& kINormBias;  // [dI]
  Tensor<T>& ww;          // [HI, D]
  IndexerGrads<T> indexer() const { return {wqI, wkI, kINormGain, kINormBias, ww}; }
};

template <typename T>
struct SparseAttentionSaved {
  Tensor<T> q;               // [N, H*dh]
  Tensor<T> k;               // [N, Hkv*dh]
  Tensor<T> v;               // [N, Hkv*dh]
  Tensor<T> gate;            // [N, H*dh] sigmoid(x Wgate^T)
  Tensor<T> context;         // [N, H*dh] attention output o, before the gate
  Tensor<T> gated;           // [N, H*dh] o ⊙ gate, the input of Wo
  Tensor<int32_t> selected;  // [N, W] key positions per query (selection.h)
  Tensor<T> probs;           // [N, H, W] attention probabilities of the selected keys
  Tensor<T> sinkProbs;       // [N, H] probability mass on the sink
  IndexerSaved<T> indexer;   // indexer activations
  Tensor<T> indexerProbs;    // [N, W] softmax of the indexer logits over the selection
  Tensor<T> indexerTarget;   // [N, W] p*, detached
  double indexerKl = 0;      // mean over query tokens of KL(p* || indexerProbs), nats
  double indexerLoss = 0;    // indexerLossCoef * indexerKl, to add to the training loss
};

// Core attention over a selection: from q [N, H*dh], k, v [N, Hkv*dh], sink [H] and
// selected [N, W] computes probs [N, H, W], sinkProbs [N, H] and context [N, H*dh].
template <typename T>
void sparseAttentionCoreForward(ThreadPool& pool, const SparseAttentionDims& dims,
                                const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                const Tensor<T>& sink, const Tensor<int32_t>& selected,
                                Tensor<T>& probs, Tensor<T>& sinkProbs, Tensor<T>& context);

// Core backward: from dContext [N, H*dh] returns dq [N, H*dh], dk, dv [N, Hkv*dh] (overwritten)
// and adds the sink gradient into dSink [H]. dk/dv are accumulated per key over the queries that
// selected it, in query order.
template <typename T>
void sparseAttentionCoreBackward(ThreadPool& pool, const SparseAttentionDims& dims,
                                 const Tensor<T>& dContext, const SparseAttentionSaved<T>& saved,
                                 Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv, Tensor<T>& dSink);

// p*: per query row, sum over heads of probs [N, H, W], normalised over the valid slots -> [N, W].
template <typename T>
Tensor<T> indexerTargetFromProbs(ThreadPool& pool, const Tensor<T>& probs,
                                 const Tensor<int32_t>& selected);

// Full layer: returns y [N, D], fills `saved` (including indexerKl and indexerLoss).
template <typename T>
Tensor<T> sparseAttentionForward(ThreadPool& pool, const SparseAttentionDims& dims,
                                 const Tensor<T>& x /*[N, D]*/,
                                 const SparseAttentionWeights<T>& weights,
                                 SparseAttentionSaved<T>& saved);

// Full layer backward of (dy . y + saved.indexerLoss): returns dx [N, D] (LM path only, the
// indexer input being detached) and adds every weight gradient into `grads`. When
// indexerLossCoef == 0 the indexer grads are left untouched.
template <typename T>
Tensor<T> sparseAttentionBackward(ThreadPool& pool, const SparseAttentionDims& dims,
                                  const Tensor<T>& dy /*[N, D]*/, const Tensor<T>& x /*[N, D]*/,
                                  const SparseAttentionWeights<T>& weights,
                                  const SparseAttentionSaved<T>& saved,
                                  const SparseAttentionGrads<T>& grads);

struct SparseAttentionParamShape {
  std::string name;            // local name: "wq", ..., "indexer.k_norm.gain"
  std::vector<int64_t> shape;  // as in SparseAttentionWeights
  bool decay = true;           // weight decay: matrices yes; sink, gain, bias no
};

// The layer's parameters in SparseAttentionWeights order: wq, wk, wv, wo, wgate, sink,
// indexer.wq, indexer.wk, indexer.k_norm.gain, indexer.k_norm.bias, indexer.ww.
std::vector<SparseAttentionParamShape> sparseAttentionParameterShapes(
    const SparseAttentionDims& dims);

// Initialises one parameter named as in sparseAttentionParameterShapes: matrices ~ N(0, initStd)
// drawn from `rng` in element order, wo ~ N(0, initStd / sqrt(2 numLayers)), sink 0, the key
// norm's gain 1 and bias 0 (no draws for those). Aborts on an unknown name.
template <typename T>
void initSparseAttentionParameter(const std::string& name, Tensor<T>& value, double initStd,
                                  int64_t numLayers, Rng& rng);

}  // namespace moewb::engine
