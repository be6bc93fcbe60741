// The KDA token mixer (ENGINE-MATH §2.1) as one layer-level op, like attentionForward /
// attentionBackward. Per token x [D] (heads are column blocks of width K, HV = H, V = K):
//   q = L2Norm_h(SiLU(conv(x Wq^T))) K^-1/2,  k = L2Norm_h(SiLU(conv(x Wk^T))),
//   v = SiLU(conv(x Wv^T))                                          [N, H*K] each
//   f = (x Wf1^T) Wf2^T;  g = gate(f; A_log, dt_bias)               [N, H*K] (kda_gate.h)
//   beta = sigmoid(x Wb^T)                                          [N, H]
//   o = KDA core (chunked form, zero initial state per sequence)    [N, H*K] (kda.h)
//   ctx_h = RMSNorm_h(o_h) * normWeight * sigmoid(gate_h),  gate = (x Wg1^T) Wg2^T + bg
//   y = ctx Wo^T                                                    [N, D]
// The weights are owned by the caller and only read (KdaWeights) or accumulated into (KdaGrads).
// kdaParameterShapes lists every weight with its shape and weight-decay flag in one fixed order,
// and kdaInitialize draws them (fla's init) in that order.
// Costs per layer, with R = gate rank and P = H*K: forward 2 N D (3P + 2R + H + P) + 4 N R P
// flops for the projections, O(N P W) for the convs, and per head O(T C K + T K V) for the core
// (C = chunk); the backward about twice that. The forward keeps about 16 [N, P] tensors plus
// 2 [B*H, T', C] (T' = T rounded up to C) for the backward.
// Threading: every step is either row-parallel or reduces in a fixed order (linear.h, kda.h,
// kda_gate.h), so results are bit-identical for any thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/kda/kda.h"
#include "ops/kda/kda_gate.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct KdaDims {
  int64_t batch = 0;       // sequences B
  int64_t seqLen = 0;      // tokens per sequence T
  int64_t dModel = 0;      // D
  int64_t numHeads = 0;    // H (q/k and value heads)
  int64_t headDim = 0;     // K = V
  int64_t chunk = 64;      // C, tokens per chunk of the core
  int64_t convKernel = 4;  // W, short-conv taps
  int64_t gateRank = 0;    // R, bottleneck of the f and output-gate projections; 0 = headDim
  KdaGateKind gate = KdaGateKind::kDefault;
  double lowerBound = -5.0;  // lb of KdaGateKind::kLowerBound
  double normEps = 1e-5;     // output RMSNorm epsilon
  double l2Eps = 1e-6;       // q / k L2-norm epsilon

  int64_t tokens() const { return batch * seqLen; }
  int64_t innerDim() const { return numHeads * headDim; }  // P = H*K
  int64_t rank() const { return gateRank > 0 ? gateRank : headDim; }
  KdaCoreDims coreDims() const {
    return {batch, seqLen, numHeads, numHeads, headDim, headDim, chunk};
  }
  KdaGateParams gateParams() const { return {gate, lowerBound, numHeads, headDim}; }
};

// Read-only views of the layer's weights (P = H*K, R = gate rank).
template <typename T>
struct KdaWeights {
  const Tensor<T>& wq;          // [P, D]
  const Tensor<T>& wk;          // [P, D]
  const Tensor<T>& wv;          // [P, D]
  const Tensor<T>& convQ;       // [P, W]
  const Tensor<T>& convK;       // [P, W]
  const Tensor<T>& convV;       // [P, W]
  const Tensor<T>& wf1;         // [R, D]
  const Tensor<T>& wf2;         // [P, R]
  const Tensor<T>& aLog;        // [H]
  const Tensor<T>& dtBias;      // [P]
  const Tensor<T>& wb;          // [H, D]
  const Tensor<T>& wg1;         // [R, D]
  const Tensor<T>& wg2;         // [P, R]
  const Tensor<T>& bg;          // [P]
  const Tensor<T>& normWeight;  // [K]
  const Tensor<T>& wo;          // [D, P]
};

// Mutable views with the same fields and shapes: gradients (accumulated, +=) or, for
// kdaInitialize, the weights themselves.
template <typename T>
struct KdaGrads {
  Tensor<T>& wq;
  Tensor<T>& wk;
  Tensor<T>& wv;
  Tensor<T>& convQ;
  Tensor<T>& convK;
  Tensor<T>& convV;
  Tensor<T>& wf1;
  Tensor<T>& wf2;
  Tensor<T>& aLog;
  Tensor<T>& dtBias;
  Tensor<T>& wb;
  Tensor<T>& wg1;
  Tensor<T>& wg2;
  Tensor<T>& bg;
  Tensor<T>& normWeight;
  Tensor<T>& wo;
};

// Activations kept by kdaForward for kdaBackward (P = H*K, R = gate rank).
template <typename T>
struct KdaSaved {
  Tensor<T> qProj, kProj, vProj;  // [N, P] x W^T, inputs of the convs
  Tensor<T> qConv, kConv, vConv;  // [N, P] conv outputs before SiLU
  Tensor<T> qAct, kAct;           // [N, P] after SiLU, inputs of the L2 norms
  Tensor<T> qRinv, kRinv;         // [N, H] 1 / L2 norms
  Tensor<T> q, k, v;              // [N, P] core inputs (q scaled by K^-1/2)
  Tensor<T> fLow;                 // [N, R] x Wf1^T
  Tensor<T> f;                    // [N, P] gate input
  Tensor<T> g;                    // [N, P] log decay
  Tensor<T> beta;                 // [N, H]
  KdaChunkSaved<T> core;          // Aqk and M per chunk
  Tensor<T> o;                    // [N, P] core output
  Tensor<T> oRstd;                // [N, H] output RMSNorm 1/rms
  Tensor<T> gLow;                 // [N, R] x Wg1^T
  Tensor<T> gate;                 // [N, P] output gate before sigmoid
  Tensor<T> ctx;                  // [N, P] input of Wo
};

// Returns y [N, D] for x [N, D]; fills `saved`. Sequences start from a zero state.
template <typename T>
Tensor<T> kdaForward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& x,
                     const KdaWeights<T>& weights, KdaSaved<T>& saved);

// Returns dx [N, D] for dy [N, D]; adds every weight gradient into `grads`. `x` and `saved`
// are those of the matching kdaForward.
template <typename T>
Tensor<T> kdaBackward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& dy,
                      const Tensor<T>& x, const KdaWeights<T>& weights, const KdaSaved<T>& saved,
                      const KdaGrads<T>& grads);

struct KdaParameterShape {
  std::string name;            // "wq", "conv_q", ..., the suffix for "layers.<l>.kda.<name>"
  std::vector<int64_t> shape;  // rank 1 or 2
  bool decay = true;           // AdamW weight decay (false: a_log, dt_bias, bg, norm_weight)
};

// Every weight of the layer, in the order of the KdaWeights fields.
std::vector<KdaParameterShape> kdaParameterShapes(const KdaDims& dims);

// A zero tensor of a listed shape (Tensor has no vector-shape constructor).
template <typename T>
Tensor<T> kdaMakeTensor(const KdaParameterShape& shape);

// Draws one weight (looked up by its kdaParameterShapes name) with fla's init: matrices and conv
// taps ~ N(0, initStd), wo ~ N(0, initStd / sqrt(2 numLayers)) (the model's residual-output
// rule), bg = 0, normWeight = 1, A_log = log U[1, 16] (default gate) or 0 (lower bound),
// dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] (clamped >= 1e-4).
template <typename T>
void kdaInitializeParameter(const KdaDims& dims, const std::string& name, Rng& rng, double initStd,
                            int64_t numLayers, Tensor<T>& value);

// Draws every weight in kdaParameterShapes order (same rng => same weights).
template <typename T>
void kdaInitialize(const KdaDims& dims, Rng& rng, double initStd, int64_t numLayers,
                   const KdaGrads<T>& weights);

// An owning set of the layer's weights, for tests, benchmarks and standalone use.
template <typename T>
struct KdaParameterSet {
  explicit KdaParameterSet(const KdaDims& dims);
  std::vector<Tensor<T>> tensors;  // in kdaParameterShapes order
  KdaWeights<T> weights() const;
  KdaGrads<T> refs();
};

}  // namespace moewb::engine
