// AdamW update for one parameter tensor (Loshchilov & Hutter; PyTorch's torch.optim.AdamW):
//   g' = g * gradScale                         (gradScale carries the global-norm clip factor)
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   p = p (1 - lr wd)                           (decoupled decay; only when `decay`, i.e. matrices)
//   p = p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// with t the 1-based step. Elementwise, so any split over threads gives the same result.
// Costs: O(numel) flops and about 5 words of memory traffic per element.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace moewb::engine {

struct AdamWHyper {
  double lr = 0;  // learning rate of this step (after warm-up)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0;  // decoupled; applied only where decay == true
  int64_t step = 1;        // 1-based step for the bias correction
};

// Updates param/m/v in place from grad[n].
template <typename T>
void adamwUpdate(ThreadPool& pool, T* param, const T* grad, T* m, T* v, int64_t n,
                 const AdamWHyper& hyper, bool decay, double gradScale);

}  // namespace moewb::engine
