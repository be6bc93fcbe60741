// Reference cross-entropy with max-subtracted log-sum-exp (see cross_entropy.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cross_entropy/cross_entropy.h"

namespace moewb::engine {
namespace {
constexpr int64_t kRowGrain = 32;
}  // namespace

int64_t validTargets(const Tensor<int32_t>& targets) {
  int64_t valid = 0;
  for (int64_t t = 0; t < targets.numel(); ++t) valid += targets[t] >= 0 ? 1 : 0;
  return valid;
}

template <typename T>
double crossEntropyForward(ThreadPool& pool, const Tensor<T>& logits,
                           const Tensor<int32_t>& targets, Tensor<T>& lse) {
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  MOEWB_CHECK(targets.numel() == n);
  lse = Tensor<T>({n});
  std::vector<double> tokenLoss(static_cast<size_t>(n));  // [N]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* z = logits.row(t);
      const int32_t y = targets[t];
      MOEWB_CHECK_MSG(y < vocab, "target " << y << " vocab " << vocab);
      T maxLogit = z[0];
      for (int64_t v = 1; v < vocab; ++v) maxLogit = std::max(maxLogit, z[v]);
      T sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - maxLogit);
      lse[t] = maxLogit + std::log(sum);
      tokenLoss[size_t(t)] = y < 0 ? 0.0 : double(lse[t]) - double(z[y]);
    }
  });
  double total = 0;
  for (double loss : tokenLoss) total += loss;
  const int64_t valid = validTargets(targets);
  return valid > 0 ? total / double(valid) : 0.0;
}

template <typename T>
Tensor<T> crossEntropyBackward(ThreadPool& pool, const Tensor<T>& logits,
                               const Tensor<int32_t>& targets, const Tensor<T>& lse, double dLoss) {
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  Tensor<T> dLogits({n, vocab});  // [N, V]
  const int64_t valid = validTargets(targets);
  const T scale = valid > 0 ? T(dLoss / double(valid)) : T(0);
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* z = logits.row(t);
      T* dz = dLogits.row(t);
      if (targets[t] < 0) continue;  // ignored position: zero gradient
      for (int64_t v = 0; v < vocab; ++v) dz[v] = std::exp(z[v] - lse[t]) * scale;
      dz[targets[t]] -= scale;
    }
  });
  return dLogits;
}

#define MOEWB_INSTANTIATE_CROSS_ENTROPY(T)                                                      \
  template double crossEntropyForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<int32_t>&, \
                                         Tensor<T>&);                                           \
  template Tensor<T> crossEntropyBackward<T>(ThreadPool&, const Tensor<T>&,                     \
                                             const Tensor<int32_t>&, const Tensor<T>&, double);
MOEWB_INSTANTIATE_CROSS_ENTROPY(float)
MOEWB_INSTANTIATE_CROSS_ENTROPY(double)

}  // namespace moewb::engine
