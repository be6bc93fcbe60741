// Reference embedding lookup and gradient scatter (see embedding.h).
#include <algorithm>

#include "ops/embedding/embedding.h"

namespace moewb::engine {

template <typename T>
Tensor<T> embeddingForward(ThreadPool& pool, const Tensor<int32_t>& tokens,
                           const Tensor<T>& table) {
  const int64_t n = tokens.numel();
  const int64_t vocab = table.dim(0);
  const int64_t d = table.dim(1);
  Tensor<T> out({n, d});  // [N, D]
  pool.parallelForRange(n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t token = tokens[i];
      MOEWB_CHECK_MSG(token < vocab, "token " << token << " vocab " << vocab);
      if (token >= 0) std::copy_n(table.row(token), d, out.row(i));
    }
  });
  return out;
}

template <typename T>
void embeddingBackward(const Tensor<int32_t>& tokens, const Tensor<T>& dOut, Tensor<T>& dTable) {
  const int64_t n = tokens.numel();
  const int64_t d = dTable.dim(1);
  MOEWB_CHECK(dOut.dim(0) == n && dOut.dim(1) == d);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0) continue;  // not a token position (an image patch)
    T* dst = dTable.row(tokens[i]);
    const T* src = dOut.row(i);
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
}

#define MOEWB_INSTANTIATE_EMBEDDING(T)                                                           \
  template Tensor<T> embeddingForward<T>(ThreadPool&, const Tensor<int32_t>&, const Tensor<T>&); \
  template void embeddingBackward<T>(const Tensor<int32_t>&, const Tensor<T>&, Tensor<T>&);
MOEWB_INSTANTIATE_EMBEDDING(float)
MOEWB_INSTANTIATE_EMBEDDING(double)

}  // namespace moewb::engine
