// Key selections of sparse attention: which keys each query token attends to.
//
// A selection is an int32 tensor [N, W] (token n = b*T + t): row n lists key positions s <= t of
// the same sequence, strictly ascending, followed by -1 padding. The number of valid entries is
// min(t+1, W), so rows are never ragged in memory. The dense warm-up stage uses the causal
// selection (W = T, row t = 0..t); the sparse stage the indexer's top-k (W = min(k, T)).
// Keeping rows ascending makes every reduction over a row run in key order, whichever path
// (dense or top-k) produced it, so a top-k selection that covers all keys gives bit-identical
// results to the causal one.
// SelectionTranspose inverts a selection (for each key token, the (query, slot) pairs that chose
// it, in ascending query order); backward passes use it to accumulate dk/dv per key in a fixed
// order instead of scattering with atomics.
// Costs: causalSelection O(N T); topKRow O(t log k) per row (nth_element + sort of k);
// transposeSelection O(N W) serial, 8 bytes per entry.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Valid entries of a selection row: the -1-padded prefix length.
inline int64_t selectedCount(const int32_t* row, int64_t width) {
  int64_t count = 0;
  while (count < width && row[count] >= 0) ++count;
  return count;
}

// The causal selection [B*T, T]: row t = 0, 1, ..., t, then -1.
Tensor<int32_t> causalSelection(int64_t batch, int64_t seqLen);

// Writes into out[0, width) the positions of the min(count, k) largest of scores[0, count), in
// ascending position order, then -1 padding. Ties are broken toward the lower position, so the
// result is a pure function of the scores. Requires k <= width and finite scores.
template <typename T>
void topKRow(const T* scores, int64_t count, int64_t k, int32_t* out, int64_t width);

struct SelectionTranspose {
  std::vector<int64_t> keyStart;  // [N + 1] entries of key token m are [keyStart[m], keyStart[m+1])
  std::vector<int64_t> entries;   // query token * W + slot, ascending within each key
};

// Inverts `selected` [B*T, W] for sequences of length seqLen.
SelectionTranspose transposeSelection(const Tensor<int32_t>& selected, int64_t seqLen);

}  // namespace moewb::engine
