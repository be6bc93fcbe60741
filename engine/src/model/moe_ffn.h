// The MoE FFN of one decoder layer as four explicit stages, each its own function so the model
// can trace them as separate phases (router -> permute -> experts -> combine, ENGINE-MATH §5):
//   router:  logits = x Wr^T [N, E]; top-k + selected-logit softmax weights; Switch aux loss
//   permute: dispatch plan (expert-major, stable) + gather of x rows   -> xPerm [N k, D]
//   experts: grouped SwiGLU per expert                                  -> yPerm [N k, D]
//   combine: y[t] = sum_j w[t, j] yPerm[row(t, j)]                      -> y [N, D]
// The backward stages run in reverse and pass their intermediate gradients through
// MoeBackwardState. moeFfnForward / moeFfnBackward chain the stages (used by tests and by any
// caller that does not trace). Costs: dominated by the experts (6 N k D F flops forward).
// Not thread-safe per instance; parallel inside through the pool.
#pragma once

#include <cstdint>

#include "ops/experts/experts.h"
#include "ops/permute/permute.h"
#include "ops/router/router.h"
#include "runtime/thread_pool.h"
#include "tensor/tensor.h"

namespace moewb::engine {

struct MoeOptions {
  int32_t topK = 2;           // experts per token
  double auxLossCoef = 0.01;  // alpha of the Switch aux loss (0 disables its gradient)
};

template <typename T>
struct MoeWeights {
  const Tensor<T>& router;  // [E, D]
  const Tensor<T>& gate;    // [E, F, D]
  const Tensor<T>& up;      // [E, F, D]
  const Tensor<T>& down;    // [E, D, F]
};

template <typename T>
struct MoeGrads {
  Tensor<T>& router;  // [E, D], accumulated
  Tensor<T>& gate;    // [E, F, D]
  Tensor<T>& up;      // [E, F, D]
  Tensor<T>& down;    // [E, D, F]
};

// Activations the forward keeps for the backward.
template <typename T>
struct MoeSaved {
  Tensor<T> logits;         // [N, E] router logits
  RouterOutput<T> route;    // probs [N, E], topExpert / topWeight [N, k]
  AuxLossStats aux;         // counts per expert and the aux loss value
  Dispatch plan;            // permuted order
  Tensor<T> xPerm;          // [N k, D]
  ExpertsSaved<T> experts;  // [N k, F] x3
  Tensor<T> yPerm;          // [N k, D] unweighted expert outputs
};

// Gradients handed from one backward stage to the next.
template <typename T>
struct MoeBackwardState {
  Tensor<T> dYPerm;      // [N k, D]
  Tensor<T> dTopWeight;  // [N, k]
  Tensor<T> dXPerm;      // [N k, D]
};

template <typename T>
void moeRouterForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                      const MoeOptions& options, MoeSaved<T>& saved);
template <typename T>
void moePermuteForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, MoeSaved<T>& saved);
template <typename T>
void moeExpertsForward(ThreadPool& pool, const MoeWeights<T>& w, MoeSaved<T>& saved);
// Returns y[N, D].
template <typename T>
Tensor<T> moeCombineForward(ThreadPool& pool, const MoeSaved<T>& saved);

template <typename T>
void moeCombineBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/, const MoeSaved<T>& saved,
                        MoeBackwardState<T>& state);
template <typename T>
void moeExpertsBackward(ThreadPool& pool, const MoeWeights<T>& w, const MoeSaved<T>& saved,
                        const MoeGrads<T>& grads, MoeBackwardState<T>& state);
// Returns dx[N, D] of the expert path (the scatter-add of the k row gradients).
template <typename T>
Tensor<T> moePermuteBackward(ThreadPool& pool, const MoeSaved<T>& saved,
                             const MoeBackwardState<T>& state);
// Adds the router path (selected weights + aux loss, through Wr) into dx[N, D] and dWr.
template <typename T>
void moeRouterBackward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                       const MoeOptions& options, const MoeSaved<T>& saved,
                       const MoeGrads<T>& grads, const MoeBackwardState<T>& state,
                       Tensor<T>& dx /*[N, D]*/);

// All four forward stages; returns y[N, D].
template <typename T>
Tensor<T> moeFfnForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                        const MoeOptions& options, MoeSaved<T>& saved);
// All four backward stages; returns dx[N, D] (of y and of the aux loss, which is added to the
// training loss with weight 1) and accumulates the weight gradients.
template <typename T>
Tensor<T> moeFfnBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                         const MoeWeights<T>& w, const MoeOptions& options,
                         const MoeSaved<T>& saved, const MoeGrads<T>& grads);

}  // namespace moewb::engine
