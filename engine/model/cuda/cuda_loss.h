// The LM loss head on the GPU (model/lm_loss.h's CUDA twin): logits = h Wlm^T and the mean
// cross-entropy over the valid targets (ids in [0, V); others, e.g. image positions, ignored).
// The dense head writes the bf16 logits [N, V]; the loss value stays on the device ([1] fp32)
// until the step reads it.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "model/cpu/parameter.h"

namespace moewb::engine::cuda {

struct LossSavedCuda;  // kind-specific, defined in cuda_loss.cpp
struct LossStateCuda {
  LossStateCuda();
  ~LossStateCuda();
  LossStateCuda(LossStateCuda&&) noexcept;
  LossStateCuda& operator=(LossStateCuda&&) noexcept;
  std::unique_ptr<LossSavedCuda> saved;
  DeviceTensor<float> loss;  // [1] mean CE (nats)
};

// Fills state.loss from h[N, D], the LM head [V, D] and targets[N].
Status lossForwardCuda(CudaContext& context, const ModelDims& dims, const DeviceTensor<bf16>& h,
                       const bf16* lmHead, const DeviceTensor<int32_t>& targets,
                       LossStateCuda& state);

// dh[N, D] (allocated) of dLoss times the mean CE (1: the loss itself; a micro-batch's
// LossWeights::lm); adds dLoss dWlm into lmHeadGrad [V, D].
Result<DeviceTensor<bf16>> lossBackwardCuda(CudaContext& context, const ModelDims& dims,
                                            const DeviceTensor<bf16>& h, const bf16* lmHead,
                                            const DeviceTensor<int32_t>& targets,
                                            LossStateCuda& state, float dLoss, float* lmHeadGrad);

}  // namespace moewb::engine::cuda
