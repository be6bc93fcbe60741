// Token embedding: a row lookup into table[vocab, D] and its gradient, a scatter-add of the
// output gradient rows into the looked-up table rows. Token ids must lie in [0, vocab) (the
// engine's own data source guarantees it; checked). Costs: O(N D) each way. The backward adds
// rows in token order on one thread, so repeated tokens accumulate in a fixed order.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Negative ids mark positions that are not tokens (image patches, Batch::kImagePosition): their
// output row is zero and they receive no gradient.
// Returns out[N, D] with out[n, :] = table[tokens[n], :].
template <typename T>
Tensor<T> embeddingForward(ThreadPool& pool, const Tensor<int32_t>& tokens /*[N]*/,
                           const Tensor<T>& table /*[V, D]*/);

// dTable[V, D] += sum over n with tokens[n] == v of dOut[n, :].
template <typename T>
void embeddingBackward(const Tensor<int32_t>& tokens /*[N]*/, const Tensor<T>& dOut /*[N, D]*/,
                       Tensor<T>& dTable /*[V, D]*/);

}  // namespace moewb::engine
