// Fused softmax cross-entropy kernels (see cross_entropy_cuda.h): one block per row.
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/cross_entropy/cross_entropy_cuda.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kReduceThreads = 1024;

__device__ __forceinline__ float toFloat(bf16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float toFloat(float v) {
  return v;
}

// Merges the running (max, sum of exp(x - max)) pair b into a.
__device__ __forceinline__ void mergeMaxSum(float& m, float& l, float mOther, float lOther) {
  const float mNew = fmaxf(m, mOther);
  if (mNew == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.0f : l * expf(m - mNew)) +
      (mOther == -INFINITY ? 0.0f : lOther * expf(mOther - mNew));
  m = mNew;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_fwd_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                             int64_t vocab, float* __restrict__ lse,
                             float* __restrict__ tokenLoss) {
  __shared__ float sharedMax[kRowThreads / 32];
  __shared__ float sharedSum[kRowThreads / 32];
  const int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  float m = -INFINITY, l = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += kRowThreads) {
    const float x = toFloat(z[v]);
    if (x > m) {
      l = l * expf(m - x) + 1.0f;  // expf(-inf) = 0 for the first element
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
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sharedMax[warp] = m;
    sharedSum[warp] = l;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = sharedMax[0], bl = sharedSum[0];
    for (int w = 1; w < kRowThreads / 32; ++w) mergeMaxSum(bm, bl, sharedMax[w], sharedSum[w]);
    const float rowLse = bm + logf(bl);
    lse[row] = rowLse;
    const int32_t y = targets[row];
    tokenLoss[row] = (y >= 0 && int64_t(y) < vocab) ? rowLse - toFloat(z[y]) : 0.0f;
  }
}

// loss[0] = sum(tokenLoss) / valid (double accumulation, fixed order), validCount[0] = valid.
__global__ void __launch_bounds__(kReduceThreads)
    cross_entropy_mean_kernel(const float* __restrict__ tokenLoss,
                              const int32_t* __restrict__ targets, int64_t n, int64_t vocab,
                              float* __restrict__ loss, int32_t* __restrict__ validCount) {
  __shared__ double sums[kReduceThreads];
  __shared__ long long counts[kReduceThreads];
  double sum = 0.0;
  long long count = 0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) {
    sum += double(tokenLoss[i]);
    count += (targets[i] >= 0 && int64_t(targets[i]) < vocab) ? 1 : 0;
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
      counts[threadIdx.x] += counts[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    loss[0] = counts[0] > 0 ? float(sums[0] / double(counts[0])) : 0.0f;
    validCount[0] = int32_t(counts[0]);
  }
}

// In place safe: every element is read and written by the same thread, no __restrict__.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_bwd_kernel(const T* logits, const int32_t* __restrict__ targets,
                             const float* __restrict__ lse, const int32_t* __restrict__ validCount,
                             float dLoss, int64_t vocab, bf16* dLogits) {
  const int64_t row = blockIdx.x;
  const int32_t y = targets[row];
  const int32_t valid = validCount[0];
  const bool use = y >= 0 && int64_t(y) < vocab && valid > 0;
  const float scale = use ? dLoss / float(valid) : 0.0f;
  const float rowLse = lse[row];
  const T* z = logits + row * vocab;
  bf16* dz = dLogits + row * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += kRowThreads) {
    float g = use ? expf(toFloat(z[v]) - rowLse) * scale : 0.0f;
    if (v == int64_t(y)) g -= scale;
    dz[v] = __float2bfloat16(g);
  }
}

template <typename T>
Status forward(cudaStream_t stream, const T* logits, const int32_t* targets, int64_t n,
               int64_t vocab, float* lse, float* tokenLoss, float* loss, int32_t* validCount) {
  MOEWB_CHECK(n >= 0 && n < (int64_t(1) << 31) && vocab > 0);
  if (n > 0) {
    cross_entropy_fwd_kernel<T>
        <<<unsigned(n), kRowThreads, 0, stream>>>(logits, targets, vocab, lse, tokenLoss);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  cross_entropy_mean_kernel<<<1, kReduceThreads, 0, stream>>>(tokenLoss, targets, n, vocab, loss,
                                                              validCount);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

template <typename T>
Status backward(cudaStream_t stream, const T* logits, const int32_t* targets, const float* lse,
                const int32_t* validCount, float dLoss, int64_t n, int64_t vocab, bf16* dLogits) {
  MOEWB_CHECK(n >= 0 && n < (int64_t(1) << 31) && vocab > 0);
  if (n == 0) return Status::ok();
  cross_entropy_bwd_kernel<T><<<unsigned(n), kRowThreads, 0, stream>>>(
      logits, targets, lse, validCount, dLoss, vocab, dLogits);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

Status crossEntropyForwardCuda(cudaStream_t stream, const bf16* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, float* lse, float* tokenLoss, float* loss,
                               int32_t* validCount) {
  return forward(stream, logits, targets, n, vocab, lse, tokenLoss, loss, validCount);
}
Status crossEntropyForwardCuda(cudaStream_t stream, const float* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, float* lse, float* tokenLoss, float* loss,
                               int32_t* validCount) {
  return forward(stream, logits, targets, n, vocab, lse, tokenLoss, loss, validCount);
}
Status crossEntropyBackwardCuda(cudaStream_t stream, const bf16* logits, const int32_t* targets,
                                const float* lse, const int32_t* validCount, float dLoss, int64_t n,
                                int64_t vocab, bf16* dLogits) {
  return backward(stream, logits, targets, lse, validCount, dLoss, n, vocab, dLogits);
}
Status crossEntropyBackwardCuda(cudaStream_t stream, const float* logits, const int32_t* targets,
                                const float* lse, const int32_t* validCount, float dLoss, int64_t n,
                                int64_t vocab, bf16* dLogits) {
  return backward(stream, logits, targets, lse, validCount, dLoss, n, vocab, dLogits);
}

}  // namespace moewb::engine::cuda
