// Reference AdamW update (see adamw.h). The scalar factors are computed in double once per call.
#include <cmath>

#include "ops/adamw/adamw.h"

namespace moewb::engine {

template <typename T>
void adamwUpdate(ThreadPool& pool, T* param, const T* grad, T* m, T* v, int64_t n,
                 const AdamWHyper& hyper, bool decay, double gradScale) {
  const T b1 = T(hyper.beta1), b2 = T(hyper.beta2);
  const T scale = T(gradScale);
  const T lr = T(hyper.lr);
  const T eps = T(hyper.eps);
  const T decayFactor = decay ? T(1.0 - hyper.lr * hyper.weightDecay) : T(1);
  const T correction1 = T(1.0 - std::pow(hyper.beta1, double(hyper.step)));
  const T correction2 = T(1.0 - std::pow(hyper.beta2, double(hyper.step)));
  pool.parallelForRange(n, 4096, [=](int64_t begin, int64_t end) {
    // Distinct tensors never alias; restrict and by-value captures let the compiler vectorise.
    T* __restrict p = param;
    const T* __restrict gr = grad;
    T* __restrict mo = m;
    T* __restrict ve = v;
    for (int64_t i = begin; i < end; ++i) {
      const T g = gr[i] * scale;
      const T mi = b1 * mo[i] + (T(1) - b1) * g;
      const T vi = b2 * ve[i] + (T(1) - b2) * g * g;
      mo[i] = mi;
      ve[i] = vi;
      p[i] = p[i] * decayFactor - lr * (mi / correction1) / (std::sqrt(vi / correction2) + eps);
    }
  });
}

template void adamwUpdate<float>(ThreadPool&, float*, const float*, float*, float*, int64_t,
                                 const AdamWHyper&, bool, double);
template void adamwUpdate<double>(ThreadPool&, double*, const double*, double*, double*, int64_t,
                                  const AdamWHyper&, bool, double);

}  // namespace moewb::engine
