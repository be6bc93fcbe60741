// Dense softmax cross-entropy over LM-head logits (ENGINE-MATH §6, no soft-cap, no z-loss):
//   L = (1/N) sum_t (lse_t - z[t, y_t]),  lse_t = m_t + log sum_v exp(z[t, v] - m_t), m_t = max
//   z_t; dz[t, :] = (softmax(z_t) - onehot(y_t)) * dLoss / N.
// The LM head itself is a plain linear (ops/linear). Costs: O(N V) each way, parallel over rows;
// the loss is summed over tokens in order, in double.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Negative targets (Batch's kIgnoreTarget, e.g. image positions) are ignored: the mean runs over
// the valid targets only and ignored rows get zero gradient.
// Number of targets >= 0.
int64_t validTargets(const Tensor<int32_t>& targets /*[N]*/);

// Returns the mean loss (nats) over valid targets; writes lse[N]. Targets must be < V (checked).
template <typename T>
double crossEntropyForward(ThreadPool& pool, const Tensor<T>& logits /*[N, V]*/,
                           const Tensor<int32_t>& targets /*[N]*/, Tensor<T>& lse /*[N]*/);

// Returns dLogits[N, V] for an upstream gradient dLoss of the mean loss.
template <typename T>
Tensor<T> crossEntropyBackward(ThreadPool& pool, const Tensor<T>& logits /*[N, V]*/,
                               const Tensor<int32_t>& targets /*[N]*/, const Tensor<T>& lse /*[N]*/,
                               double dLoss);

}  // namespace moewb::engine
