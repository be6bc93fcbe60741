// Reference routers (softmax / sigmoid, bias, group limit) and their losses (see router.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops/router/router.h"

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 64;
constexpr double kNormEps = 1e-20;  // sigmoid router: guards sum s against underflow

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Writes the topK expert ids with the largest sel[] (ties to the lower id) into `chosen`,
// honouring the group limit. `candidates` and `groupScore` are scratch.
template <typename T>
void selectTopK(const T* sel, int64_t e, const RouterConfig& config,
                std::vector<int32_t>& candidates, std::vector<T>& groupScore, int32_t* chosen) {
  auto better = [sel](int32_t a, int32_t b) {
    return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
  };
  candidates.clear();
  if (config.numGroups <= 1) {
    candidates.resize(size_t(e));
    std::iota(candidates.begin(), candidates.end(), 0);
  } else {
    const int64_t groups = config.numGroups, size = e / groups;
    groupScore.assign(size_t(groups), T(0));
    for (int64_t g = 0; g < groups; ++g) {
      T best = -std::numeric_limits<T>::infinity(), second = best;
      for (int64_t j = g * size; j < (g + 1) * size; ++j) {
        if (sel[j] > best) {
          second = best;
          best = sel[j];
        } else if (sel[j] > second) {
          second = sel[j];
        }
      }
      groupScore[size_t(g)] = size >= 2 ? best + second : best;
    }
    std::vector<int32_t> order(static_cast<size_t>(groups));
    std::iota(order.begin(), order.end(), 0);
    const T* gs = groupScore.data();
    std::partial_sort(
        order.begin(), order.begin() + config.topKGroups, order.end(),
        [gs](int32_t a, int32_t b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
    for (int32_t i = 0; i < config.topKGroups; ++i) {
      for (int64_t j = order[size_t(i)] * size; j < (order[size_t(i)] + 1) * size; ++j) {
        candidates.push_back(int32_t(j));
      }
    }
  }
  std::partial_sort(candidates.begin(), candidates.begin() + config.topK, candidates.end(), better);
  std::copy_n(candidates.begin(), config.topK, chosen);
}

void checkConfig(const RouterConfig& config, int64_t e, const std::vector<float>* bias) {
  MOEWB_CHECK(config.topK >= 1 && config.topK <= e);
  MOEWB_CHECK(config.numGroups >= 1 && e % config.numGroups == 0);
  if (config.numGroups > 1) {
    MOEWB_CHECK(config.topKGroups >= 1 && config.topKGroups <= config.numGroups);
    MOEWB_CHECK(int64_t(config.topK) <= int64_t(config.topKGroups) * (e / config.numGroups));
  }
  if (bias != nullptr) MOEWB_CHECK(int64_t(bias->size()) == e);
}

// Softmax router, one row: probs and the selected-logit softmax weights.
template <typename T>
void softmaxRow(const T* z, int64_t e, const int32_t* idx, int32_t k, double routeScale, T* p,
                T* w) {
  T maxLogit = z[0];
  for (int64_t j = 1; j < e; ++j) maxLogit = std::max(maxLogit, z[j]);
  T sumAll = 0;
  for (int64_t j = 0; j < e; ++j) sumAll += (p[j] = std::exp(z[j] - maxLogit));
  for (int64_t j = 0; j < e; ++j) p[j] /= sumAll;
  T maxSel = z[idx[0]];
  for (int32_t i = 1; i < k; ++i) maxSel = std::max(maxSel, z[idx[i]]);
  T sumTop = 0;
  for (int32_t i = 0; i < k; ++i) sumTop += (w[i] = std::exp(z[idx[i]] - maxSel));
  for (int32_t i = 0; i < k; ++i) w[i] /= sumTop;
  if (routeScale != 1.0) {
    for (int32_t i = 0; i < k; ++i) w[i] *= T(routeScale);
  }
}

// Sum of the selected sigmoid scores plus the guard (the weights' denominator).
template <typename T>
T selectedScoreSum(const T* s, const int32_t* idx, int64_t k) {
  T sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += s[idx[i]];
  return sum + T(kNormEps);
}

template <typename T>
T allScoreSum(const T* s, int64_t e) {
  T sum = 0;
  for (int64_t j = 0; j < e; ++j) sum += s[j];
  return sum + T(kNormEps);
}

// dz[t, :] += the gradient through p[t, :] of dp (one row), for either score function.
template <typename T>
void probsRowBackward(const RouterOutput<T>& route, int64_t t, const T* dp, T* dz) {
  const int64_t e = route.probs.dim(1);
  const T* p = route.probs.row(t);
  T dot = 0;
  for (int64_t j = 0; j < e; ++j) dot += p[j] * dp[j];
  if (route.score == RouterScore::kSoftmax) {
    for (int64_t j = 0; j < e; ++j) dz[j] += p[j] * (dp[j] - dot);
    return;
  }
  const T* s = route.scores.row(t);
  const T total = allScoreSum(s, e);
  for (int64_t j = 0; j < e; ++j) dz[j] += (dp[j] - dot) / total * s[j] * (T(1) - s[j]);
}

}  // namespace

template <typename T>
RouterOutput<T> routerForward(ThreadPool& pool, const Tensor<T>& logits, const RouterConfig& config,
                              const std::vector<float>* bias) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  const int32_t k = config.topK;
  checkConfig(config, e, bias);
  const bool sigmoidScore = config.score == RouterScore::kSigmoid;
  RouterOutput<T> out;
  out.score = config.score;
  out.routeScale = config.routeScale;
  out.probs = Tensor<T>({n, e});
  if (sigmoidScore) out.scores = Tensor<T>({n, e});
  out.topExpert = Tensor<int32_t>({n, k});
  out.topWeight = Tensor<T>({n, k});
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> candidates;
    std::vector<T> groupScore, selBuffer(static_cast<size_t>(e));
    for (int64_t t = begin; t < end; ++t) {
      const T* z = logits.row(t);
      T* s = sigmoidScore ? out.scores.row(t) : nullptr;
      if (sigmoidScore) {
        for (int64_t j = 0; j < e; ++j) s[j] = sigmoid(z[j]);
      }
      const T* sel = sigmoidScore ? s : z;
      if (bias != nullptr) {
        for (int64_t j = 0; j < e; ++j) selBuffer[size_t(j)] = sel[j] + T((*bias)[size_t(j)]);
        sel = selBuffer.data();
      }
      int32_t* idx = out.topExpert.row(t);
      selectTopK(sel, e, config, candidates, groupScore, idx);
      T* p = out.probs.row(t);
      T* w = out.topWeight.row(t);
      if (!sigmoidScore) {
        softmaxRow(z, e, idx, k, config.routeScale, p, w);
        continue;
      }
      const T total = allScoreSum(s, e);
      for (int64_t j = 0; j < e; ++j) p[j] = s[j] / total;
      const T selected = selectedScoreSum(s, idx, k);
      for (int32_t i = 0; i < k; ++i) w[i] = T(config.routeScale) * (s[idx[i]] / selected);
    }
  });
  return out;
}

template <typename T>
RouterOutput<T> routerTopK(ThreadPool& pool, const Tensor<T>& logits, int32_t topK) {
  RouterConfig config;
  config.topK = topK;
  return routerForward(pool, logits, config, nullptr);
}

template <typename T>
void routerTopKBackward(ThreadPool& pool, const RouterOutput<T>& route, const Tensor<T>& dTopWeight,
                        Tensor<T>& dLogits) {
  const int64_t n = route.topWeight.dim(0), k = route.topWeight.dim(1);
  const T scale = T(route.routeScale);
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* w = route.topWeight.row(t);
      const T* dw = dTopWeight.row(t);
      const int32_t* idx = route.topExpert.row(t);
      T dot = 0;
      for (int64_t i = 0; i < k; ++i) dot += w[i] * dw[i];
      if (route.routeScale != 1.0) dot /= scale;
      T* dz = dLogits.row(t);
      if (route.score == RouterScore::kSoftmax) {
        for (int64_t i = 0; i < k; ++i) dz[idx[i]] += w[i] * (dw[i] - dot);
        continue;
      }
      const T* s = route.scores.row(t);
      const T factor = scale / selectedScoreSum(s, idx, k);
      for (int64_t i = 0; i < k; ++i) {
        const T si = s[idx[i]];
        dz[idx[i]] += factor * (dw[i] - dot) * si * (T(1) - si);
      }
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
    for (int64_t t = begin; t < end; ++t) probsRowBackward(route, t, dProb.data(), dLogits.row(t));
  });
}

template <typename T>
SeqAuxLossStats seqAuxLossForward(const RouterOutput<T>& route, double alpha, int64_t seqLen) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  MOEWB_CHECK(seqLen > 0 && n % seqLen == 0);
  const int64_t seqs = n / seqLen;
  SeqAuxLossStats stats;
  stats.seqLen = seqLen;
  stats.fraction.assign(size_t(seqs * e), 0.0);
  double total = 0;
  for (int64_t q = 0; q < seqs; ++q) {
    double* f = stats.fraction.data() + q * e;
    std::vector<double> meanProb(static_cast<size_t>(e), 0.0);  // P_{q,e}
    for (int64_t t = q * seqLen; t < (q + 1) * seqLen; ++t) {
      for (int64_t i = 0; i < k; ++i) f[route.topExpert.at(t, i)] += 1.0;
      const T* p = route.probs.row(t);
      for (int64_t j = 0; j < e; ++j) meanProb[size_t(j)] += double(p[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) {
      f[j] /= double(k * seqLen);
      sum += f[j] * meanProb[size_t(j)] / double(seqLen);
    }
    total += sum;
  }
  stats.loss = alpha * double(e) * total / double(seqs);
  return stats;
}

template <typename T>
void seqAuxLossBackward(ThreadPool& pool, const RouterOutput<T>& route,
                        const SeqAuxLossStats& stats, double alpha, Tensor<T>& dLogits) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), seqLen = stats.seqLen;
  const int64_t seqs = n / seqLen;
  std::vector<T> dProb(
      static_cast<size_t>(seqs * e));  // [S, E] dL/dp[t, e] for the tokens of sequence s
  for (int64_t i = 0; i < seqs * e; ++i) {
    dProb[size_t(i)] = T(alpha * double(e) * stats.fraction[size_t(i)] / double(seqLen * seqs));
  }
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      probsRowBackward(route, t, dProb.data() + (t / seqLen) * e, dLogits.row(t));
    }
  });
}

namespace {

// lse of one row and, when p is not null, the row's softmax.
template <typename T>
T rowLogSumExp(const T* z, int64_t e, T* p) {
  T maxLogit = z[0];
  for (int64_t j = 1; j < e; ++j) maxLogit = std::max(maxLogit, z[j]);
  T sum = 0;
  for (int64_t j = 0; j < e; ++j) sum += std::exp(z[j] - maxLogit);
  if (p != nullptr) {
    for (int64_t j = 0; j < e; ++j) p[j] = std::exp(z[j] - maxLogit) / sum;
  }
  return maxLogit + std::log(sum);
}

}  // namespace

template <typename T>
double zLossForward(ThreadPool& pool, const Tensor<T>& logits, double coef) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  std::vector<T> lse(static_cast<size_t>(n));  // [N]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      lse[size_t(t)] = rowLogSumExp(logits.row(t), e, static_cast<T*>(nullptr));
  });
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += double(lse[size_t(t)]) * double(lse[size_t(t)]);
  return n == 0 ? 0.0 : coef * sum / double(n);
}

template <typename T>
void zLossBackward(ThreadPool& pool, const Tensor<T>& logits, double coef, Tensor<T>& dLogits) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  const T scale = T(2.0 * coef / double(n));
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> p(static_cast<size_t>(e));
    for (int64_t t = begin; t < end; ++t) {
      const T lse = rowLogSumExp(logits.row(t), e, p.data());
      T* dz = dLogits.row(t);
      for (int64_t j = 0; j < e; ++j) dz[j] += scale * lse * p[size_t(j)];
    }
  });
}

#define MOEWB_INSTANTIATE_ROUTER(T)                                                                \
  template RouterOutput<T> routerForward<T>(ThreadPool&, const Tensor<T>&, const RouterConfig&,    \
                                            const std::vector<float>*);                            \
  template RouterOutput<T> routerTopK<T>(ThreadPool&, const Tensor<T>&, int32_t);                  \
  template void routerTopKBackward<T>(ThreadPool&, const RouterOutput<T>&, const Tensor<T>&,       \
                                      Tensor<T>&);                                                 \
  template AuxLossStats auxLossForward<T>(const RouterOutput<T>&, double);                         \
  template void auxLossBackward<T>(ThreadPool&, const RouterOutput<T>&, const AuxLossStats&,       \
                                   double, Tensor<T>&);                                            \
  template SeqAuxLossStats seqAuxLossForward<T>(const RouterOutput<T>&, double, int64_t);          \
  template void seqAuxLossBackward<T>(ThreadPool&, const RouterOutput<T>&, const SeqAuxLossStats&, \
                                      double, Tensor<T>&);                                         \
  template double zLossForward<T>(ThreadPool&, const Tensor<T>&, double);                          \
  template void zLossBackward<T>(ThreadPool&, const Tensor<T>&, double, Tensor<T>&);
MOEWB_INSTANTIATE_ROUTER(float)
MOEWB_INSTANTIATE_ROUTER(double)

}  // namespace moewb::engine
