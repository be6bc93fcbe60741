// Private to ops/attention: launchers of the causal softmax kernels used between the cuBLAS
// GEMMs of attention_cuda.cpp (host code that allocates DeviceTensors stays in .cpp files).
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// For `heads` [T, T] fp32 score blocks s (already scaled), row t of each block: p = causal
// softmax (zeros for j > t) written as bf16 to p [heads, T, T], and lse[head * T + t] = m + log l.
Status attentionSoftmaxForward(cudaStream_t stream, const float* s, bf16* p, float* lse,
                               int64_t heads, int64_t seqLen);

// Backward rows: p = exp(s - lse) (0 for j > t), delta = sum_j p dp, ds = p (dp - delta);
// writes p and ds as bf16 [heads, T, T].
Status attentionSoftmaxBackward(cudaStream_t stream, const float* s, const float* dp,
                                const float* lse, bf16* p, bf16* ds, int64_t heads, int64_t seqLen);

}  // namespace moewb::engine::cuda
