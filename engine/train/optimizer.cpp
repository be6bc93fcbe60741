// Warm-up schedule, global-norm clipping and the AdamW loop over parameters (see optimizer.h).
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "ops/adamw/adamw.h"

namespace moewb::engine {

double learningRate(const OptimSection& optim, int64_t step) {
  if (optim.warmupSteps <= 0) return optim.lr;
  return optim.lr * std::min(1.0, double(step + 1) / double(optim.warmupSteps));
}

template <typename T>
double globalGradNorm(ThreadPool& pool, const std::vector<Parameter<T>>& params) {
  std::vector<double> sums(params.size(), 0.0);  // [params] sum of squares
  pool.parallelFor(int64_t(params.size()), [&](int64_t i) {
    if (!params[size_t(i)].trainable) return;
    const Tensor<T>& grad = params[size_t(i)].grad;
    double sum = 0;
    for (int64_t j = 0; j < grad.numel(); ++j) sum += double(grad[j]) * double(grad[j]);
    sums[size_t(i)] = sum;
  });
  double total = 0;
  for (double sum : sums) total += sum;
  return std::sqrt(total);
}

template <typename T>
OptimizerStepResult optimizerStep(ThreadPool& pool, std::vector<Parameter<T>>& params,
                                  const OptimSection& optim, int64_t step, double gradNorm) {
  OptimizerStepResult result;
  result.gradNorm = gradNorm;
  result.lr = learningRate(optim, step);
  if (optim.gradClip > 0 && result.gradNorm > optim.gradClip) {
    result.clipScale = optim.gradClip / (result.gradNorm + 1e-6);
  }
  AdamWHyper hyper;
  hyper.lr = result.lr;
  hyper.beta1 = optim.beta1;
  hyper.beta2 = optim.beta2;
  hyper.eps = optim.eps;
  hyper.weightDecay = optim.weightDecay;
  hyper.step = step + 1;
  for (auto& param : params) {
    if (!param.trainable) continue;
    adamwUpdate(pool, param.value.data(), param.grad.data(), param.adamM.data(), param.adamV.data(),
                param.value.numel(), hyper, param.decay, result.clipScale);
  }
  return result;
}

template double globalGradNorm<float>(ThreadPool&, const std::vector<Parameter<float>>&);
template double globalGradNorm<double>(ThreadPool&, const std::vector<Parameter<double>>&);
template OptimizerStepResult optimizerStep<float>(ThreadPool&, std::vector<Parameter<float>>&,
                                                  const OptimSection&, int64_t, double);
template OptimizerStepResult optimizerStep<double>(ThreadPool&, std::vector<Parameter<double>>&,
                                                   const OptimSection&, int64_t, double);

}  // namespace moewb::engine
