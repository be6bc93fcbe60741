// Strip kernels of the fused LM-head losses (see cce_cuda_kernels.h): online log-sum-exp folding,
// the final per-token terms and mean, and the logit gradient.
#include <algorithm>
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/cce/cce_cuda_kernels.h"
#include "ops/cce/logit_grad_cuda.cuh"

namespace moewb::engine::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kGradThreads = 256;
constexpr int64_t kGradGroupsPerThread = 4;  // groups of 4 columns per thread and row
constexpr int kFinishThreads = 1024;

// Merges (mOther, lOther) into the running (m, l) of exp-sums relative to their max.
__device__ __forceinline__ void mergeMaxSum(float& m, float& l, float mOther, float lOther) {
  const float mNew = fmaxf(m, mOther);
  if (mNew == -INFINITY) return;
  l = (m == -INFINITY ? 0.0f : l * expf(m - mNew)) +
      (mOther == -INFINITY ? 0.0f : lOther * expf(mOther - mNew));
  m = mNew;
}

// One warp per strip row, each lane folding groups of 4 logits (one 16-byte load when `vector`:
// cols a multiple of 4) into its running (max, sum), rescaled once per group.
__global__ void cce_fwd_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                               int64_t rowBegin, int64_t colBegin,
                               const int32_t* __restrict__ targets, float cap,
                               float* __restrict__ runMax, float* __restrict__ runSum,
                               float* __restrict__ targetLogit, bool vector) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const float* zr = z + r * cols;
  float m = -INFINITY, l = 0.0f;
  const int64_t groups = (cols + 3) / 4;
  for (int64_t q = lane; q < groups; q += 32) {
    const int64_t c = q * 4;
    float x[4];
    if (vector) {
      loadFour(zr + c, x);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = c + i < cols ? zr[c + i] : -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = capLogit(x[i], cap);
    const float groupMax = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    if (groupMax > m) {
      l *= expf(m - groupMax);
      m = groupMax;
    }
    l += expf(x[0] - m) + expf(x[1] - m) + expf(x[2] - m) + expf(x[3] - m);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o);
    const float lo = __shfl_xor_sync(0xffffffffu, l, o);
    mergeMaxSum(m, l, mo, lo);
  }
  if (lane == 0) {
    const int64_t t = rowBegin + r;
    float rm = runMax[t], rl = runSum[t];
    mergeMaxSum(rm, rl, m, l);
    runMax[t] = rm;
    runSum[t] = rl;
    const int64_t y = targets[t];
    if (y >= colBegin && y < colBegin + cols) targetLogit[t] = capLogit(zr[y - colBegin], cap);
  }
}

__global__ void __launch_bounds__(kFinishThreads)
    cce_finish_kernel(const float* __restrict__ runMax, const float* __restrict__ runSum,
                      const float* __restrict__ targetLogit, const int32_t* __restrict__ targets,
                      int64_t n, int64_t vocab, int32_t ignoreIndex, double zLossCoef,
                      float* __restrict__ lse, float* __restrict__ loss, float* __restrict__ zLoss,
                      int32_t* __restrict__ validCount) {
  __shared__ double ceSums[kFinishThreads];
  __shared__ double zSums[kFinishThreads];
  __shared__ long long counts[kFinishThreads];
  double ce = 0.0, zs = 0.0;
  long long count = 0;
  for (int64_t t = threadIdx.x; t < n; t += kFinishThreads) {
    const float rowLse = runMax[t] + logf(runSum[t]);
    lse[t] = rowLse;
    const int32_t y = targets[t];
    if (y == ignoreIndex || y < 0 || int64_t(y) >= vocab) continue;
    ce += double(rowLse) - double(targetLogit[t]);
    zs += zLossCoef * double(rowLse) * double(rowLse);
    ++count;
  }
  ceSums[threadIdx.x] = ce;
  zSums[threadIdx.x] = zs;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int stride = kFinishThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      ceSums[threadIdx.x] += ceSums[threadIdx.x + stride];
      zSums[threadIdx.x] += zSums[threadIdx.x + stride];
      counts[threadIdx.x] += counts[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const long long valid = counts[0];
    loss[0] = valid > 0 ? float(ceSums[0] / double(valid)) : 0.0f;
    if (zLoss != nullptr) zLoss[0] = valid > 0 ? float(zSums[0] / double(valid)) : 0.0f;
    validCount[0] = int32_t(valid);
  }
}

// Block (r, j): strip row r, groups of 4 columns j * 256 + threadIdx.x, ... (vector: cols a
// multiple of 4, so every group is 16-byte aligned in z and 8-byte aligned in g).
__global__ void __launch_bounds__(kGradThreads)
    cce_bwd_kernel(const float* __restrict__ z, int64_t rows, int64_t cols, int64_t rowBegin,
                   int64_t colBegin, const int32_t* __restrict__ targets, int64_t vocab,
                   int32_t ignoreIndex, float zLossCoef, float cap, const float* __restrict__ lse,
                   const int32_t* __restrict__ validCount, float dLoss, bf16* __restrict__ g,
                   bool vector) {
  const int64_t r = blockIdx.x;
  const int32_t valid = validCount[0];
  const int64_t t = rowBegin + r;
  const int32_t y = targets[t];
  const bool live = !(y == ignoreIndex || y < 0 || int64_t(y) >= vocab || valid == 0);
  const GradRow row{z + r * cols, g + r * cols, int64_t(y) - colBegin, live ? lse[t] : 0.0f,
                    valid > 0 ? dLoss / float(valid) : 0.0f, zLossCoef, cap};
  const int64_t groups = (cols + 3) / 4;
  for (int64_t q = int64_t(blockIdx.y) * kGradThreads + threadIdx.x; q < groups;
       q += int64_t(gridDim.y) * kGradThreads) {
    if (live) {
      gradFour(row, q * 4, cols, vector);
    } else {
      zeroFour(row.g, q * 4, cols, vector);
    }
  }
}

__global__ void __launch_bounds__(kFinishThreads)
    cce_count_kernel(const int32_t* __restrict__ targets, int64_t n, int64_t vocab,
                     int32_t ignoreIndex, int32_t* __restrict__ validCount) {
  __shared__ long long counts[kFinishThreads];
  long long count = 0;
  for (int64_t t = threadIdx.x; t < n; t += kFinishThreads) {
    const int32_t y = targets[t];
    count += (y != ignoreIndex && y >= 0 && int64_t(y) < vocab) ? 1 : 0;
  }
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int stride = kFinishThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) counts[threadIdx.x] += counts[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) validCount[0] = int32_t(counts[0]);
}

__global__ void cce_lse_rows_kernel(const float* __restrict__ runMax,
                                    const float* __restrict__ runSum, int64_t rowBegin,
                                    int64_t rows, float* __restrict__ lse) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = rowBegin + r;
    lse[t] = runMax[t] + logf(runSum[t]);
  }
}

// In place safe (same index read then written by one thread).
__global__ void cce_scale_bf16_kernel(const bf16* in, float scale, bf16* out, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(scale * __bfloat162float(in[i]));
  }
}

}  // namespace

Status linearLossFoldStrip(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                           int64_t rowBegin, int64_t colBegin, const int32_t* targets, float cap,
                           float* runMax, float* runSum, float* targetLogit) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  MOEWB_CHECK(blocks < (int64_t(1) << 31));
  cce_fwd_kernel<<<unsigned(blocks), kWarpsPerBlock * 32, 0, stream>>>(
      z, rows, cols, rowBegin, colBegin, targets, cap, runMax, runSum, targetLogit,
      cols % 4 == 0);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status linearLossFinish(cudaStream_t stream, const float* runMax, const float* runSum,
                        const float* targetLogit, const int32_t* targets, int64_t n, int64_t vocab,
                        const LinearLossOptions& options, float* lse, float* loss, float* zLoss,
                        int32_t* validCount) {
  cce_finish_kernel<<<1, kFinishThreads, 0, stream>>>(runMax, runSum, targetLogit, targets, n,
                                                      vocab, options.ignoreIndex, options.zLossCoef,
                                                      lse, loss, zLoss, validCount);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status linearLossGradStrip(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                           int64_t rowBegin, int64_t colBegin, const int32_t* targets,
                           int64_t vocab, const LinearLossOptions& options, const float* lse,
                           const int32_t* validCount, float dLoss, bf16* g) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  MOEWB_CHECK(rows < (int64_t(1) << 31));
  const int64_t groups = (cols + 3) / 4, perBlock = kGradThreads * kGradGroupsPerThread;
  const int64_t chunks = std::clamp<int64_t>((groups + perBlock - 1) / perBlock, 1, 65535);
  cce_bwd_kernel<<<dim3(unsigned(rows), unsigned(chunks)), kGradThreads, 0, stream>>>(
      z, rows, cols, rowBegin, colBegin, targets, vocab, options.ignoreIndex,
      float(options.zLossCoef), float(options.softCap), lse, validCount, dLoss, g, cols % 4 == 0);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status linearLossCountValid(cudaStream_t stream, const int32_t* targets, int64_t n, int64_t vocab,
                            int32_t ignoreIndex, int32_t* validCount) {
  cce_count_kernel<<<1, kFinishThreads, 0, stream>>>(targets, n, vocab, ignoreIndex, validCount);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status linearLossLseRows(cudaStream_t stream, const float* runMax, const float* runSum,
                         int64_t rowBegin, int64_t rows, float* lse) {
  if (rows <= 0) return Status::ok();
  cce_lse_rows_kernel<<<gridFor(rows), 256, 0, stream>>>(runMax, runSum, rowBegin, rows, lse);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status linearLossScaleBf16(cudaStream_t stream, const bf16* in, float scale, bf16* out,
                           int64_t count) {
  if (count <= 0) return Status::ok();
  cce_scale_bf16_kernel<<<gridFor(count), 256, 0, stream>>>(in, scale, out, count);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
