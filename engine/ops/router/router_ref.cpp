// Reference softmax-top-k router and Switch aux loss (see router.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/router/router.h"

namespace moewb::engine {
namespace {
constexpr int64_t kRowGrain = 64;
}  // namespace

template <typename T>
RouterOutput<T> routerTopK(ThreadPool& pool, const Tensor<T>& logits, int32_t topK) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  MOEWB_CHECK(topK >= 1 && topK <= e);
  RouterOutput<T> out;
  out.probs = Tensor<T>({n, e});
  out.topExpert = Tensor<int32_t>({n, topK});
  out.topWeight = Tensor<T>({n, topK});
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> order(static_cast<size_t>(e));
    for (int64_t t = begin; t < end; ++t) {
      const T* z = logits.row(t);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(
          order.begin(), order.begin() + topK, order.end(),
          [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
      const T maxLogit = z[order[0]];
      T sumAll = 0;
      T* p = out.probs.row(t);
      for (int64_t j = 0; j < e; ++j) sumAll += (p[j] = std::exp(z[j] - maxLogit));
      for (int64_t j = 0; j < e; ++j) p[j] /= sumAll;
      T sumTop = 0;
      T* w = out.topWeight.row(t);
      for (int32_t i = 0; i < topK; ++i) {
        out.topExpert.at(t, i) = order[size_t(i)];
        sumTop += (w[i] = std::exp(z[order[size_t(i)]] - maxLogit));
      }
      for (int32_t i = 0; i < topK; ++i) w[i] /= sumTop;
    }
  });
  return out;
}

template <typename T>
void routerTopKBackward(ThreadPool& pool, const RouterOutput<T>& route, const Tensor<T>& dTopWeight,
                        Tensor<T>& dLogits) {
  const int64_t n = route.topWeight.dim(0), k = route.topWeight.dim(1);
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* w = route.topWeight.row(t);
      const T* dw = dTopWeight.row(t);
      T dot = 0;
      for (int64_t i = 0; i < k; ++i) dot += w[i] * dw[i];
      T* dz = dLogits.row(t);
      for (int64_t i = 0; i < k; ++i) dz[route.topExpert.at(t, i)] += w[i] * (dw[i] - dot);
    }
  });
}

template <typename T>
AuxLossStats auxLossForward(const RouterOutput<T>& route, double alpha) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  AuxLossStats stats;
  stats.counts.assign(size_t(e), 0);
  stats.fraction.assign(size_t(e), 0.0);
  for (int64_t i = 0; i < route.topExpert.numel(); ++i) ++stats.counts[size_t(route.topExpert[i])];
  std::vector<double> meanProb(static_cast<size_t>(e), 0.0);  // P_e
  for (int64_t t = 0; t < n; ++t) {
    const T* p = route.probs.row(t);
    for (int64_t j = 0; j < e; ++j) meanProb[size_t(j)] += double(p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < e; ++j) {
    stats.fraction[size_t(j)] = double(stats.counts[size_t(j)]) / double(k * n);
    sum += stats.fraction[size_t(j)] * meanProb[size_t(j)] / double(n);
  }
  stats.loss = alpha * double(e) * sum;
  return stats;
}

template <typename T>
void auxLossBackward(ThreadPool& pool, const RouterOutput<T>& route, const AuxLossStats& stats,
                     double alpha, Tensor<T>& dLogits) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1);
  std::vector<T> dProb(static_cast<size_t>(e));  // [E] dL/dp[t, e], the same for every token
  for (int64_t j = 0; j < e; ++j) {
    dProb[size_t(j)] = T(alpha * double(e) * stats.fraction[size_t(j)] / double(n));
  }
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* p = route.probs.row(t);
      T dot = 0;
      for (int64_t j = 0; j < e; ++j) dot += p[j] * dProb[size_t(j)];
      T* dz = dLogits.row(t);
      for (int64_t j = 0; j < e; ++j) dz[j] += p[j] * (dProb[size_t(j)] - dot);
    }
  });
}

#define MOEWB_INSTANTIATE_ROUTER(T)                                                          \
  template RouterOutput<T> routerTopK<T>(ThreadPool&, const Tensor<T>&, int32_t);            \
  template void routerTopKBackward<T>(ThreadPool&, const RouterOutput<T>&, const Tensor<T>&, \
                                      Tensor<T>&);                                           \
  template AuxLossStats auxLossForward<T>(const RouterOutput<T>&, double);                   \
  template void auxLossBackward<T>(ThreadPool&, const RouterOutput<T>&, const AuxLossStats&, \
                                   double, Tensor<T>&);
MOEWB_INSTANTIATE_ROUTER(float)
MOEWB_INSTANTIATE_ROUTER(double)

}  // namespace moewb::engine
