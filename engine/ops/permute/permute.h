// MoE dispatch on one device (ENGINE-MATH §5.9): the routing plan and the permute (gather).
//
// buildDispatch turns the router's topExpert[N, k] into a plan that orders the N*k (token, slot)
// assignments expert-major and, within an expert, by token (a stable argsort of the flattened
// [E, N] routing map), so each expert's rows are contiguous; experts with no tokens get an empty
// range. permuteForward gathers x rows into that order; permuteBackward scatter-adds the row
// gradients back to their tokens, summing a token's k rows in slot order (0..k-1).
// Costs: plan O(N k + E) (counting sort, one thread); gather/scatter O(N k D), parallel over
// rows / tokens.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "tensor/tensor.h"

namespace moewb::engine {

struct Dispatch {
  int64_t numTokens = 0;     // N
  int64_t topK = 0;          // k
  int64_t numExperts = 0;    // E
  Tensor<int32_t> counts;    // [E] rows per expert (sum N k)
  Tensor<int32_t> offsets;   // [E + 1] first permuted row of each expert; offsets[E] = N k
  Tensor<int32_t> rowToken;  // [N k] source token of each permuted row
  Tensor<int32_t> rowSlot;   // [N k] which of its token's k choices the row is
  Tensor<int32_t> slotRow;   // [N, k] permuted row of (token, slot)
  int64_t rows() const { return numTokens * topK; }
};

// Builds the plan from topExpert[N, k] (ids in [0, numExperts), distinct within a row).
Dispatch buildDispatch(const Tensor<int32_t>& topExpert /*[N, k]*/, int64_t numExperts);

// Returns xPerm[N k, D] with xPerm[r] = x[rowToken[r]].
template <typename T>
Tensor<T> permuteForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const Dispatch& plan);

// Returns dx[N, D] with dx[t] = sum_j dXPerm[slotRow[t, j]].
template <typename T>
Tensor<T> permuteBackward(ThreadPool& pool, const Tensor<T>& dXPerm /*[N k, D]*/,
                          const Dispatch& plan);

}  // namespace moewb::engine
