// MoE dispatch on one device (ENGINE-MATH §5.9): the routing plan and the permute (gather).
//
// buildDispatch turns the router's topExpert[N, k] into a plan that orders the N*k (token, slot)
// assignments expert-major and, within an expert, by token (a stable argsort of the flattened
// [E, N] routing map), so each expert's rows are contiguous; experts with no tokens get an empty
// range. With a capacity mask (ENGINE-MATH §5.5) the dropped (token, slot) pairs get no row at
// all (slotRow = -1), so the experts never see them. permuteForward gathers x rows into that
// order; permuteBackward scatter-adds the row gradients back to their tokens, summing a token's
// kept rows in slot order (0..k-1).
// Costs: plan O(N k + E) (counting sort, one thread); gather/scatter O(N k D), parallel over
// rows / tokens.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct Dispatch {
  int64_t numTokens = 0;     // N
  int64_t topK = 0;          // k
  int64_t numExperts = 0;    // E
  int64_t numRows = 0;       // R: kept (token, slot) pairs, N k when nothing is dropped
  Tensor<int32_t> counts;    // [E] rows per expert (sum R)
  Tensor<int32_t> offsets;   // [E + 1] first permuted row of each expert; offsets[E] = R
  Tensor<int32_t> rowToken;  // [R] source token of each permuted row
  Tensor<int32_t> rowSlot;   // [R] which of its token's k choices the row is
  Tensor<int32_t> slotRow;   // [N, k] permuted row of (token, slot), -1 if dropped
  int64_t rows() const { return numRows; }
};

// Builds the plan from topExpert[N, k] (ids in [0, numExperts), distinct within a row). `keep`
// [N, k] (1 = kept, 0 = dropped by capacity) may be null: everything is kept (dropless).
Dispatch buildDispatch(const Tensor<int32_t>& topExpert /*[N, k]*/, int64_t numExperts,
                       const Tensor<uint8_t>* keep = nullptr /*[N, k]*/);

// Returns xPerm[R, D] with xPerm[r] = x[rowToken[r]].
template <typename T>
Tensor<T> permuteForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const Dispatch& plan);

// Returns dx[N, D] with dx[t] = sum over kept slots j of dXPerm[slotRow[t, j]].
template <typename T>
Tensor<T> permuteBackward(ThreadPool& pool, const Tensor<T>& dXPerm /*[R, D]*/,
                          const Dispatch& plan);

}  // namespace moewb::engine
