// Private to ops/attention: host launchers of the dense causal flash attention kernels
// (flash_attention_cuda.cuh) for head dims 64 and 128. Raw device pointers, the stream given
// explicitly, no allocation, no host synchronisation. Layout as attention_cuda.h: q, k, v,
// context, dContext, dq, dk, dv bf16 [N, H*K] (token n = b*T + t, head h in columns h*K ..);
// lse, delta fp32 [B, H, T], lse the natural-log log-sum-exp of the scaled masked score rows.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// True when the flash kernels handle this head dim (64 or 128).
bool flashAttentionSupports(int64_t headDim);

// context [N, H*K] and lse [B, H, T] (both overwritten) from q, k, v; scale = 1/sqrt(K).
// One launch. Errors: kInvalidArgument (head dim, sizes beyond int range), launch errors.
Status flashAttentionForward(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t heads,
                             int64_t headDim, const bf16* q, const bf16* k, const bf16* v,
                             float* lse, bf16* context);

// dq, dk, dv [N, H*K] (overwritten) from dContext, q, k, v, the forward's context and lse.
// delta is fp32 [B, H, T] workspace (overwritten). Three launches (delta, dK/dV, dQ);
// deterministic (no atomics). Errors as flashAttentionForward.
Status flashAttentionBackward(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t heads,
                              int64_t headDim, const bf16* dContext, const bf16* q, const bf16* k,
                              const bf16* v, const bf16* context, const float* lse, float* delta,
                              bf16* dq, bf16* dk, bf16* dv);

}  // namespace moewb::engine::cuda
