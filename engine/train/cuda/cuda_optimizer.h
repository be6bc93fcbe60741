// The optimizer step on the device (optim/optimizer.h's CUDA twin): the global L2 gradient norm
// over the trainable parameters (read back to the host: the step's divergence check and the
// clip factor need it), then fused AdamW on the fp32 master weights with the bf16 compute copy
// rewritten in the same kernel; each is one launch for the whole parameter set.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "model/cuda/cuda_parameters.h"
#include "moewb/engine/config.h"
#include "train/optimizer.h"

namespace moewb::engine::cuda {

// sqrt(sum over trainable parameters of sum grad^2), reduced in a fixed order (deterministic).
// Waits for the stream. Non-const: builds the set's multi-tensor plan on first use.
// Errors: kInternal, kResourceExhausted (workspace).
Result<double> parameterGradNormCuda(CudaContext& context, CudaParameters& params);

// Clips by `gradNorm` (optim.grad_clip > 0) and applies AdamW for 0-based `step` to every
// trainable parameter; returns the lr and clip factor used (as optimizerStep on the CPU).
Result<OptimizerStepResult> optimizerStepCuda(CudaContext& context, CudaParameters& params,
                                              const OptimSection& optim, int64_t step,
                                              double gradNorm);

}  // namespace moewb::engine::cuda
