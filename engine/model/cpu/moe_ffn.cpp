// MoE FFN stages: glue between the router, capacity, permute, experts, combine, latent
// projection and shared-expert ops (see moe_ffn.h).
#include "model/cpu/moe_ffn.h"

#include "ops/combine/combine.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace moewb::engine {
namespace {

// The matrix the experts read: u = x Wdown^T with a latent projection, else x itself.
template <typename T>
const Tensor<T>& dispatchSource(const Tensor<T>& x, const MoeSaved<T>& saved) {
  return saved.options.latent() ? saved.latentIn : x;
}

template <typename T>
ExpertWeights<T> expertWeights(const MoeWeights<T>& w) {
  return {w.gate, w.up, w.down};
}

// How the experts read / write rows under the fusion flags (pointers into `saved`).
template <typename T>
ExpertsIo<T> expertsIo(const MoeSaved<T>& saved) {
  ExpertsIo<T> io;
  if (saved.options.permuteIntoExperts) io.gatherIndex = &saved.plan.rowToken;
  if (saved.options.combineIntoExperts) {
    io.rowWeight = &saved.rowWeight;
    io.outputIndex = &saved.plan.rowToken;
  }
  return io;
}

template <typename T>
const Tensor<T>& expertsInput(const Tensor<T>& x, const MoeSaved<T>& saved) {
  return saved.options.permuteIntoExperts ? dispatchSource(x, saved) : saved.xPerm;
}

template <typename T>
const Tensor<T>& required(const Tensor<T>* t, const char* what) {
  MOEWB_CHECK_MSG(t != nullptr, "MoE weight " << what << " missing for the configured variant");
  return *t;
}

template <typename T>
Tensor<T>& required(Tensor<T>* t, const char* what) {
  MOEWB_CHECK_MSG(t != nullptr, "MoE gradient " << what << " missing for the configured variant");
  return *t;
}

}  // namespace

template <typename T>
void moeRouterForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                      const MoeOptions& options, MoeSaved<T>& saved) {
  const int64_t n = x.dim(0), d = x.dim(1), e = w.router.dim(0);
  const std::string error = moeOptionsError(options, e);
  MOEWB_CHECK_MSG(error.empty(), error);
  saved.options = options;
  saved.logits = Tensor<T>({n, e});
  linearForward(pool, x.data(), w.router.data(), saved.logits.data(), n, d, e);
  saved.route = routerForward(pool, saved.logits, options.routerConfig(),
                              w.bias != nullptr ? &w.bias->bias : nullptr);
  MoeLossStats& aux = saved.aux;
  aux = MoeLossStats();
  saved.switchAux = auxLossForward(saved.route, options.auxLossCoef);
  aux.counts = saved.switchAux.counts;
  aux.switchLoss = saved.switchAux.loss;
  if (options.seqAuxLossCoef != 0) {
    saved.seqAux = seqAuxLossForward(saved.route, options.seqAuxLossCoef,
                                     options.seqLen > 0 ? options.seqLen : n);
    aux.seqLoss = saved.seqAux.loss;
  }
  if (options.zLossCoef != 0) aux.zLoss = zLossForward(pool, saved.logits, options.zLossCoef);
  aux.loss = aux.switchLoss + aux.seqLoss + aux.zLoss;
  aux.capacity = expertCapacity(n, options.topK, e, options.capacityFactor);
  if (aux.capacity < 0) {
    saved.keep = Tensor<uint8_t>();
    aux.dropped.assign(size_t(e), 0);
    return;
  }
  CapacityMask mask = capacityMask(saved.route.topExpert, saved.route.topWeight, e, aux.capacity,
                                   options.dropPolicy);
  saved.keep = std::move(mask.keep);
  aux.dropped = std::move(mask.dropped);
}

template <typename T>
void moePermuteForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                       MoeSaved<T>& saved) {
  const MoeOptions& options = saved.options;
  saved.plan = buildDispatch(saved.route.topExpert, saved.logits.dim(1),
                             saved.keep.empty() ? nullptr : &saved.keep);
  if (options.latent()) {
    const Tensor<T>& down = required(w.latentDown, "latentDown");
    const int64_t n = x.dim(0), d = x.dim(1), dl = options.latentDim;
    MOEWB_CHECK(down.dim(0) == dl && down.dim(1) == d);
    saved.latentIn = Tensor<T>({n, dl});
    linearForward(pool, x.data(), down.data(), saved.latentIn.data(), n, d, dl);
  }
  saved.xPerm = options.permuteIntoExperts
                    ? Tensor<T>()
                    : permuteForward(pool, dispatchSource(x, saved), saved.plan);
}

template <typename T>
void moeExpertsForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                       MoeSaved<T>& saved) {
  if (saved.options.combineIntoExperts) {
    saved.rowWeight = slotsToRows(saved.route.topWeight, saved.plan);
  }
  saved.yPerm = expertsForward(pool, expertsInput(x, saved), saved.plan.offsets, expertWeights(w),
                               saved.experts, saved.options.glu(), expertsIo(saved));
}

template <typename T>
Tensor<T> moeCombineForward(ThreadPool& pool, const MoeWeights<T>& w, MoeSaved<T>& saved) {
  const MoeOptions& options = saved.options;
  Tensor<T> combined;  // [N, Dx]
  if (options.combineIntoExperts) {
    combined = combineSumForward(pool, saved.yPerm, saved.plan);
    saved.yPerm = Tensor<T>();  // the backward never reads the expert outputs
  } else {
    combined = combineForward(pool, saved.yPerm, saved.route.topWeight, saved.plan);
  }
  if (!options.latent()) return combined;
  const Tensor<T>& gain = required(w.latentNorm, "latentNorm");
  const Tensor<T>& up = required(w.latentUp, "latentUp");
  const int64_t n = combined.dim(0), dl = options.latentDim, d = up.dim(0);
  MOEWB_CHECK(up.dim(1) == dl && gain.numel() == dl);
  saved.latentPre = std::move(combined);
  saved.latentOut =
      rmsNormForward(pool, saved.latentPre, gain, options.latentNormEps, saved.latentRstd);
  Tensor<T> y({n, d});  // [N, D]
  linearForward(pool, saved.latentOut.data(), up.data(), y.data(), n, dl, d);
  return y;
}

template <typename T>
void moeSharedForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                      MoeSaved<T>& saved, Tensor<T>& y) {
  if (!saved.options.shared()) return;
  const DenseFfnWeights<T> weights{required(w.sharedGate, "sharedGate"),
                                   required(w.sharedUp, "sharedUp"),
                                   required(w.sharedDown, "sharedDown")};
  MOEWB_CHECK(weights.gate.dim(0) == saved.options.sharedWidth());
  denseFfnForward(pool, x, weights, saved.options.glu(), saved.shared, y);
}

template <typename T>
void moeCombineBackward(ThreadPool& pool, const Tensor<T>& dy, const MoeWeights<T>& w,
                        const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                        MoeBackwardState<T>& state) {
  const MoeOptions& options = saved.options;
  Tensor<T> dLatent;  // [N, Dl] gradient of the combined latent output
  if (options.latent()) {
    const Tensor<T>& up = required(w.latentUp, "latentUp");
    const int64_t n = dy.dim(0), d = dy.dim(1), dl = options.latentDim;
    Tensor<T> dOut({n, dl});  // [N, Dl] gradient of the RMSNorm output
    linearBackwardData(pool, dy.data(), up.data(), dOut.data(), n, dl, d);
    linearBackwardWeight(pool, dy.data(), saved.latentOut.data(),
                         required(grads.latentUp, "latentUp").data(), n, dl, d);
    dLatent = rmsNormBackward(pool, dOut, saved.latentPre, required(w.latentNorm, "latentNorm"),
                              saved.latentRstd, required(grads.latentNorm, "latentNorm"));
  }
  const Tensor<T>& dCombined = options.latent() ? dLatent : dy;
  if (options.combineIntoExperts) {  // the experts read dy by token and form dTopWeight
    state.dYPerm = options.latent() ? std::move(dLatent) : dy.clone();
    return;
  }
  combineBackward(pool, dCombined, saved.yPerm, saved.route.topWeight, saved.plan, state.dYPerm,
                  state.dTopWeight);
}

template <typename T>
void moeExpertsBackward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                        const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                        MoeBackwardState<T>& state) {
  const bool fusedCombine = saved.options.combineIntoExperts;
  Tensor<T> dRowWeight;  // [R] (fused combine)
  state.dXPerm = expertsBackward(
      pool, state.dYPerm, expertsInput(x, saved), saved.plan.offsets, expertWeights(w),
      saved.experts, ExpertGrads<T>{grads.gate, grads.up, grads.down}, saved.options.glu(),
      expertsIo(saved), fusedCombine ? &dRowWeight : nullptr);
  if (fusedCombine) state.dTopWeight = rowsToSlots(dRowWeight, saved.plan);
}

template <typename T>
Tensor<T> moePermuteBackward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                             const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                             const MoeBackwardState<T>& state) {
  Tensor<T> dSource = permuteBackward(pool, state.dXPerm, saved.plan);  // [N, Dx]
  if (!saved.options.latent()) return dSource;
  const int64_t n = x.dim(0), d = x.dim(1), dl = saved.options.latentDim;
  const Tensor<T>& down = required(w.latentDown, "latentDown");
  Tensor<T> dx({n, d});  // [N, D]
  linearBackwardData(pool, dSource.data(), down.data(), dx.data(), n, d, dl);
  linearBackwardWeight(pool, dSource.data(), x.data(),
                       required(grads.latentDown, "latentDown").data(), n, d, dl);
  return dx;
}

template <typename T>
void moeRouterBackward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                       const MoeOptions& options, const MoeSaved<T>& saved,
                       const MoeGrads<T>& grads, const MoeBackwardState<T>& state, Tensor<T>& dx) {
  const int64_t n = x.dim(0), d = x.dim(1), e = w.router.dim(0);
  Tensor<T> dLogits({n, e});  // [N, E]
  routerTopKBackward(pool, saved.route, state.dTopWeight, dLogits);
  if (options.auxLossCoef != 0) {
    auxLossBackward(pool, saved.route, saved.switchAux, options.auxLossCoef, dLogits);
  }
  if (options.seqAuxLossCoef != 0) {
    seqAuxLossBackward(pool, saved.route, saved.seqAux, options.seqAuxLossCoef, dLogits);
  }
  if (options.zLossCoef != 0) zLossBackward(pool, saved.logits, options.zLossCoef, dLogits);
  linearBackwardData(pool, dLogits.data(), w.router.data(), dx.data(), n, d, e, true);
  linearBackwardWeight(pool, dLogits.data(), x.data(), grads.router.data(), n, d, e);
}

template <typename T>
void moeSharedBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                       const MoeWeights<T>& w, const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                       Tensor<T>& dx) {
  if (!saved.options.shared()) return;
  const DenseFfnWeights<T> weights{required(w.sharedGate, "sharedGate"),
                                   required(w.sharedUp, "sharedUp"),
                                   required(w.sharedDown, "sharedDown")};
  const DenseFfnGrads<T> g{required(grads.sharedGate, "sharedGate"),
                           required(grads.sharedUp, "sharedUp"),
                           required(grads.sharedDown, "sharedDown")};
  denseFfnBackward(pool, dy, x, weights, saved.options.glu(), saved.shared, g, dx);
}

template <typename T>
Tensor<T> moeFfnForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                        const MoeOptions& options, MoeSaved<T>& saved) {
  moeRouterForward(pool, x, w, options, saved);
  moePermuteForward(pool, x, w, saved);
  moeExpertsForward(pool, x, w, saved);
  Tensor<T> y = moeCombineForward(pool, w, saved);
  moeSharedForward(pool, x, w, saved, y);
  return y;
}

template <typename T>
Tensor<T> moeFfnBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                         const MoeWeights<T>& w, const MoeOptions& options,
                         const MoeSaved<T>& saved, const MoeGrads<T>& grads) {
  MoeBackwardState<T> state;
  moeCombineBackward(pool, dy, w, saved, grads, state);
  moeExpertsBackward(pool, x, w, saved, grads, state);
  Tensor<T> dx = moePermuteBackward(pool, x, w, saved, grads, state);
  moeRouterBackward(pool, x, w, options, saved, grads, state, dx);
  moeSharedBackward(pool, dy, x, w, saved, grads, dx);
  return dx;
}

#define MOEWB_INSTANTIATE_MOE(T)                                                                   \
  template void moeRouterForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,           \
                                    const MoeOptions&, MoeSaved<T>&);                              \
  template void moePermuteForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,          \
                                     MoeSaved<T>&);                                                \
  template void moeExpertsForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,          \
                                     MoeSaved<T>&);                                                \
  template Tensor<T> moeCombineForward<T>(ThreadPool&, const MoeWeights<T>&, MoeSaved<T>&);        \
  template void moeSharedForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,           \
                                    MoeSaved<T>&, Tensor<T>&);                                     \
  template void moeCombineBackward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,         \
                                      const MoeSaved<T>&, const MoeGrads<T>&,                      \
                                      MoeBackwardState<T>&);                                       \
  template void moeExpertsBackward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,         \
                                      const MoeSaved<T>&, const MoeGrads<T>&,                      \
                                      MoeBackwardState<T>&);                                       \
  template Tensor<T> moePermuteBackward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,    \
                                           const MoeSaved<T>&, const MoeGrads<T>&,                 \
                                           const MoeBackwardState<T>&);                            \
  template void moeRouterBackward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,          \
                                     const MoeOptions&, const MoeSaved<T>&, const MoeGrads<T>&,    \
                                     const MoeBackwardState<T>&, Tensor<T>&);                      \
  template void moeSharedBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,              \
                                     const MoeWeights<T>&, const MoeSaved<T>&, const MoeGrads<T>&, \
                                     Tensor<T>&);                                                  \
  template Tensor<T> moeFfnForward<T>(ThreadPool&, const Tensor<T>&, const MoeWeights<T>&,         \
                                      const MoeOptions&, MoeSaved<T>&);                            \
  template Tensor<T> moeFfnBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,            \
                                       const MoeWeights<T>&, const MoeOptions&,                    \
                                       const MoeSaved<T>&, const MoeGrads<T>&);
MOEWB_INSTANTIATE_MOE(float)
MOEWB_INSTANTIATE_MOE(double)

}  // namespace moewb::engine
