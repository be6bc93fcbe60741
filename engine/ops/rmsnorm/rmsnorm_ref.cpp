// Reference RMSNorm forward and backward (see rmsnorm.h).
#include <cmath>

#include "ops/rmsnorm/rmsnorm.h"

namespace moewb::engine {
namespace {
constexpr int64_t kRowGrain = 64;
constexpr int64_t kColumnGrain = 16;
}  // namespace

template <typename T>
Tensor<T> rmsNormForward(ThreadPool& pool, const Tensor<T>& x, const Tensor<T>& gain, double eps,
                         Tensor<T>& rstd) {
  const int64_t n = x.dim(0);
  const int64_t d = x.dim(1);
  MOEWB_CHECK(gain.numel() == d);
  Tensor<T> y({n, d});    // [N, D]
  rstd = Tensor<T>({n});  // [N]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xr = x.row(i);
      T sumSq = 0;
      for (int64_t j = 0; j < d; ++j) sumSq += xr[j] * xr[j];
      const T r = T(1) / std::sqrt(sumSq / T(d) + T(eps));
      rstd[i] = r;
      T* yr = y.row(i);
      for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * r * gain[j];
    }
  });
  return y;
}

template <typename T>
Tensor<T> rmsNormBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                          const Tensor<T>& gain, const Tensor<T>& rstd, Tensor<T>& dGain) {
  const int64_t n = x.dim(0);
  const int64_t d = x.dim(1);
  Tensor<T> dx({n, d});  // [N, D]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xr = x.row(i);
      const T* dyr = dy.row(i);
      const T r = rstd[i];
      T dot = 0;  // sum_j g_j * xhat_j
      for (int64_t j = 0; j < d; ++j) dot += dyr[j] * gain[j] * xr[j] * r;
      const T meanDot = dot / T(d);
      T* dxr = dx.row(i);
      for (int64_t j = 0; j < d; ++j) dxr[j] = r * (dyr[j] * gain[j] - xr[j] * r * meanDot);
    }
  });
  pool.parallelForRange(d, kColumnGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x.row(i);
      const T* dyr = dy.row(i);
      for (int64_t j = begin; j < end; ++j) dGain[j] += dyr[j] * xr[j] * rstd[i];
    }
  });
  return dx;
}

#define MOEWB_INSTANTIATE_RMSNORM(T)                                                            \
  template Tensor<T> rmsNormForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&, double, \
                                       Tensor<T>&);                                             \
  template Tensor<T> rmsNormBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,        \
                                        const Tensor<T>&, const Tensor<T>&, Tensor<T>&);
MOEWB_INSTANTIATE_RMSNORM(float)
MOEWB_INSTANTIATE_RMSNORM(double)

}  // namespace moewb::engine
