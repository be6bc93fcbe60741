// Expert capacity and token dropping (ENGINE-MATH §5.5). With a capacity factor cf > 0 every
// expert takes at most capacity = ceil(N k / E * cf) (token, expert) pairs; the rest are dropped:
// they get no permuted row, their weight acts as 0 and they contribute no gradient (the token
// keeps its other experts and the residual). The router's weights are not renormalised over the
// kept pairs (as in Megatron), so a dropped pair's logit still moves through the normalisation.
// Policies: kProbs keeps each expert's `capacity` pairs of largest routing weight (ties to the
// earlier token); kPosition keeps the earliest tokens. cf <= 0 means dropless.
// Costs: O(N k log(N k / E)) for kProbs, O(N k) for kPosition, one thread (a plan-sized step,
// like the dispatch plan).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace moewb::engine {

enum class DropPolicy { kProbs, kPosition };

struct CapacityMask {
  int64_t capacity = -1;         // pairs kept per expert at most; -1 = dropless
  Tensor<uint8_t> keep;          // [N, k] 1 = kept, 0 = dropped
  std::vector<int64_t> dropped;  // [E] pairs dropped per expert
};

// ceil(N k / E * capacityFactor) (computed in double as Megatron does), or -1 when
// capacityFactor <= 0.
int64_t expertCapacity(int64_t numTokens, int64_t topK, int64_t numExperts, double capacityFactor);

// The keep mask of topExpert[N, k] / topWeight[N, k] for `capacity` (>= 0) and `policy`.
template <typename T>
CapacityMask capacityMask(const Tensor<int32_t>& topExpert /*[N, k]*/,
                          const Tensor<T>& topWeight /*[N, k]*/, int64_t numExperts,
                          int64_t capacity, DropPolicy policy);

}  // namespace moewb::engine
