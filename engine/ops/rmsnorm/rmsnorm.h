// RMSNorm over the last dimension: y = x * rstd * gain with rstd = 1/sqrt(mean(x^2) + eps),
// statistics in the tensor's own precision (fp32 for float, ENGINE-MATH §0 rule 1).
// Backward, with xhat = x * rstd and g = dy * gain:
//   dx = rstd * (g - xhat * mean(g * xhat)),   dGain += sum_rows dy * xhat.
// Costs: O(N D) each way. Rows run in parallel; dGain is reduced over rows in row order by
// column tiles, so it does not depend on the thread count.
#pragma once

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// Returns y[N, D]; writes rstd[N] (needed by the backward).
template <typename T>
Tensor<T> rmsNormForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/,
                         const Tensor<T>& gain /*[D]*/, double eps, Tensor<T>& rstd /*[N]*/);

// Returns dx[N, D] and adds the gain gradient into dGain[D].
template <typename T>
Tensor<T> rmsNormBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/,
                          const Tensor<T>& x /*[N, D]*/, const Tensor<T>& gain /*[D]*/,
                          const Tensor<T>& rstd /*[N]*/, Tensor<T>& dGain /*[D]*/);

}  // namespace moewb::engine
