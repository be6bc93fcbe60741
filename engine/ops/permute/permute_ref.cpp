// Reference dispatch plan (counting sort) and the row gather / scatter-add (see permute.h).
#include <algorithm>
#include <limits>
#include <vector>

#include "ops/permute/permute.h"

namespace moewb::engine {
namespace {
constexpr int64_t kRowGrain = 128;
}  // namespace

Dispatch buildDispatch(const Tensor<int32_t>& topExpert, int64_t numExperts,
                       const Tensor<uint8_t>* keep) {
  Dispatch plan;
  plan.numTokens = topExpert.dim(0);
  plan.topK = topExpert.dim(1);
  plan.numExperts = numExperts;
  const int64_t pairs = plan.numTokens * plan.topK;
  MOEWB_CHECK(pairs <= std::numeric_limits<int32_t>::max());
  if (keep != nullptr) MOEWB_CHECK(keep->numel() == pairs);
  auto kept = [keep](int64_t i) { return keep == nullptr || (*keep)[i] != 0; };
  int64_t rows = 0;
  for (int64_t i = 0; i < pairs; ++i) rows += kept(i) ? 1 : 0;
  plan.numRows = rows;
  plan.counts = Tensor<int32_t>({numExperts});
  plan.offsets = Tensor<int32_t>({numExperts + 1});
  plan.rowToken = Tensor<int32_t>({rows});
  plan.rowSlot = Tensor<int32_t>({rows});
  plan.slotRow = Tensor<int32_t>({plan.numTokens, plan.topK});
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t expert = topExpert[i];
    MOEWB_CHECK_MSG(expert >= 0 && expert < numExperts, "expert id " << expert);
    if (kept(i)) ++plan.counts[expert];
  }
  for (int64_t e = 0; e < numExperts; ++e) plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];
  std::vector<int32_t> cursor(plan.offsets.data(), plan.offsets.data() + numExperts);
  for (int64_t t = 0; t < plan.numTokens; ++t) {
    for (int64_t j = 0; j < plan.topK; ++j) {
      if (!kept(t * plan.topK + j)) {
        plan.slotRow.at(t, j) = -1;
        continue;
      }
      const int32_t row = cursor[size_t(topExpert.at(t, j))]++;
      plan.rowToken[row] = int32_t(t);
      plan.rowSlot[row] = int32_t(j);
      plan.slotRow.at(t, j) = row;
    }
  }
  return plan;
}

template <typename T>
Tensor<T> permuteForward(ThreadPool& pool, const Tensor<T>& x, const Dispatch& plan) {
  const int64_t d = x.dim(1);
  Tensor<T> xPerm({plan.rows(), d});  // [N k, D]
  pool.parallelForRange(plan.rows(), kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) std::copy_n(x.row(plan.rowToken[r]), d, xPerm.row(r));
  });
  return xPerm;
}

template <typename T>
Tensor<T> permuteBackward(ThreadPool& pool, const Tensor<T>& dXPerm, const Dispatch& plan) {
  const int64_t d = dXPerm.dim(1);
  Tensor<T> dx({plan.numTokens, d});  // [N, D]
  pool.parallelForRange(plan.numTokens, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      T* dst = dx.row(t);
      for (int64_t j = 0; j < plan.topK; ++j) {
        if (plan.slotRow.at(t, j) < 0) continue;
        const T* src = dXPerm.row(plan.slotRow.at(t, j));
        for (int64_t c = 0; c < d; ++c) dst[c] += src[c];
      }
    }
  });
  return dx;
}

#define MOEWB_INSTANTIATE_PERMUTE(T)                                                    \
  template Tensor<T> permuteForward<T>(ThreadPool&, const Tensor<T>&, const Dispatch&); \
  template Tensor<T> permuteBackward<T>(ThreadPool&, const Tensor<T>&, const Dispatch&);
MOEWB_INSTANTIATE_PERMUTE(float)
MOEWB_INSTANTIATE_PERMUTE(double)

}  // namespace moewb::engine
