// Private to ops/attnres: the AttnRes kernel launchers (attnres_cuda.cu) that attnres_cuda.cpp
// calls after validating its arguments and allocating the backward's partial-sum workspace.
// Kept free of the CPU headers so that nvcc only sees CUDA runtime types.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

inline constexpr int kAttnResTableSize = 256;  // == kAttnResMaxSources

struct AttnResSourceTable {
  const bf16* ptr[kAttnResTableSize];  // [count] source rows [n, d]
};
template <typename G>
struct AttnResGradTable {
  G* ptr[kAttnResTableSize];  // [count] source gradients [n, d] (null: skipped)
};

// Largest d the kernels accept (fp32 row in dynamic shared memory).
inline constexpr int64_t kAttnResMaxWidth = 50000;

Status attnResForwardLaunch(cudaStream_t stream, const AttnResSourceTable& sources, int count,
                            int64_t n, int64_t d, const bf16* query, const bf16* keyGain, float eps,
                            float scale, bf16* out);

// Rows of the backward's fp32 partial-sum workspace [chunks, d] for n tokens.
int64_t attnResBackwardChunks(int64_t n);

// `partial`: fp32 [attnResBackwardChunks(n), d] workspace.
template <typename G>
Status attnResBackwardLaunch(cudaStream_t stream, const AttnResSourceTable& sources,
                             const AttnResGradTable<G>& dSources, int count, int64_t n, int64_t d,
                             const bf16* query, const bf16* keyGain, float eps, float scale,
                             const bf16* dOut, float* partial, float* dQuery, float* dKeyGain);

}  // namespace moewb::engine::cuda
