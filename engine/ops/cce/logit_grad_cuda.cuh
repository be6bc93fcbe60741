// Device helpers of the fused LM-head losses' strip kernels (ops/cce/cce_cuda.cu and
// cce_filter_cuda.cu): the soft-capped logit and the unscaled logit gradient of
// ops/chunk_loss/linear_loss.h. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// v[0..3] = p[0..3] with one 16-byte load (p 16-byte aligned).
__device__ __forceinline__ void loadFour(const float* p, float (&v)[4]) {
  const float4 four = *reinterpret_cast<const float4*>(p);
  v[0] = four.x;
  v[1] = four.y;
  v[2] = four.z;
  v[3] = four.w;
}

// One valid strip row's constants for gradFour.
struct GradRow {
  const float* z;     // the row's logits (fp32)
  __nv_bfloat16* g;   // the row's gradient (bf16)
  int64_t targetCol;  // y_t - colBegin (any value when the target is not in the strip)
  float lse, scale, zLossCoef, cap;
};

// The 4 bf16 of a group packed in 8 bytes (entry i in bits 16 i .. 16 i + 15).
__device__ __forceinline__ __nv_bfloat16 unpackFour(uint2 packed, int i) {
  const unsigned word = i < 2 ? packed.x : packed.y;
  return __ushort_as_bfloat16(static_cast<unsigned short>(word >> (16 * (i % 2))));
}

// dst[i] = entry i of `packed` for i < n; one 8-byte store when `vector` (dst 8-byte aligned,
// n = 4).
__device__ __forceinline__ void storeFour(__nv_bfloat16* dst, uint2 packed, int n, bool vector) {
  if (vector) {
    *reinterpret_cast<uint2*>(dst) = packed;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i < n) dst[i] = unpackFour(packed, i);
    }
  }
}

// bf16(dz) of the row's entries c .. c + n - 1, n = min(4, end - c), packed (entries past n are
// 0), with one 16-byte load when `vector` (z + c 16-byte aligned, c + 4 <= end); returns the max
// of |dz / g_t| over them. The same per-entry arithmetic as unscaledGrad * scale.
__device__ __forceinline__ float gradFourPacked(const GradRow& row, int64_t c, int64_t end,
                                                bool vector, uint2& packed) {
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int n = vector || end - c >= 4 ? 4 : int(end - c);
  if (vector) {
    loadFour(row.z + c, v);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i < n) v[i] = row.z[c + i];
    }
  }
  float maxAbs = 0.0f;
  float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i >= n) continue;
    const float grad = unscaledGrad(v[i], row.lse, c + i == row.targetCol, row.zLossCoef, row.cap);
    maxAbs = fmaxf(maxAbs, fabsf(grad));
    out[i] = grad * row.scale;
  }
  const __nv_bfloat162 lo = __floats2bfloat162_rn(out[0], out[1]);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(out[2], out[3]);
  packed = make_uint2(*reinterpret_cast<const unsigned*>(&lo),
                      *reinterpret_cast<const unsigned*>(&hi));
  return maxAbs;
}

// g[c + i] = bf16(dz) for i < min(4, end - c) (gradFourPacked, then stored at row.g + c); returns
// the max of |dz / g_t| over them.
__device__ __forceinline__ float gradFour(const GradRow& row, int64_t c, int64_t end,
                                          bool vector) {
  uint2 packed;
  const float maxAbs = gradFourPacked(row, c, end, vector, packed);
  storeFour(row.g + c, packed, vector || end - c >= 4 ? 4 : int(end - c), vector);
  return maxAbs;
}

// g[c + i] = 0 for i < min(4, end - c) (an ignored row), one 8-byte store when `vector`.
__device__ __forceinline__ void zeroFour(__nv_bfloat16* g, int64_t c, int64_t end, bool vector) {
  if (vector) {
    *reinterpret_cast<uint2*>(g + c) = make_uint2(0u, 0u);
  } else {
    for (int64_t i = c; i < end && i < c + 4; ++i) g[i] = __float2bfloat16(0.0f);
  }
}

}  // namespace moewb::engine::cuda
