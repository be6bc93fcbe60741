// Shared pieces of the fused LM-head losses (Chunk Loss, ops/chunk_loss; CCE, ops/cce): their
// common options and result, and the per-logit math both apply (ENGINE-MATH §6).
//
// Both compute, from the final hidden h[N, D], the head Wv[V, D] and targets y[N],
//   z = h Wv^T, optionally soft-capped z <- c tanh(z / c),
//   lse_t = log sum_v exp(z[t, v]),
//   objective = (1/N_valid) sum_{valid t} [ lse_t - z[t, y_t] + lambda lse_t^2 ],
//   dz[t, v] = g_t (softmax(z_t)_v (1 + 2 lambda lse_t) - [v == y_t]) (1 - (z[t, v] / c)^2),
// with g_t = dLoss / N_valid for valid tokens and 0 for tokens whose target is the ignore index
// (the soft-cap factor only when c > 0). Losses are summed per token in token order, in double.
// The dense op (ops/cross_entropy) has neither ignore index, soft-cap nor z-loss.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace moewb::engine {

inline constexpr int32_t kDefaultIgnoreIndex = -100;

struct LinearLossOptions {
  int32_t ignoreIndex = kDefaultIgnoreIndex;  // targets equal to this contribute nothing
  double softCap = 0;                         // logit soft-cap c (> 0); 0 disables
  double zLossCoef = 0;                       // z-loss weight lambda (>= 0); 0 disables
};

struct LinearLossResult {
  double loss = 0;          // mean cross-entropy over valid tokens (nats)
  double zLoss = 0;         // mean lambda * lse^2 over valid tokens (0 when disabled)
  int64_t validTokens = 0;  // tokens whose target is not the ignore index
  // What the backward differentiates (times its dLoss).
  double objective() const { return loss + zLoss; }
};

namespace detail {

// Number of targets that are not `ignoreIndex`; every other target must lie in [0, vocab)
// (checked: a bad target is a bug of the data pipeline, as in the dense op).
inline int64_t countValidTargets(const Tensor<int32_t>& targets, int64_t vocab,
                                 int32_t ignoreIndex) {
  int64_t valid = 0;
  for (int64_t t = 0; t < targets.numel(); ++t) {
    const int32_t y = targets[t];
    if (y == ignoreIndex) continue;
    MOEWB_CHECK_MSG(y >= 0 && y < vocab, "target " << y << " vocab " << vocab);
    ++valid;
  }
  return valid;
}

// Per-token constants of the logit gradient (see the file comment).
template <typename T>
struct LogitGradCoefs {
  T lse = 0;     // lse_t of the (capped) logits
  T pScale = 1;  // 1 + 2 lambda lse_t
  T invCap = 0;  // 1 / c, or 0 without soft-cap
};

template <typename T>
LogitGradCoefs<T> logitGradCoefs(T lse, const LinearLossOptions& options) {
  LogitGradCoefs<T> coefs;
  coefs.lse = lse;
  coefs.pScale = T(1) + T(2 * options.zLossCoef) * lse;
  coefs.invCap = options.softCap > 0 ? T(1.0 / options.softCap) : T(0);
  return coefs;
}

// c tanh(z / c), or z when `cap` is 0.
template <typename T>
T softCapLogit(T z, T cap) {
  return cap > T(0) ? cap * std::tanh(z / cap) : z;
}

// dz / g_t for one (capped) logit `z`: the gradient before the per-token scale g_t.
template <typename T>
T unscaledLogitGrad(T z, bool isTarget, const LogitGradCoefs<T>& coefs) {
  T grad = std::exp(z - coefs.lse) * coefs.pScale - (isTarget ? T(1) : T(0));
  if (coefs.invCap != T(0)) {
    const T u = z * coefs.invCap;
    grad *= T(1) - u * u;
  }
  return grad;
}

}  // namespace detail
}  // namespace moewb::engine
