// Element-wise device kernels every part of the CUDA backend uses: dtype casts, fills (the NaN
// poison of the GPU tests), scaled accumulation. Each launcher queues its kernels on `stream`
// (8 elements a thread with 16-byte accesses when every pointer is 16-byte aligned, plus one
// element a thread for the rest; the same per-element arithmetic either way) and returns the
// launch error; n may be 0 (nothing is launched).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

using bf16 = __nv_bfloat16;

// out[i] = bf16(in[i]) (round to nearest even).
Status castFloatToBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n);
// out[i] = float(in[i]).
Status castBf16ToFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n);
// out[i] = value.
Status fillFloat(cudaStream_t stream, float* out, float value, int64_t n);
Status fillBf16(cudaStream_t stream, bf16* out, float value, int64_t n);
Status fillInt32(cudaStream_t stream, int32_t* out, int32_t value, int64_t n);
// out[i] += scale * in[i] (fp32 accumulation into an fp32 buffer).
Status accumulateFloat(cudaStream_t stream, const float* in, float scale, float* out, int64_t n);
// out[i] = bf16(float(a[i]) + float(b[i])) (residual adds; out may alias a or b).
Status addBf16(cudaStream_t stream, const bf16* a, const bf16* b, bf16* out, int64_t n);
// out[i] = bf16(float(out[i]) + in[i]) (an fp32 gradient added into a bf16 one).
Status addFloatIntoBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n);
// out[i] += float(in[i]) (a bf16 gradient added into an fp32 one).
Status accumulateBf16IntoFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n);

// Blocks for a grid-stride kernel over n elements with 256 threads per block.
inline unsigned gridFor(int64_t n, int64_t threadsPerBlock = 256) {
  const int64_t blocks = (n + threadsPerBlock - 1) / threadsPerBlock;
  return unsigned(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

}  // namespace moewb::engine::cuda
