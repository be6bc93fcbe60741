// Reference weighted combine and its backward (see combine.h).
#include "ops/combine/combine.h"

namespace moewb::engine {
namespace {
constexpr int64_t kTokenGrain = 128;
}  // namespace

template <typename T>
Tensor<T> combineForward(ThreadPool& pool, const Tensor<T>& yPerm, const Tensor<T>& topWeight,
                         const Dispatch& plan) {
  const int64_t d = yPerm.dim(1);
  Tensor<T> y({plan.numTokens, d});  // [N, D]
  pool.parallelForRange(plan.numTokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      T* dst = y.row(t);
      for (int64_t j = 0; j < plan.topK; ++j) {
        const T w = topWeight.at(t, j);
        const T* src = yPerm.row(plan.slotRow.at(t, j));
        for (int64_t c = 0; c < d; ++c) dst[c] += w * src[c];
      }
    }
  });
  return y;
}

template <typename T>
void combineBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& yPerm,
                     const Tensor<T>& topWeight, const Dispatch& plan, Tensor<T>& dYPerm,
                     Tensor<T>& dTopWeight) {
  const int64_t d = yPerm.dim(1);
  dYPerm = Tensor<T>({plan.rows(), d});                 // [N k, D]
  dTopWeight = Tensor<T>({plan.numTokens, plan.topK});  // [N, k]
  pool.parallelForRange(plan.numTokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* g = dy.row(t);
      for (int64_t j = 0; j < plan.topK; ++j) {
        const int32_t row = plan.slotRow.at(t, j);
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

#define MOEWB_INSTANTIATE_COMBINE(T)                                                    \
  template Tensor<T> combineForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&, \
                                       const Dispatch&);                                \
  template void combineBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,     \
                                   const Tensor<T>&, const Dispatch&, Tensor<T>&, Tensor<T>&);
MOEWB_INSTANTIATE_COMBINE(float)
MOEWB_INSTANTIATE_COMBINE(double)

}  // namespace moewb::engine
