// The KDA mixer layer on the GPU (kda_layer_cuda.cpp, its element-wise kernels in
// kda_layer_cuda.cu): kda_layer.cpp on the device. Projections through runtime/cuda/gemm.h (bf16
// operands, fp32 accumulation, weight gradients accumulated into fp32 by the GEMM with beta = 1,
// dx accumulated in fp32 and rounded once); the core, gate, short conv and L2 norm are the op
// kernels of ops/kda/kda_cuda.h. Every launcher queues work on the context's stream and returns
// the launch or allocation error; nothing synchronises with the host.
#pragma once

#include "model/layers/kda_layer.h"
#include "ops/kda/kda_cuda.h"

namespace moewb::engine::cuda {

// Device views of the layer's bf16 compute weights (shapes as KdaWeights).
struct KdaWeightsCuda {
  const bf16* wq;          // [P, D]
  const bf16* wk;          // [P, D]
  const bf16* wv;          // [P, D]
  const bf16* convQ;       // [P, W]
  const bf16* convK;       // [P, W]
  const bf16* convV;       // [P, W]
  const bf16* wf1;         // [R, D]
  const bf16* wf2;         // [P, R]
  const bf16* aLog;        // [H]
  const bf16* dtBias;      // [P]
  const bf16* wb;          // [H, D]
  const bf16* wg1;         // [R, D]
  const bf16* wg2;         // [P, R]
  const bf16* bg;          // [P]
  const bf16* normWeight;  // [K]
  const bf16* wo;          // [D, P]
};

// fp32 weight gradients, same fields and shapes; the backward ADDS into them.
struct KdaGradsCuda {
  float* wq;
  float* wk;
  float* wv;
  float* convQ;
  float* convK;
  float* convV;
  float* wf1;
  float* wf2;
  float* aLog;
  float* dtBias;
  float* wb;
  float* wg1;
  float* wg2;
  float* bg;
  float* normWeight;
  float* wo;
};

// Activations kept by kdaLayerForwardCuda for kdaLayerBackwardCuda (kActivations; bf16 unless
// noted). Like KdaSaved, except that `gate` is stored without its bias bg.
struct KdaSavedCuda {
  DeviceTensor<bf16> qProj, kProj, vProj;  // [N, P] x W^T, inputs of the convs
  DeviceTensor<bf16> qConv, kConv, vConv;  // [N, P] conv outputs before SiLU
  DeviceTensor<bf16> qAct, kAct;           // [N, P] after SiLU, inputs of the L2 norms
  DeviceTensor<float> qRinv, kRinv;        // [N, H] 1 / L2 norms
  DeviceTensor<bf16> q, k, v;              // [N, P] core inputs (q scaled by K^-1/2)
  DeviceTensor<bf16> fLow;                 // [N, R] x Wf1^T
  DeviceTensor<bf16> f;                    // [N, P] gate input
  DeviceTensor<float> g;                   // [N, P] log decay
  DeviceTensor<float> beta;                // [N, H] sigmoid(x Wb^T)
  KdaChunkSavedCuda core;                  // Aqk and M per chunk (+ the kept intermediates)
  DeviceTensor<bf16> o;                    // [N, P] core output
  DeviceTensor<float> oRstd;               // [N, H] output RMSNorm 1/rms
  DeviceTensor<bf16> gLow;                 // [N, R] x Wg1^T
  DeviceTensor<bf16> gate;                 // [N, P] gLow Wg2^T (bias bg NOT included)
  DeviceTensor<bf16> ctx;                  // [N, P] input of Wo
};

// y [N, D] (preallocated) for x [N, D]; fills `saved` (kdaForward). Zero initial state.
// keepIntermediates (kda.keep_intermediates): the core keeps its chunk intermediates in
// saved.core so that the backward does not recompute them (kdaChunkForwardCuda); same bits.
Status kdaLayerForwardCuda(CudaContext& context, const KdaDims& dims, const bf16* x,
                           const KdaWeightsCuda& weights, bf16* y, KdaSavedCuda& saved,
                           bool keepIntermediates = false);

// dx [N, D] (preallocated, overwritten) for dy [N, D]; ADDS every weight gradient into `grads`
// (kdaBackward). `x` and `saved` are those of the matching forward.
Status kdaLayerBackwardCuda(CudaContext& context, const KdaDims& dims, const bf16* dy,
                            const bf16* x, const KdaWeightsCuda& weights,
                            const KdaSavedCuda& saved, const KdaGradsCuda& grads, bf16* dx);

}  // namespace moewb::engine::cuda
