// MoE unpermute + weighted combine (ENGINE-MATH §5.9): every token sums its k expert output
// rows weighted by its routing weights, y[t] = sum_j w[t, j] yPerm[slotRow[t, j]] (slot order).
// Backward: dYPerm[slotRow[t, j]] = w[t, j] dy[t] and dTopWeight[t, j] = <dy[t], yPerm[row]>,
// the gradient into the routing weights. Costs: O(N k D) each way, parallel over tokens; the
// gather form means no two tasks write the same row.
#pragma once

#include "ops/permute/permute.h"
#include "runtime/thread_pool.h"
#include "tensor/tensor.h"

namespace moewb::engine {

// Returns y[N, D].
template <typename T>
Tensor<T> combineForward(ThreadPool& pool, const Tensor<T>& yPerm /*[N k, D]*/,
                         const Tensor<T>& topWeight /*[N, k]*/, const Dispatch& plan);

// Fills dYPerm[N k, D] and dTopWeight[N, k] (both overwritten).
template <typename T>
void combineBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/,
                     const Tensor<T>& yPerm /*[N k, D]*/, const Tensor<T>& topWeight /*[N, k]*/,
                     const Dispatch& plan, Tensor<T>& dYPerm, Tensor<T>& dTopWeight);

}  // namespace moewb::engine
