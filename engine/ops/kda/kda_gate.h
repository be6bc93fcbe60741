// The element-wise and per-head pieces around the KDA core (ENGINE-MATH §2.1, §2.5 tail):
//   forget gate   g = -exp(A_log[h]) softplus(f + dt_bias)        (kDefault, g < 0)
//                 g = lb sigmoid(exp(A_log[h]) (f + dt_bias))      (kLowerBound, lb < g < 0)
//   short conv    y[t, c] = SiLU(sum_{j<W} w[c, j] x[t - W + 1 + j, c]), causal, depthwise, no
//                 bias, zero history at each sequence start (PyTorch Conv1d weight [C, 1, W]
//                 layout: w[c, W-1] multiplies the current token)
//   L2 norm       y = scale x / sqrt(sum_head x^2 + eps) per (token, head)
// Layouts: token n = b * T + t; per-head values are column blocks of width K ([N, H*K]).
// A_log is per head ([H]) in both gate variants; dt_bias is per channel ([H*K]).
// Costs: O(N H K) each (conv O(N C W)). Rows or channel tiles run in parallel; every reduction
// over tokens (dA_log, dt_bias, conv weights) runs in token order inside one task per output, so
// results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

enum class KdaGateKind {
  kDefault,     // -exp(A_log) * softplus(f + dt_bias)
  kLowerBound,  // lb * sigmoid(exp(A_log) * (f + dt_bias)), the "safe gate"
};

struct KdaGateParams {
  KdaGateKind kind = KdaGateKind::kDefault;
  double lowerBound = -5.0;  // lb of kLowerBound (< 0)
  int64_t numHeads = 0;      // H
  int64_t headDim = 0;       // K
};

// Returns g [N, H*K] from f [N, H*K], aLog [H], dtBias [H*K].
template <typename T>
Tensor<T> kdaGateForward(ThreadPool& pool, const KdaGateParams& params, const Tensor<T>& f,
                         const Tensor<T>& aLog, const Tensor<T>& dtBias);

// Returns df [N, H*K] given dg [N, H*K]; `g` is the forward's output. Adds into dALog [H] and
// dDtBias [H*K].
template <typename T>
Tensor<T> kdaGateBackward(ThreadPool& pool, const KdaGateParams& params, const Tensor<T>& dg,
                          const Tensor<T>& f, const Tensor<T>& g, const Tensor<T>& aLog,
                          const Tensor<T>& dtBias, Tensor<T>& dALog, Tensor<T>& dDtBias);

// Short causal depthwise conv + SiLU over x [B*T, Ch] with weights w [Ch, W]. Returns y [N, Ch]
// and writes the conv output before SiLU into preActivation [N, Ch] (needed by the backward).
template <typename T>
Tensor<T> kdaShortConvForward(ThreadPool& pool, int64_t batch, int64_t seqLen, const Tensor<T>& x,
                              const Tensor<T>& w, Tensor<T>& preActivation);

// Returns dx [N, Ch] given dy [N, Ch] (gradient of the SiLU output); adds into dw [Ch, W].
template <typename T>
Tensor<T> kdaShortConvBackward(ThreadPool& pool, int64_t batch, int64_t seqLen, const Tensor<T>& dy,
                               const Tensor<T>& x, const Tensor<T>& w,
                               const Tensor<T>& preActivation, Tensor<T>& dw);

// Per-head L2 normalisation of x [N, H*K] times `scale`; writes rinv [N, H] = 1/sqrt(|x_h|^2+eps).
template <typename T>
Tensor<T> kdaL2NormForward(ThreadPool& pool, int64_t headDim, double scale, double eps,
                           const Tensor<T>& x, Tensor<T>& rinv);

// Returns dx [N, H*K] = scale (dy - y (y·dy)) rinv per head, y = x rinv.
template <typename T>
Tensor<T> kdaL2NormBackward(ThreadPool& pool, int64_t headDim, double scale, const Tensor<T>& dy,
                            const Tensor<T>& x, const Tensor<T>& rinv);

}  // namespace moewb::engine
