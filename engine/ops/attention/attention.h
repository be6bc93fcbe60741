// Causal multi-head softmax attention with Q, K, V, O projections (weights [D, D] each,
// y = x W^T). Per sequence b and head h, with q, k, v the head's [T, K] slices:
//   S = q k^T / sqrt(K), masked to s <= t;  P = softmax_rows(S) (max subtracted);  o = P v;
//   y = concat_h(o) Wo^T.
// Backward (ENGINE-MATH §3.4 without sink/gate/top-k): dctx = dy Wo, dWo += dy^T ctx;
//   dP = do v^T, dv = P^T do, dS = P ⊙ (dP - rowsum(P ⊙ dP)), dq = dS k / sqrt(K),
//   dk = dS^T q / sqrt(K); dx = dq Wq + dk Wk + dv Wv, dW* += d*^T x.
// Heads live in column blocks of the [N, D] projections (head h = columns h*K .. h*K+K-1), and
// token n = b*T + t. Costs: 8 N D^2 (projections) + 4 B H T^2 K (core) flops forward, about twice
// that backward; P is stored as [B, H, T, T]. The core runs one task per (b, h).
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct AttentionDims {
  int64_t batch = 0;     // sequences B
  int64_t seqLen = 0;    // tokens per sequence T
  int64_t numHeads = 0;  // heads H
  int64_t headDim = 0;   // K; D = H * K
  int64_t dModel() const { return numHeads * headDim; }
  int64_t tokens() const { return batch * seqLen; }
};

template <typename T>
struct AttentionWeights {
  const Tensor<T>& wq;  // [D, D]
  const Tensor<T>& wk;  // [D, D]
  const Tensor<T>& wv;  // [D, D]
  const Tensor<T>& wo;  // [D, D]
};

template <typename T>
struct AttentionGrads {
  Tensor<T>& wq;  // [D, D], accumulated
  Tensor<T>& wk;  // [D, D]
  Tensor<T>& wv;  // [D, D]
  Tensor<T>& wo;  // [D, D]
};

template <typename T>
struct AttentionSaved {
  Tensor<T> q;        // [N, D]
  Tensor<T> k;        // [N, D]
  Tensor<T> v;        // [N, D]
  Tensor<T> probs;    // [B, H, T, T] softmax rows, zero above the diagonal
  Tensor<T> context;  // [N, D] concatenated head outputs (the input of Wo)
};

// Core only: from q, k, v [N, D] computes probs [B, H, T, T] and context [N, D].
template <typename T>
void attentionCoreForward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, Tensor<T>& probs,
                          Tensor<T>& context);

// Core backward: from dContext [N, D] returns dq, dk, dv [N, D] (overwritten).
template <typename T>
void attentionCoreBackward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& dContext,
                           const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                           const Tensor<T>& probs, Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv);

// Full layer: returns y[N, D] and fills `saved`.
template <typename T>
Tensor<T> attentionForward(ThreadPool& pool, const AttentionDims& dims,
                           const Tensor<T>& x /*[N, D]*/, const AttentionWeights<T>& weights,
                           AttentionSaved<T>& saved);

// Full layer backward: returns dx[N, D]; adds the weight gradients into `grads`.
template <typename T>
Tensor<T> attentionBackward(ThreadPool& pool, const AttentionDims& dims,
                            const Tensor<T>& dy /*[N, D]*/, const Tensor<T>& x /*[N, D]*/,
                            const AttentionWeights<T>& weights, const AttentionSaved<T>& saved,
                            const AttentionGrads<T>& grads);

}  // namespace moewb::engine
