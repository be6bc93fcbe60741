// Grouped SwiGLU experts over a permuted token matrix (ENGINE-MATH §5.9): expert e owns the
// contiguous rows offsets[e] .. offsets[e+1]-1 of xPerm (possibly none) and computes
//   g = x Wg_e^T,  u = x Wu_e^T,  h = silu(g) ⊙ u,  y = h Wd_e^T,   silu(g) = g sigmoid(g).
// Backward: dh = dy Wd_e, dg = dh ⊙ u ⊙ silu'(g), du = dh ⊙ silu(g),
//   dx = dg Wg_e + du Wu_e, dWd_e += dy^T h, dWg_e += dg^T x, dWu_e += du^T x
//   (silu'(g) = s + g s (1 - s), s = sigmoid(g)); empty experts get no weight gradient.
// Work is split into fixed tasks: (expert, 64-row tile) for activations and input gradients,
// (expert, 16-row tile of a weight) for weight gradients, so results do not depend on the thread
// count. Costs: 6 R D F flops forward, 12 R D F backward (R = N k rows).
#pragma once

#include "runtime/thread_pool.h"
#include "tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct ExpertWeights {
  const Tensor<T>& gate;  // [E, F, D]
  const Tensor<T>& up;    // [E, F, D]
  const Tensor<T>& down;  // [E, D, F]
};

template <typename T>
struct ExpertGrads {
  Tensor<T>& gate;  // [E, F, D], accumulated
  Tensor<T>& up;    // [E, F, D]
  Tensor<T>& down;  // [E, D, F]
};

template <typename T>
struct ExpertsSaved {
  Tensor<T> gatePre;  // [R, F] g
  Tensor<T> upPre;    // [R, F] u
  Tensor<T> hidden;   // [R, F] h = silu(g) * u
};

// Returns yPerm[R, D]; `offsets` is the dispatch plan's [E + 1] row offsets.
template <typename T>
Tensor<T> expertsForward(ThreadPool& pool, const Tensor<T>& xPerm /*[R, D]*/,
                         const Tensor<int32_t>& offsets /*[E + 1]*/,
                         const ExpertWeights<T>& weights, ExpertsSaved<T>& saved);

// Returns dXPerm[R, D]; adds the weight gradients into `grads`.
template <typename T>
Tensor<T> expertsBackward(ThreadPool& pool, const Tensor<T>& dYPerm /*[R, D]*/,
                          const Tensor<T>& xPerm /*[R, D]*/, const Tensor<int32_t>& offsets,
                          const ExpertWeights<T>& weights, const ExpertsSaved<T>& saved,
                          const ExpertGrads<T>& grads);

}  // namespace moewb::engine
