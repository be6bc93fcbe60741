// RMSNorm kernels (see rmsnorm_cuda.h): one block per row for the forward and dx, then a
// two-pass deterministic column reduction for dGain.
#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int64_t kMinRowsPerChunk = 64;  // rows summed by one dGain partial
constexpr int64_t kMaxChunks = 256;       // bound on the workspace rows
constexpr int kColTile = 32;              // dGain columns per block (one warp wide)
constexpr int kRowLanes = 8;              // row lanes per dGain block

// Sum over the block (blockDim.x == kRowThreads); every thread gets the result. `scratch` holds
// kRowThreads / 32 floats.
__device__ float blockSum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) total += scratch[w];
  return total;
}

__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_fwd_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gain, float eps,
                       bf16* __restrict__ y, float* __restrict__ rstd, int64_t d) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * d;
  float sumSq = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += kRowThreads) {
    const float v = __bfloat162float(xr[j]);
    sumSq += v * v;
  }
  sumSq = blockSum(sumSq, scratch);
  const float r = 1.0f / sqrtf(sumSq / float(d) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  bf16* yr = y + row * d;
  for (int64_t j = threadIdx.x; j < d; j += kRowThreads) {
    yr[j] = __float2bfloat16(__bfloat162float(xr[j]) * r * __bfloat162float(gain[j]));
  }
}

__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_bwd_kernel(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                       const bf16* __restrict__ gain, const float* __restrict__ rstd,
                       bf16* __restrict__ dx, int64_t d, bool accumulate) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * d;
  const bf16* dyr = dy + row * d;
  const float r = rstd[row];
  float dot = 0.0f;  // sum_j g_j xhat_j
  for (int64_t j = threadIdx.x; j < d; j += kRowThreads) {
    dot += __bfloat162float(dyr[j]) * __bfloat162float(gain[j]) * __bfloat162float(xr[j]) * r;
  }
  dot = blockSum(dot, scratch);
  const float meanDot = dot / float(d);
  bf16* dxr = dx + row * d;
  for (int64_t j = threadIdx.x; j < d; j += kRowThreads) {
    const float g = __bfloat162float(dyr[j]) * __bfloat162float(gain[j]);
    float v = r * (g - __bfloat162float(xr[j]) * r * meanDot);
    if (accumulate) v += __bfloat162float(dxr[j]);
    dxr[j] = __float2bfloat16(v);
  }
}

// partial[chunk, col] = sum over the chunk's rows of dy * x * rstd. Block (kColTile, kRowLanes),
// grid (ceil(d / kColTile), chunks).
__global__ void rmsnorm_dgain_partial_kernel(const bf16* __restrict__ dy,
                                             const bf16* __restrict__ x,
                                             const float* __restrict__ rstd,
                                             float* __restrict__ partial, int64_t n, int64_t d,
                                             int64_t rowsPerChunk) {
  __shared__ float sums[kRowLanes][kColTile + 1];
  const int64_t col = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t rowBegin = int64_t(blockIdx.y) * rowsPerChunk;
  const int64_t rowEnd = rowBegin + rowsPerChunk < n ? rowBegin + rowsPerChunk : n;
  float acc = 0.0f;
  if (col < d) {
    for (int64_t row = rowBegin + threadIdx.y; row < rowEnd; row += kRowLanes) {
      acc += __bfloat162float(dy[row * d + col]) * __bfloat162float(x[row * d + col]) * rstd[row];
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += sums[lane][threadIdx.x];
    partial[int64_t(blockIdx.y) * d + col] = total;
  }
}

// dGain[col] += sum over chunks (in order) of partial[chunk, col].
__global__ void rmsnorm_dgain_final_kernel(const float* __restrict__ partial,
                                           float* __restrict__ dGain, int64_t chunks, int64_t d) {
  for (int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; col < d;
       col += int64_t(gridDim.x) * blockDim.x) {
    float total = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) total += partial[c * d + col];
    dGain[col] += total;
  }
}

}  // namespace

Status rmsNormForwardCuda(cudaStream_t stream, const bf16* x, const bf16* gain, float eps, bf16* y,
                          float* rstd, int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(n < (int64_t(1) << 31));
  rmsnorm_fwd_kernel<<<unsigned(n), kRowThreads, 0, stream>>>(x, gain, eps, y, rstd, d);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

int64_t rmsNormDgainChunks(int64_t n) {
  if (n <= 0) return 0;
  int64_t chunks = (n + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  const int64_t rowsPerChunk = (n + chunks - 1) / chunks;
  return (n + rowsPerChunk - 1) / rowsPerChunk;
}

Status rmsNormBackwardLaunch(cudaStream_t stream, const bf16* dy, const bf16* x, const bf16* gain,
                             const float* rstd, bf16* dx, float* dGain, float* partial, int64_t n,
                             int64_t d, bool accumulate) {
  if (n <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(n < (int64_t(1) << 31));
  rmsnorm_bwd_kernel<<<unsigned(n), kRowThreads, 0, stream>>>(dy, x, gain, rstd, dx, d, accumulate);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  const int64_t chunks = rmsNormDgainChunks(n);
  const int64_t rowsPerChunk = (n + chunks - 1) / chunks;
  const dim3 grid(unsigned((d + kColTile - 1) / kColTile), unsigned(chunks));
  rmsnorm_dgain_partial_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(dy, x, rstd, partial,
                                                                               n, d, rowsPerChunk);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  rmsnorm_dgain_final_kernel<<<gridFor(d), 256, 0, stream>>>(partial, dGain, chunks, d);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
