// Reference weighted combine and its backward, the sum-only combine used when the weighting is
// folded into the experts, and the [N, k] <-> [R] maps (see combine.h).
#include "ops/combine/combine.h"

namespace moewb::engine {
namespace {
constexpr int64_t kTokenGrain = 128;

// y[t] = sum_j w[t, j] rows[slotRow(t, j)] over kept slots; w = 1 when topWeight is null.
template <typename T>
Tensor<T> combineRows(ThreadPool& pool, const Tensor<T>& rows, const Tensor<T>* topWeight,
                      const Dispatch& plan) {
  const int64_t d = rows.dim(1);
  Tensor<T> y({plan.numTokens, d});  // [N, D]
  pool.parallelForRange(plan.numTokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      T* dst = y.row(t);
      for (int64_t j = 0; j < plan.topK; ++j) {
        const int32_t row = plan.slotRow.at(t, j);
        if (row < 0) continue;
        const T* src = rows.row(row);
        if (topWeight == nullptr) {
          for (int64_t c = 0; c < d; ++c) dst[c] += src[c];
          continue;
        }
        const T w = topWeight->at(t, j);
        for (int64_t c = 0; c < d; ++c) dst[c] += w * src[c];
      }
    }
  });
  return y;
}

}  // namespace

template <typename T>
Tensor<T> combineForward(ThreadPool& pool, const Tensor<T>& yPerm, const Tensor<T>& topWeight,
                         const Dispatch& plan) {
  return combineRows(pool, yPerm, &topWeight, plan);
}

template <typename T>
void combineBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& yPerm,
                     const Tensor<T>& topWeight, const Dispatch& plan, Tensor<T>& dYPerm,
                     Tensor<T>& dTopWeight) {
  const int64_t d = yPerm.dim(1);
  dYPerm = Tensor<T>({plan.rows(), d});                 // [R, D]
  dTopWeight = Tensor<T>({plan.numTokens, plan.topK});  // [N, k]
  pool.parallelForRange(plan.numTokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* g = dy.row(t);
      for (int64_t j = 0; j < plan.topK; ++j) {
        const int32_t row = plan.slotRow.at(t, j);
        if (row < 0) continue;  // dropped: no gradient, dTopWeight stays 0
        const T w = topWeight.at(t, j);
        const T* yr = yPerm.row(row);
        T* dyr = dYPerm.row(row);
        T dot = 0;
        for (int64_t c = 0; c < d; ++c) {
          dyr[c] = w * g[c];
          dot += g[c] * yr[c];
        }
        dTopWeight.at(t, j) = dot;
      }
    }
  });
}

template <typename T>
Tensor<T> combineSumForward(ThreadPool& pool, const Tensor<T>& yPermWeighted,
                            const Dispatch& plan) {
  return combineRows<T>(pool, yPermWeighted, nullptr, plan);
}

template <typename T>
Tensor<T> slotsToRows(const Tensor<T>& perSlot, const Dispatch& plan) {
  Tensor<T> out({plan.rows()});  // [R]
  for (int64_t r = 0; r < plan.rows(); ++r) out[r] = perSlot.at(plan.rowToken[r], plan.rowSlot[r]);
  return out;
}

template <typename T>
Tensor<T> rowsToSlots(const Tensor<T>& perRow, const Dispatch& plan) {
  Tensor<T> out({plan.numTokens, plan.topK});  // [N, k]
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int32_t row = plan.slotRow[i];
    if (row >= 0) out[i] = perRow[row];
  }
  return out;
}

#define MOEWB_INSTANTIATE_COMBINE(T)                                                           \
  template Tensor<T> combineForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,        \
                                       const Dispatch&);                                       \
  template void combineBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,            \
                                   const Tensor<T>&, const Dispatch&, Tensor<T>&, Tensor<T>&); \
  template Tensor<T> combineSumForward<T>(ThreadPool&, const Tensor<T>&, const Dispatch&);     \
  template Tensor<T> slotsToRows<T>(const Tensor<T>&, const Dispatch&);                        \
  template Tensor<T> rowsToSlots<T>(const Tensor<T>&, const Dispatch&);
MOEWB_INSTANTIATE_COMBINE(float)
MOEWB_INSTANTIATE_COMBINE(double)

}  // namespace moewb::engine
