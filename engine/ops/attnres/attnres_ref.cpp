// Reference AttnRes forward and backward (see attnres.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/attnres/attnres.h"

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 32;
constexpr int64_t kColumnGrain = 16;

template <typename T>
void checkInputs(const std::vector<const Tensor<T>*>& sources, const Tensor<T>& query,
                 const Tensor<T>& keyGain) {
  MOEWB_CHECK(!sources.empty());
  for (const Tensor<T>* source : sources) {
    MOEWB_CHECK(source != nullptr && source->rank() == 2);
    MOEWB_CHECK(source->sameShape(*sources[0]));
  }
  MOEWB_CHECK_EQ(query.numel(), sources[0]->dim(1));
  MOEWB_CHECK_EQ(keyGain.numel(), sources[0]->dim(1));
}

// a = w ⊙ gamma * scale.
template <typename T>
Tensor<T> effectiveQuery(const Tensor<T>& query, const Tensor<T>& keyGain, double scale) {
  Tensor<T> a({query.numel()});  // [D]
  for (int64_t j = 0; j < a.numel(); ++j) a[j] = query[j] * keyGain[j] * T(scale);
  return a;
}

// For token t: r[i] (key rstd), dotA[i] = v_i[t] . a and p[i] = softmax_i(r_i dotA_i).
template <typename T>
void tokenSoftmax(const std::vector<const Tensor<T>*>& sources, int64_t t, const Tensor<T>& a,
                  double eps, T* r, T* dotA, T* p) {
  const int64_t sourceCount = int64_t(sources.size()), d = a.numel();
  T maxZ = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < sourceCount; ++i) {
    const T* v = sources[size_t(i)]->row(t);
    T sumSq = 0, dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      sumSq += v[j] * v[j];
      dot += v[j] * a[j];
    }
    r[i] = T(1) / std::sqrt(sumSq / T(d) + T(eps));
    dotA[i] = dot;
    p[i] = r[i] * dot;
    maxZ = std::max(maxZ, p[i]);
  }
  T sum = 0;
  for (int64_t i = 0; i < sourceCount; ++i) {
    p[i] = std::exp(p[i] - maxZ);
    sum += p[i];
  }
  for (int64_t i = 0; i < sourceCount; ++i) p[i] /= sum;
}

}  // namespace

template <typename T>
Tensor<T> attnResForward(ThreadPool& pool, const std::vector<const Tensor<T>*>& sources,
                         const Tensor<T>& query, const Tensor<T>& keyGain,
                         const AttnResOptions& options) {
  checkInputs(sources, query, keyGain);
  const int64_t n = sources[0]->dim(0), d = sources[0]->dim(1);
  const size_t sourceCount = sources.size();
  const Tensor<T> a = effectiveQuery(query, keyGain, options.scale);
  Tensor<T> out({n, d});  // [N, D]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> r(sourceCount), dotA(sourceCount), p(sourceCount);  // [L] each
    for (int64_t t = begin; t < end; ++t) {
      tokenSoftmax(sources, t, a, options.eps, r.data(), dotA.data(), p.data());
      T* o = out.row(t);
      for (size_t i = 0; i < sourceCount; ++i) {
        const T* v = sources[i]->row(t);
        for (int64_t j = 0; j < d; ++j) o[j] += p[i] * v[j];
      }
    }
  });
  return out;
}

template <typename T>
void attnResBackward(ThreadPool& pool, const std::vector<const Tensor<T>*>& sources,
                     const Tensor<T>& query, const Tensor<T>& keyGain,
                     const AttnResOptions& options, const Tensor<T>& dOut,
                     const std::vector<Tensor<T>*>& dSources, Tensor<T>& dQuery,
                     Tensor<T>& dKeyGain) {
  checkInputs(sources, query, keyGain);
  const int64_t n = sources[0]->dim(0), d = sources[0]->dim(1);
  const size_t sourceCount = sources.size();
  MOEWB_CHECK(dOut.sameShape(*sources[0]));
  MOEWB_CHECK_EQ(dSources.size(), sourceCount);
  for (const Tensor<T>* dSource : dSources) {
    MOEWB_CHECK(dSource == nullptr || dSource->sameShape(*sources[0]));
  }
  MOEWB_CHECK_EQ(dQuery.numel(), d);
  MOEWB_CHECK_EQ(dKeyGain.numel(), d);
  const Tensor<T> a = effectiveQuery(query, keyGain, options.scale);
  Tensor<T> coef({int64_t(sourceCount), n});  // [L, N] dz_i r_i, the weights of da
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> r(sourceCount), dotA(sourceCount), p(sourceCount), dp(sourceCount);  // [L]
    for (int64_t t = begin; t < end; ++t) {
      tokenSoftmax(sources, t, a, options.eps, r.data(), dotA.data(), p.data());
      const T* dy = dOut.row(t);
      T meanDp = 0;  // sum_j p_j dp_j
      for (size_t i = 0; i < sourceCount; ++i) {
        const T* v = sources[i]->row(t);
        T dot = 0;
        for (int64_t j = 0; j < d; ++j) dot += dy[j] * v[j];
        dp[i] = dot;
        meanDp += p[i] * dot;
      }
      for (size_t i = 0; i < sourceCount; ++i) {
        const T dz = p[i] * (dp[i] - meanDp);
        coef.at(int64_t(i), t) = dz * r[i];
        if (dSources[i] == nullptr) continue;
        const T* v = sources[i]->row(t);
        T* dv = dSources[i]->row(t);
        const T alongA = dz * r[i];
        const T alongV = dz * r[i] * r[i] * r[i] / T(d) * dotA[i];
        for (int64_t j = 0; j < d; ++j) dv[j] += p[i] * dy[j] + alongA * a[j] - alongV * v[j];
      }
    }
  });
  pool.parallelForRange(d, kColumnGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> da(size_t(end - begin), T(0));  // da[begin:end]
    for (int64_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < sourceCount; ++i) {
        const T c = coef.at(int64_t(i), t);
        const T* v = sources[i]->row(t);
        for (int64_t j = begin; j < end; ++j) da[size_t(j - begin)] += c * v[j];
      }
    }
    for (int64_t j = begin; j < end; ++j) {
      dQuery[j] += da[size_t(j - begin)] * keyGain[j] * T(options.scale);
      dKeyGain[j] += da[size_t(j - begin)] * query[j] * T(options.scale);
    }
  });
}

#define MOEWB_INSTANTIATE_ATTNRES(T)                                                               \
  template Tensor<T> attnResForward<T>(ThreadPool&, const std::vector<const Tensor<T>*>&,          \
                                       const Tensor<T>&, const Tensor<T>&, const AttnResOptions&); \
  template void attnResBackward<T>(ThreadPool&, const std::vector<const Tensor<T>*>&,              \
                                   const Tensor<T>&, const Tensor<T>&, const AttnResOptions&,      \
                                   const Tensor<T>&, const std::vector<Tensor<T>*>&, Tensor<T>&,   \
                                   Tensor<T>&);
MOEWB_INSTANTIATE_ATTNRES(float)
MOEWB_INSTANTIATE_ATTNRES(double)

}  // namespace moewb::engine
