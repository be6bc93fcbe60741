// Device helpers of the fused LM-head losses' strip kernels (ops/cce/cce_cuda.cu and
// cce_filter_cuda.cu): the soft-capped logit and the unscaled logit gradient of
// ops/chunk_loss/linear_loss.h. Device code only.
#pragma once

#include <cuda_runtime.h>

namespace moewb::engine::cuda {

__device__ __forceinline__ float capLogit(float z, float cap) {
  return cap > 0.0f ? cap * tanhf(z / cap) : z;
}

// Unscaled dz / g_t of entry (t, v) of a valid token: (exp(zc - lse) (1 + 2 lambda lse) -
// [v == y]) (1 - (zc / cap)^2 when cap > 0).
__device__ __forceinline__ float unscaledGrad(float z, float rowLse, bool isTarget, float zLossCoef,
                                              float cap) {
  const float zc = capLogit(z, cap);
  float grad = expf(zc - rowLse) * (1.0f + 2.0f * zLossCoef * rowLse) - (isTarget ? 1.0f : 0.0f);
  if (cap > 0.0f) {
    const float u = zc / cap;
    grad *= 1.0f - u * u;
  }
  return grad;
}

}  // namespace moewb::engine::cuda
