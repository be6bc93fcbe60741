// The MoE FFN of one decoder layer on the GPU, stage by stage as model/moe_ffn.h does it on the
// CPU (router -> permute -> experts -> combine (+ latent up-projection) + shared experts), with
// every stage a CUDA op (ops/*/..._cuda.h) and nothing copied to the host inside the layer: the
// routed row count, the per-expert counts and the aux-loss values stay on the device until the
// step reads them once (MoeStatsCuda).
// Precision: x, y and their gradients bf16; router logits, probabilities, routing weights and
// their gradients fp32; weight gradients fp32 (added into).
// Every variant of MoeOptions runs: softmax / sigmoid routers with route scale, groups and the
// selection bias; Switch, sequence and z losses; capacity with both drop policies; latent MoE;
// shared experts; SwiGLU and SiTU; the permute-into-experts and combine-into-experts fusions.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_context.h"
#include "ops/combine/combine_cuda.h"
#include "ops/experts/experts_cuda.h"
#include "ops/capacity/capacity_cuda.h"
#include "ops/dense_ffn/dense_ffn_cuda.h"
#include "model/moe/moe_options.h"
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
  int64_t capacity = -1;           // pairs kept per expert; -1 = dropless
  DeviceCapacityMask mask;         // keep [N, k] and dropped [E] (capacity >= 0)
  DeviceDispatch plan;
  DeviceTensor<bf16> latentIn;     // [N, Dl]
  DeviceTensor<bf16> xPerm;        // [N k, Dx] (empty with permuteIntoExperts)
  DeviceTensor<float> rowWeight;   // [N k] routing weight per row (combineIntoExperts)
  DeviceExpertsSaved experts;
  DeviceTensor<bf16> yPerm;        // [N k, Dx] (released with combineIntoExperts)
  DeviceTensor<bf16> latentPre;    // [N, Dl]
  DeviceTensor<float> latentRstd;  // [N]
  DeviceTensor<bf16> latentOut;    // [N, Dl]
  DenseFfnSavedCuda shared;
};

// Gradients handed from one backward stage to the next (as MoeBackwardState on the CPU).
struct MoeBackwardStateCuda {
  DeviceTensor<bf16> dYPerm;       // [N k, Dx]; with combineIntoExperts the token gradient [N, Dx]
  DeviceTensor<float> dTopWeight;  // [N, k]
  DeviceTensor<bf16> dXPerm;       // [N k, Dx]
};

// Forward stages (x [N, D] is the normed layer input throughout), as model/moe_ffn.h's:
// router (logits, routing, aux losses, capacity mask) -> permute (plan, latent down-projection,
// gather unless permuteIntoExperts) -> experts -> combine (+ latent up-projection, + shared
// experts; returns y [N, D]).
Status moeRouterForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                            const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                            const MoeOptions& options, MoeSavedCuda& saved);
Status moePermuteForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                             const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                             MoeSavedCuda& saved);
Status moeExpertsForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                             const MoeWeightsCuda& w, MoeSavedCuda& saved);
Result<DeviceTensor<bf16>> moeCombineForwardCuda(CudaContext& context,
                                                 const DeviceTensor<bf16>& x,
                                                 const MoeWeightsCuda& w,
                                                 const MoeShapeCuda& shape, MoeSavedCuda& saved);

// Backward stages in reverse; the last one adds dMoE/dx into dx [N, D] and the shared experts'.
Status moeCombineBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                              const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                              const MoeSavedCuda& saved, const MoeGradsCuda& grads,
                              MoeBackwardStateCuda& state);
// Swap's recompute: writes saved.experts' gate and up pre-activations and hidden rows again
// (those dropped after the forward are allocated anew), bitwise as moeExpertsForwardCuda did,
// from the same x and routing. Call before moeExpertsBackwardCuda.
Status moeExpertsRecomputeCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                               const MoeWeightsCuda& w, MoeSavedCuda& saved);
Status moeExpertsBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                              const MoeWeightsCuda& w, const MoeSavedCuda& saved,
                              const MoeGradsCuda& grads, MoeBackwardStateCuda& state);
Status moePermuteBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                              const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                              const MoeSavedCuda& saved, const MoeGradsCuda& grads,
                              const MoeBackwardStateCuda& state, DeviceTensor<bf16>& dx);
// The router (logit gradients of the weights and the aux losses) and the shared experts.
Status moeRouterBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                             const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                             const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                             const MoeGradsCuda& grads, const MoeBackwardStateCuda& state,
                             DeviceTensor<bf16>& dx);

// The whole layer, stage after stage (tests and benchmarks): y [N, D] and its backward.
Result<DeviceTensor<bf16>> moeForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                                          const MoeWeightsCuda& w, const MoeShapeCuda& shape,
                                          const MoeOptions& options, MoeSavedCuda& saved);
Status moeBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                       const DeviceTensor<bf16>& x, const MoeWeightsCuda& w,
                       const MoeShapeCuda& shape, const MoeSavedCuda& saved,
                       const MoeGradsCuda& grads, DeviceTensor<bf16>& dx);

}  // namespace moewb::engine::cuda
