// Reference dense GLU FFN (shared experts) over the parallel linear products (see dense_ffn.h).
#include "ops/linear/linear.h"
#include "ops/dense_ffn/dense_ffn.h"

namespace moewb::engine {
namespace {
constexpr int64_t kElementGrain = 4096;
}  // namespace

template <typename T>
void denseFfnForward(ThreadPool& pool, const Tensor<T>& x, const DenseFfnWeights<T>& weights,
                     const GluParams& activation, DenseFfnSaved<T>& saved, Tensor<T>& y) {
  const int64_t n = x.dim(0), d = x.dim(1), f = weights.gate.dim(0);
  MOEWB_CHECK(weights.gate.dim(1) == d && weights.down.dim(0) == d && weights.down.dim(1) == f);
  MOEWB_CHECK(y.dim(0) == n && y.dim(1) == d);
  saved.gatePre = Tensor<T>({n, f});
  saved.upPre = Tensor<T>({n, f});
  saved.hidden = Tensor<T>({n, f});
  linearForward(pool, x.data(), weights.gate.data(), saved.gatePre.data(), n, d, f);
  linearForward(pool, x.data(), weights.up.data(), saved.upPre.data(), n, d, f);
  pool.parallelForRange(n * f, kElementGrain, [&](int64_t begin, int64_t end) {
    gluForward(activation, saved.gatePre.data() + begin, saved.upPre.data() + begin,
               saved.hidden.data() + begin, end - begin);
  });
  linearForward(pool, saved.hidden.data(), weights.down.data(), y.data(), n, f, d, true);
}

template <typename T>
void denseFfnBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                      const DenseFfnWeights<T>& weights, const GluParams& activation,
                      const DenseFfnSaved<T>& saved, const DenseFfnGrads<T>& grads, Tensor<T>& dx) {
  const int64_t n = x.dim(0), d = x.dim(1), f = weights.gate.dim(0);
  Tensor<T> dGate({n, f});  // [N, F] dh, then dg
  Tensor<T> dUp({n, f});    // [N, F]
  linearBackwardData(pool, dy.data(), weights.down.data(), dGate.data(), n, f, d);
  linearBackwardWeight(pool, dy.data(), saved.hidden.data(), grads.down.data(), n, f, d);
  pool.parallelForRange(n * f, kElementGrain, [&](int64_t begin, int64_t end) {
    gluBackward(activation, saved.gatePre.data() + begin, saved.upPre.data() + begin,
                dGate.data() + begin, dUp.data() + begin, end - begin);
  });
  linearBackwardData(pool, dGate.data(), weights.gate.data(), dx.data(), n, d, f, true);
  linearBackwardData(pool, dUp.data(), weights.up.data(), dx.data(), n, d, f, true);
  linearBackwardWeight(pool, dGate.data(), x.data(), grads.gate.data(), n, d, f);
  linearBackwardWeight(pool, dUp.data(), x.data(), grads.up.data(), n, d, f);
}

#define MOEWB_INSTANTIATE_DENSE_FFN(T)                                                       \
  template void denseFfnForward<T>(ThreadPool&, const Tensor<T>&, const DenseFfnWeights<T>&, \
                                   const GluParams&, DenseFfnSaved<T>&, Tensor<T>&);         \
  template void denseFfnBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,         \
                                    const DenseFfnWeights<T>&, const GluParams&,             \
                                    const DenseFfnSaved<T>&, const DenseFfnGrads<T>&, Tensor<T>&);
MOEWB_INSTANTIATE_DENSE_FFN(float)
MOEWB_INSTANTIATE_DENSE_FFN(double)

}  // namespace moewb::engine
