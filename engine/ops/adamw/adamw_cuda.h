// The optimizer kernels of the GPU trainer: fused AdamW over fp32 master weights (ops/adamw/
// adamw.h, same formula and bias correction as adamw_ref.cpp) that also writes the bf16 compute
// copy, the global gradient L2 norm over a list of fp32 gradient buffers, the clip factor of
// optim/optimizer.cpp, and in-place gradient scaling.
//
// Clipping without a host round trip: globalGradNormCuda leaves the norm on the device,
// gradClipScaleCuda turns it into the factor (gradClip / (norm + 1e-6) when norm > gradClip > 0,
// else 1) on the device, and adamwUpdateCuda reads that factor through `gradScale` (as the CPU
// passes clipScale). The trainer may still copy the norm to the host to log it and check it is
// finite; nothing here requires it.
// Determinism: the norm is a fixed two-pass reduction (per-buffer block partials in double,
// then one block in order), bitwise reproducible for the same buffer sizes.
// Costs: AdamW about 5 fp32 words + 1 bf16 of traffic per element; the norm reads every gradient
// once; one launch per buffer (the list is walked on the host). multi_tensor_adamw.h does a whole
// parameter set in one launch.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/adamw/adamw.h"

namespace moewb::engine::cuda {

// One AdamW step on param/m/v [n] (fp32, in place) from grad [n] (fp32):
//   g' = g * gradScale[0]; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
//   p = p * (decay ? 1 - lr wd : 1) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// and, when paramBf16 is not null, paramBf16[i] = bf16(p[i]) (round to nearest even).
// gradScale: a device scalar, or nullptr for 1. Scalar factors are formed in double on the host
// and applied in fp32 (as the fp32 CPU reference does). Errors: launch errors.
Status adamwUpdateCuda(cudaStream_t stream, float* param, const float* grad, float* m, float* v,
                       bf16* paramBf16, int64_t n, const AdamWHyper& hyper, bool decay,
                       const float* gradScale);

// norm[0] (device, double) = sqrt(sum over buffers i of sum_j grads[i][j]^2), squares summed in
// double. grads and sizes have the same length (may be 0: norm = 0). Allocates a small double
// workspace. Errors: kResourceExhausted, launch errors.
Status globalGradNormCuda(CudaContext& context, const std::vector<const float*>& grads,
                          const std::vector<int64_t>& sizes, double* norm);

// scale[0] = (gradClip > 0 && norm[0] > gradClip) ? gradClip / (norm[0] + 1e-6) : 1 (device
// scalars; optim/optimizer.cpp's clipScale). Errors: launch errors.
Status gradClipScaleCuda(cudaStream_t stream, const double* norm, double gradClip, float* scale);

// grad[i] *= scale[0] for i < n (scale a device scalar). Errors: launch errors.
Status scaleGradsCuda(cudaStream_t stream, float* grad, int64_t n, const float* scale);

}  // namespace moewb::engine::cuda
