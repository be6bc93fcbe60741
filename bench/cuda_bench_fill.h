// Random device fills of the GPU benchmarks (cuda_bench_util.cu): element i depends only on
// (seed, i), so every run draws the same fresh, non-zero inputs without host work. Each call
// queues one kernel on `stream` and returns its launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda::bench {

// out[i] ~ mean + stddev N(0, 1).
Status fillNormalBf16(cudaStream_t stream, bf16* out, int64_t n, float mean, float stddev,
                      uint64_t seed);
Status fillNormalFloat(cudaStream_t stream, float* out, int64_t n, float mean, float stddev,
                       uint64_t seed);
// out[i] ~ U[lo, hi).
Status fillUniformFloat(cudaStream_t stream, float* out, int64_t n, float lo, float hi,
                        uint64_t seed);
// out[i] uniform over the integers of [lo, hi) (hi > lo, else kInvalidArgument).
Status fillUniformInt32(cudaStream_t stream, int32_t* out, int64_t n, int32_t lo, int32_t hi,
                        uint64_t seed);

}  // namespace moewb::engine::cuda::bench
