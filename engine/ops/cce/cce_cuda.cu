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
constexpr int kFinishThreads = 1024;

// Merges (mOther, lOther) into the running (m, l) of exp-sums relative to their max.
__device__ __forceinline__ void mergeMaxSum(float& m, float& l, float mOther, float lOther) {
  const float mNew = fmaxf(m, mOther);
  if (mNew == -INFINITY) return;
  l = (m == -INFINITY ? 0.0f : l * expf(m - mNew)) +
      (mOther == -INFINITY ? 0.0f : lOther * expf(mOther - mNew));
  m = mNew;
}

// One warp per strip row.
__global__ void cce_fwd_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                               int64_t rowBegin, int64_t colBegin,
                               const int32_t* __restrict__ targets, float cap,
                               float* __restrict__ runMax, float* __restrict__ runSum,
                               float* __restrict__ targetLogit) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const float* zr = z + r * cols;
  float m = -INFINITY, l = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float x = capLogit(zr[c], cap);
    if (x > m) {
      l = l * expf(m - x) + 1.0f;
      m = x;
    } else {
      l += expf(x - m);
    }
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

__global__ void cce_bwd_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                               int64_t rowBegin, int64_t colBegin,
                               const int32_t* __restrict__ targets, int64_t vocab,
                               int32_t ignoreIndex, float zLossCoef, float cap,
                               const float* __restrict__ lse,
                               const int32_t* __restrict__ validCount, float dLoss,
                               bf16* __restrict__ g) {
  const int32_t valid = validCount[0];
  const float scale = valid > 0 ? dLoss / float(valid) : 0.0f;
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t t = rowBegin + r;
    const int32_t y = targets[t];
    if (y == ignoreIndex || y < 0 || int64_t(y) >= vocab || valid == 0) {
      g[i] = __float2bfloat16(0.0f);
      continue;
    }
    const float grad = unscaledGrad(z[i], lse[t], colBegin + c == int64_t(y), zLossCoef, cap);
    g[i] = __float2bfloat16(grad * scale);
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
      z, rows, cols, rowBegin, colBegin, targets, cap, runMax, runSum, targetLogit);
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
  cce_bwd_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(
      z, rows, cols, rowBegin, colBegin, targets, vocab, options.ignoreIndex,
      float(options.zLossCoef), float(options.softCap), lse, validCount, dLoss, g);
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
