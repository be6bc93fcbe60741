// The optimizer step over a model's parameters: linear warm-up learning rate, global L2
// gradient-norm clipping, and AdamW (ops/adamw) on every trainable parameter (frozen ones,
// trainable = false, are neither updated nor counted in the norm).
// The global norm is reduced per parameter in parallel and then over parameters in a fixed order
// (in double), so it does not depend on the thread count. Costs: O(parameters) per step.
#pragma once

#include <cstdint>
#include <vector>

#include "model/cpu/parameter.h"
#include "moewb/engine/config.h"
#include "runtime/thread_pool.h"

namespace moewb::engine {

struct OptimizerStepResult {
  double gradNorm = 0;   // global L2 norm before clipping
  double clipScale = 1;  // factor applied to every gradient (1 = no clipping)
  double lr = 0;         // learning rate used
};

// Learning rate of 0-based step `step`: lr * min(1, (step + 1) / warmup_steps); lr when
// warmup_steps == 0.
double learningRate(const OptimSection& optim, int64_t step);

// sqrt(sum over the trainable parameters of sum grad^2).
template <typename T>
double globalGradNorm(ThreadPool& pool, const std::vector<Parameter<T>>& params);

// Clips (grad_clip > 0) and applies one AdamW update for 0-based step `step`; `gradNorm` is
// globalGradNorm(params) (the caller checks it is finite first).
template <typename T>
OptimizerStepResult optimizerStep(ThreadPool& pool, std::vector<Parameter<T>>& params,
                                  const OptimSection& optim, int64_t step, double gradNorm);

}  // namespace moewb::engine
