// Random device fills of the GPU benchmarks (cuda_bench_fill.h): element i is a function of
// (seed, i) through splitmix64, normals by Box-Muller. Grid-stride loops, one launch per fill.
#include "runtime/cuda/cuda_check.h"
#include "cuda_bench_fill.h"

namespace moewb::engine::cuda::bench {
namespace {

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Two 24-bit uniforms from one hash: u1 in (0, 1], u2 in [0, 1).
__device__ __forceinline__ void uniforms(uint64_t key, int64_t i, float& u1, float& u2) {
  const uint64_t r = mix64(key + uint64_t(i));
  u1 = (float((r >> 40) & 0xFFFFFFull) + 1.0f) * (1.0f / 16777216.0f);
  u2 = float(r & 0xFFFFFFull) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ float normalAt(uint64_t key, int64_t i) {
  float u1, u2;
  uniforms(key, i, u1, u2);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

template <typename T>
__global__ void bench_fill_normal_kernel(T* __restrict__ out, int64_t n, float mean, float stddev,
                                         uint64_t key) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = mean + stddev * normalAt(key, i);
    if constexpr (sizeof(T) == 2) {
      out[i] = __float2bfloat16(v);
    } else {
      out[i] = v;
    }
  }
}

__global__ void bench_fill_uniform_kernel(float* __restrict__ out, int64_t n, float lo, float hi,
                                          uint64_t key) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float u1 = 0, u2 = 0;
    uniforms(key, i, u1, u2);
    out[i] = lo + (hi - lo) * u2;
  }
}

__global__ void bench_fill_int_kernel(int32_t* __restrict__ out, int64_t n, int32_t lo,
                                      uint64_t range, uint64_t key) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = int32_t(int64_t(lo) + int64_t(mix64(key + uint64_t(i)) % range));
  }
}

}  // namespace

Status fillNormalBf16(cudaStream_t stream, bf16* out, int64_t n, float mean, float stddev,
                      uint64_t seed) {
  if (n <= 0) return Status::ok();
  bench_fill_normal_kernel<bf16><<<gridFor(n), 256, 0, stream>>>(out, n, mean, stddev, mix64(seed));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status fillNormalFloat(cudaStream_t stream, float* out, int64_t n, float mean, float stddev,
                       uint64_t seed) {
  if (n <= 0) return Status::ok();
  bench_fill_normal_kernel<float><<<gridFor(n), 256, 0, stream>>>(out, n, mean, stddev,
                                                                 mix64(seed));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status fillUniformFloat(cudaStream_t stream, float* out, int64_t n, float lo, float hi,
                        uint64_t seed) {
  if (n <= 0) return Status::ok();
  bench_fill_uniform_kernel<<<gridFor(n), 256, 0, stream>>>(out, n, lo, hi, mix64(seed));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status fillUniformInt32(cudaStream_t stream, int32_t* out, int64_t n, int32_t lo, int32_t hi,
                        uint64_t seed) {
  if (n <= 0) return Status::ok();
  if (hi <= lo) return invalidArgument("fillUniformInt32: empty range");
  bench_fill_int_kernel<<<gridFor(n), 256, 0, stream>>>(out, n, lo, uint64_t(int64_t(hi) - lo),
                                                        mix64(seed));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda::bench
