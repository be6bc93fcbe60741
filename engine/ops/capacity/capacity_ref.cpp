// Reference capacity mask: per expert, its pairs in token order, then the policy's cut
// (see capacity.h).
#include <algorithm>
#include <cmath>

#include "ops/capacity/capacity.h"

namespace moewb::engine {

int64_t expertCapacity(int64_t numTokens, int64_t topK, int64_t numExperts, double capacityFactor) {
  if (capacityFactor <= 0) return -1;
  MOEWB_CHECK(numExperts > 0);
  return int64_t(std::ceil(double(numTokens * topK) / double(numExperts) * capacityFactor));
}

template <typename T>
CapacityMask capacityMask(const Tensor<int32_t>& topExpert, const Tensor<T>& topWeight,
                          int64_t numExperts, int64_t capacity, DropPolicy policy) {
  MOEWB_CHECK(capacity >= 0);
  const int64_t n = topExpert.dim(0), k = topExpert.dim(1);
  CapacityMask mask;
  mask.capacity = capacity;
  mask.keep = Tensor<uint8_t>({n, k});
  mask.dropped.assign(size_t(numExperts), 0);
  std::vector<std::vector<int64_t>> pairs(
      static_cast<size_t>(numExperts));  // flat (t k + j), token order
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = topExpert[i];
    MOEWB_CHECK(e >= 0 && e < numExperts);
    pairs[size_t(e)].push_back(i);
  }
  for (int64_t e = 0; e < numExperts; ++e) {
    std::vector<int64_t>& list = pairs[size_t(e)];
    if (policy == DropPolicy::kProbs && int64_t(list.size()) > capacity) {
      std::stable_sort(list.begin(), list.end(),
                       [&](int64_t a, int64_t b) { return topWeight[a] > topWeight[b]; });
    }
    const int64_t kept = std::min<int64_t>(capacity, int64_t(list.size()));
    for (int64_t i = 0; i < kept; ++i) mask.keep[list[size_t(i)]] = 1;
    mask.dropped[size_t(e)] = int64_t(list.size()) - kept;
  }
  return mask;
}

template CapacityMask capacityMask<float>(const Tensor<int32_t>&, const Tensor<float>&, int64_t,
                                          int64_t, DropPolicy);
template CapacityMask capacityMask<double>(const Tensor<int32_t>&, const Tensor<double>&, int64_t,
                                           int64_t, DropPolicy);

}  // namespace moewb::engine
