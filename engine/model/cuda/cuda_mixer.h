// The token mixer of a decoder layer on the GPU (model/mixer.h's CUDA twin): 'A' causal softmax
// attention, 'K' KDA linear attention, 'S' gated sparse attention, each run by its CUDA op with the
// layer's parameters in mixerParameterSpecs order. Activations bf16, weight gradients fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "model/cuda/cuda_parameters.h"
#include "model/cpu/parameter.h"

namespace moewb::engine::cuda {

// What a mixer's forward keeps for its backward (kind-specific, defined in cuda_mixer.cpp).
struct MixerStateCuda;
struct MixerSavedCuda {
  MixerSavedCuda();
  ~MixerSavedCuda();
  MixerSavedCuda(MixerSavedCuda&&) noexcept;
  MixerSavedCuda& operator=(MixerSavedCuda&&) noexcept;
  std::unique_ptr<MixerStateCuda> state;
};

// The [1] weighted indexer KL loss of a sparse mixer's forward, or null for the other kinds.
const DeviceTensor<float>* mixerAuxLossCuda(const MixerSavedCuda& saved);

// kUnimplemented naming the mixer kind when its CUDA op is not available, else ok.
Status checkMixerSupportedCuda(char kind, const ModelDims& dims);

// y[N, D] for x[N, D] (already normed). `params` in mixerParameterSpecs(kind) order.
Result<DeviceTensor<bf16>> mixerForwardCuda(CudaContext& context, char kind, const ModelDims& dims,
                                            int64_t step, const DeviceTensor<bf16>& x,
                                            const std::vector<CudaParameter*>& params,
                                            MixerSavedCuda& saved);

// dx[N, D] += dMixer/dx given dy; adds into the params' grads.
Status mixerBackwardCuda(CudaContext& context, char kind, const ModelDims& dims, int64_t step,
                         const DeviceTensor<bf16>& dy, const DeviceTensor<bf16>& x,
                         const std::vector<CudaParameter*>& params, MixerSavedCuda& saved,
                         DeviceTensor<bf16>& dx);

}  // namespace moewb::engine::cuda
