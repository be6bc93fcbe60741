// The MoE FFN of one decoder layer on the GPU, stage by stage as model/moe_ffn.h does it on the
// CPU (router -> permute -> experts -> combine (+ latent up-projection) + shared experts), with
// every stage a CUDA op (ops/*/..._cuda.h) and nothing copied to the host inside the layer: the
// routed row count, the per-expert counts and the aux-loss values stay on the device until the
// step reads them once (MoeStatsCuda).
// Precision: x, y and their gradients bf16; router logits, probabilities, routing weights and
// their gradients fp32; weight gradients fp32 (added into).
// Supported variants: softmax / sigmoid routers with route scale, groups and the selection bias;
// Switch, sequence and z losses; dropless dispatch; latent MoE; shared experts; SwiGLU and SiTU.
// (checkMoeSupportedCuda names what is not.)
#pragma once

#include <cstdint>
#include <string>

#include "cuda/cuda_context.h"
#include "ops/combine/combine_cuda.h"
#include "ops/experts/experts_cuda.h"
#include "ops/moe_variants/dense_ffn_cuda.h"
#include "ops/moe_variants/moe_options.h"
#include "ops/permute/permute_cuda.h"
#include "ops/router/router_cuda.h"

namespace moewb::engine::cuda {

struct MoeWeightsCuda {
  const bf16* router = nullptr;      // [E, D]
  const DeviceTensor<bf16>* gate = nullptr;  // [E, F, Dx]
  const DeviceTensor<bf16>* up = nullptr;    // [E, F, Dx]
  const DeviceTensor<bf16>* down = nullptr;  // [E, Dx, F]
  const bf16* sharedGate = nullptr;  // [S Fs, D]
  const bf16* sharedUp = nullptr;    // [S Fs, D]
  const bf16* sharedDown = nullptr;  // [D, S Fs]
  const bf16* latentDown = nullptr;  // [Dl, D]
  const bf16* latentUp = nullptr;    // [D, Dl]
  const bf16* latentNorm = nullptr;  // [Dl]
  const float* bias = nullptr;       // [E] selection bias on the device, or null
};

struct MoeGradsCuda {
  float* router = nullptr;
  DeviceTensor<float>* gate = nullptr;
  DeviceTensor<float>* up = nullptr;
  DeviceTensor<float>* down = nullptr;
  float* sharedGate = nullptr;
  float* sharedUp = nullptr;
  float* sharedDown = nullptr;
  float* latentDown = nullptr;
  float* latentUp = nullptr;
  float* latentNorm = nullptr;
};

struct MoeShapeCuda {
  int64_t tokens = 0;     // N
  int64_t dModel = 0;     // D
  int64_t numExperts = 0; // E
  int64_t dFf = 0;        // F
};

// What the forward keeps for the backward (all on the device).
struct MoeSavedCuda {
  MoeOptions options;
  DeviceTensor<float> logits;      // [N, E]
  DeviceRouterOutput route;
  DeviceAuxLoss switchAux;         // counts [1, E] and the Switch loss
  DeviceAuxLoss seqAux;            // when seqAuxLossCoef != 0
  DeviceTensor<float> zLoss;       // [1] when zLossCoef != 0
  DeviceDispatch plan;
  DeviceTensor<bf16> latentIn;     // [N, Dl]
  DeviceTensor<bf16> xPerm;        // [N k, Dx]
  DeviceExpertsSaved experts;
  DeviceTensor<bf16> yPerm;        // [N k, Dx]
  DeviceTensor<bf16> latentPre;    // [N, Dl]
  DeviceTensor<float> latentRstd;  // [N]
  DeviceTensor<bf16> latentOut;    // [N, Dl]
  DenseFfnSavedCuda shared;
};

// kUnimplemented naming the first MoE setting the CUDA path does not run yet, else ok.
Status checkMoeSupportedCuda(const MoeOptions& options);

// y[N, D] (allocated, kActivations) = MoE(x[N, D]); fills `saved`.
Result<DeviceTensor<bf16>> moeForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                                          const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                                          const MoeOptions& options, MoeSavedCuda& saved);

// dx[N, D] += dMoE/dx given dy; adds the weight gradients into `grads`.
Status moeBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                       const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                       const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                       const MoeGradsCuda& grads, DeviceTensor<bf16>& dx);

}  // namespace moewb::engine::cuda
