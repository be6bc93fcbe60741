// MoE FFN stages: glue between the router, permute, experts and combine ops (see moe_ffn.h).
#include "model/moe_ffn.h"

#include "ops/combine/combine.h"
#include "ops/linear/linear.h"

namespace moewb::engine {

template <typename T>
void moeRouterForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                      const MoeOptions& options, MoeSaved<T>& saved) {
  const int64_t n = x.dim(0), d = x.dim(1), e = w.router.dim(0);
  saved.logits = Tensor<T>({n, e});
  linearForward(pool, x.data(), w.router.data(), saved.logits.data(), n, d, e);
  saved.route = routerTopK(pool, saved.logits, options.topK);
  saved.aux = auxLossForward(saved.route, options.auxLossCoef);
}

template <typename T>
void moePermuteForward(ThreadPool& pool, const Tensor<T>& x, MoeSaved<T>& saved) {
  saved.plan = buildDispatch(saved.route.topExpert, saved.logits.dim(1));
  saved.xPerm = permuteForward(pool, x, saved.plan);
}

template <typename T>
void moeExpertsForward(ThreadPool& pool, const MoeWeights<T>& w, MoeSaved<T>& saved) {
  saved.yPerm = expertsForward(pool, saved.xPerm, saved.plan.offsets,
                               ExpertWeights<T>{w.gate, w.up, w.down}, saved.experts);
}

template <typename T>
Tensor<T> moeCombineForward(ThreadPool& pool, const MoeSaved<T>& saved) {
  return combineForward(pool, saved.yPerm, saved.route.topWeight, saved.plan);
}

template <typename T>
void moeCombineBackward(ThreadPool& pool, const Tensor<T>& dy, const MoeSaved<T>& saved,
                        MoeBackwardState<T>& state) {
  combineBackward(pool, dy, saved.yPerm, saved.route.topWeight, saved.plan, state.dYPerm,
                  state.dTopWeight);
}

template <typename T>
void moeExpertsBackward(ThreadPool& pool, const MoeWeights<T>& w, const MoeSaved<T>& saved,
                        const MoeGrads<T>& grads, MoeBackwardState<T>& state) {
  state.dXPerm = expertsBackward(pool, state.dYPerm, saved.xPerm, saved.plan.offsets,
                                 ExpertWeights<T>{w.gate, w.up, w.down}, saved.experts,
                                 ExpertGrads<T>{grads.gate, grads.up, grads.down});
}

template <typename T>
Tensor<T> moePermuteBackward(ThreadPool& pool, const MoeSaved<T>& saved,
                             const MoeBackwardState<T>& state) {
  return permuteBackward(pool, state.dXPerm, saved.plan);
}

template <typename T>
void moeRouterBackward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                       const MoeOptions& options, const MoeSaved<T>& saved,
                       const MoeGrads<T>& grads, const MoeBackwardState<T>& state, Tensor<T>& dx) {
  const int64_t n = x.dim(0), d = x.dim(1), e = w.router.dim(0);
  Tensor<T> dLogits({n, e});  // [N, E]
  routerTopKBackward(pool, saved.route, state.dTopWeight, dLogits);
  if (options.auxLossCoef != 0) {
    auxLossBackward(pool, saved.route, saved.aux, options.auxLossCoef, dLogits);
  }
  linearBackwardData(pool, dLogits.data(), w.router.data(), dx.data(), n, d, e, true);
  linearBackwardWeight(pool, dLogits.data(), x.data(), grads.router.data(), n, d, e);
}

template <typename T>
Tensor<T> moeFfnForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                        const MoeOptions& options, MoeSaved<T>& saved) {
  moeRouterForward(pool, x, w, options, saved);
  moePermuteForward(pool, x, saved);
  moeExpertsForward(pool, w, saved);
  return moeCombineForward(pool, saved);
}

template <typename T>
Tensor<T> moeFfnBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                         const MoeWeights<T>& w, const MoeOptions& options,
                         const MoeSaved<T>& saved, const MoeGrads<T>& grads) {
  MoeBackwardState<T> state;
  moeCombineBackward(pool, dy, saved, state);
  moeExpertsBackward(pool, w, saved, grads, state);
  Tensor<T> dx = moePermuteBackward(pool, saved, state);
  moeRouterBackward(pool, x, w, options, saved, grads, state, dx);
  return dx;
}

#define MOEWB_INSTANTIATE_MOE(T)                                                                \
  template void moeRouterForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,        \
                                    const MoeOptions&, MoeSaved<T>&);                           \
  template void moePermuteForward<T>(ThreadPool&, const Tensor<T>&, MoeSaved<T>&);              \
  template void moeExpertsForward<T>(ThreadPool&, const MoeWeights<T>&, MoeSaved<T>&);          \
  template Tensor<T> moeCombineForward<T>(ThreadPool&, const MoeSaved<T>&);                     \
  template void moeCombineBackward<T>(ThreadPool&, const Tensor<T>&, const MoeSaved<T>&,        \
                                      MoeBackwardState<T>&);                                    \
  template void moeExpertsBackward<T>(ThreadPool&, const MoeWeights<T>&, const MoeSaved<T>&,    \
                                      const MoeGrads<T>&, MoeBackwardState<T>&);                \
  template Tensor<T> moePermuteBackward<T>(ThreadPool&, const MoeSaved<T>&,                     \
                                           const MoeBackwardState<T>&);                         \
  template void moeRouterBackward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,       \
                                     const MoeOptions&, const MoeSaved<T>&, const MoeGrads<T>&, \
                                     const MoeBackwardState<T>&, Tensor<T>&);                   \
  template Tensor<T> moeFfnForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,      \
                                      const MoeOptions&, MoeSaved<T>&);                         \
  template Tensor<T> moeFfnBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,         \
                                       const MoeWeights<T>&, const MoeOptions&,                 \
                                       const MoeSaved<T>&, const MoeGrads<T>&);
MOEWB_INSTANTIATE_MOE(float)
MOEWB_INSTANTIATE_MOE(double)

}  // namespace moewb::engine
