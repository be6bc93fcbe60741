// MoE unpermute + weighted combine (ENGINE-MATH §5.9): every token sums its k expert output
// rows weighted by its routing weights, y[t] = sum_j w[t, j] yPerm[slotRow[t, j]] (slot order).
// Backward: dYPerm[slotRow[t, j]] = w[t, j] dy[t] and dTopWeight[t, j] = <dy[t], yPerm[row]>,
// the gradient into the routing weights. Slots dropped by capacity (slotRow = -1) contribute
// nothing and get dTopWeight = 0. combineSumForward is what is left of the combine when the
// weighting is folded into the experts (ExpertsIo::rowWeight; their backward then reads dy by
// token itself). slotsToRows / rowsToSlots move per-pair values between [N, k] and [R].
// Costs: O(N k D) each way, parallel over tokens; the gather form means no two tasks write the
// same row.
#pragma once

#include "ops/permute/permute.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Returns y[N, D].
template <typename T>
Tensor<T> combineForward(ThreadPool& pool, const Tensor<T>& yPerm /*[R, D]*/,
                         const Tensor<T>& topWeight /*[N, k]*/, const Dispatch& plan);

// Fills dYPerm[N k, D] and dTopWeight[N, k] (both overwritten).
template <typename T>
void combineBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/,
                     const Tensor<T>& yPerm /*[R, D]*/, const Tensor<T>& topWeight /*[N, k]*/,
                     const Dispatch& plan, Tensor<T>& dYPerm, Tensor<T>& dTopWeight);

// Returns y[N, D] with y[t] = sum over kept slots j of yPermWeighted[slotRow[t, j]] (slot
// order): the combine when the experts already applied the weights. Bitwise equal to
// combineForward of the unweighted rows.
template <typename T>
Tensor<T> combineSumForward(ThreadPool& pool, const Tensor<T>& yPermWeighted /*[R, D]*/,
                            const Dispatch& plan);

// Per permuted row r, the value of its (token, slot): out[r] = perSlot[rowToken[r], rowSlot[r]].
template <typename T>
Tensor<T> slotsToRows(const Tensor<T>& perSlot /*[N, k]*/, const Dispatch& plan);

// The inverse: out[t, j] = perRow[slotRow[t, j]], 0 for dropped slots.
template <typename T>
Tensor<T> rowsToSlots(const Tensor<T>& perRow /*[R]*/, const Dispatch& plan);

}  // namespace moewb::engine
