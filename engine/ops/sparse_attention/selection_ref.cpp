// Selection helpers (see selection.h).
#include <algorithm>
#include <numeric>

#include "ops/sparse_attention/selection.h"

namespace moewb::engine {

Tensor<int32_t> causalSelection(int64_t batch, int64_t seqLen) {
  Tensor<int32_t> selected({batch * seqLen, seqLen});  // [N, T]
  for (int64_t n = 0; n < batch * seqLen; ++n) {
    const int64_t t = n % seqLen;
    int32_t* row = selected.row(n);
    for (int64_t s = 0; s < seqLen; ++s) row[s] = s <= t ? int32_t(s) : -1;
  }
  return selected;
}

template <typename T>
void topKRow(const T* scores, int64_t count, int64_t k, int32_t* out, int64_t width) {
  MOEWB_CHECK(k >= 1 && k <= width);
  const int64_t kept = std::min(count, k);
  if (count <= k) {
    for (int64_t s = 0; s < count; ++s) out[s] = int32_t(s);
  } else {
    std::vector<int32_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    // A strict total order (score descending, then position ascending): the k first elements
    // form a unique set, so nth_element's internal choices cannot change the result.
    auto before = [scores](int32_t a, int32_t b) {
      return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    };
    std::nth_element(order.begin(), order.begin() + k, order.end(), before);
    std::sort(order.begin(), order.begin() + k);
    std::copy(order.begin(), order.begin() + k, out);
  }
  for (int64_t i = kept; i < width; ++i) out[i] = -1;
}

SelectionTranspose transposeSelection(const Tensor<int32_t>& selected, int64_t seqLen) {
  const int64_t n = selected.dim(0), width = selected.dim(1);
  SelectionTranspose result;
  result.keyStart.assign(size_t(n + 1), 0);
  for (int64_t q = 0; q < n; ++q) {
    const int32_t* row = selected.row(q);
    const int64_t base = q - q % seqLen;
    for (int64_t slot = 0; slot < width && row[slot] >= 0; ++slot) {
      ++result.keyStart[size_t(base + row[slot] + 1)];
    }
  }
  for (int64_t m = 0; m < n; ++m) result.keyStart[size_t(m + 1)] += result.keyStart[size_t(m)];
  result.entries.resize(size_t(result.keyStart[size_t(n)]));
  std::vector<int64_t> cursor(result.keyStart.begin(), result.keyStart.end() - 1);
  for (int64_t q = 0; q < n; ++q) {  // ascending q, so each key's list is in query order
    const int32_t* row = selected.row(q);
    const int64_t base = q - q % seqLen;
    for (int64_t slot = 0; slot < width && row[slot] >= 0; ++slot) {
      result.entries[size_t(cursor[size_t(base + row[slot])]++)] = q * width + slot;
    }
  }
  return result;
}

template void topKRow<float>(const float*, int64_t, int64_t, int32_t*, int64_t);
template void topKRow<double>(const double*, int64_t, int64_t, int32_t*, int64_t);

}  // namespace moewb::engine
