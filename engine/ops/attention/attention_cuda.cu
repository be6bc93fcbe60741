// Causal softmax kernels of the GPU attention (see attention_cuda.h): one warp per score row.
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/attention/attention_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Row r of rows = heads * T: t = r % T; s, p at r * T.
__global__ void attention_fwd_kernel(const float* __restrict__ s, bf16* __restrict__ p,
                                     float* __restrict__ lse, int64_t rows, int64_t seqLen) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t t = row % seqLen;
  const float* sr = s + row * seqLen;
  float m = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) m = fmaxf(m, sr[j]);
  m = warpMax(m);
  float l = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) l += expf(sr[j] - m);
  l = warpSum(l);
  const float inv = 1.0f / l;
  bf16* pr = p + row * seqLen;
  for (int64_t j = lane; j < seqLen; j += 32) {
    pr[j] = __float2bfloat16(j <= t ? expf(sr[j] - m) * inv : 0.0f);
  }
  if (lane == 0) lse[row] = m + logf(l);
}

__global__ void attention_bwd_kernel(const float* __restrict__ s, const float* __restrict__ dp,
                                     const float* __restrict__ lse, bf16* __restrict__ p,
                                     bf16* __restrict__ ds, int64_t rows, int64_t seqLen) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = row % seqLen;
  const float* sr = s + row * seqLen;
  const float* dpr = dp + row * seqLen;
  const float rowLse = lse[row];
  float delta = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) delta += expf(sr[j] - rowLse) * dpr[j];
  delta = warpSum(delta);
  bf16* pr = p + row * seqLen;
  bf16* dsr = ds + row * seqLen;
  for (int64_t j = lane; j < seqLen; j += 32) {
    const float pv = j <= t ? expf(sr[j] - rowLse) : 0.0f;
    pr[j] = __float2bfloat16(pv);
    dsr[j] = __float2bfloat16(j <= t ? pv * (dpr[j] - delta) : 0.0f);
  }
}

unsigned blocksFor(int64_t rows) {
  return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

Status attentionSoftmaxForward(cudaStream_t stream, const float* s, bf16* p, float* lse,
                               int64_t heads, int64_t seqLen) {
  const int64_t rows = heads * seqLen;
  if (rows <= 0) return Status::ok();
  MOEWB_CHECK(rows / kWarpsPerBlock < (int64_t(1) << 31) - 1);
  attention_fwd_kernel<<<blocksFor(rows), kWarpsPerBlock * 32, 0, stream>>>(s, p, lse, rows,
                                                                            seqLen);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status attentionSoftmaxBackward(cudaStream_t stream, const float* s, const float* dp,
                                const float* lse, bf16* p, bf16* ds, int64_t heads,
                                int64_t seqLen) {
  const int64_t rows = heads * seqLen;
  if (rows <= 0) return Status::ok();
  MOEWB_CHECK(rows / kWarpsPerBlock < (int64_t(1) << 31) - 1);
  attention_bwd_kernel<<<blocksFor(rows), kWarpsPerBlock * 32, 0, stream>>>(s, dp, lse, p, ds, rows,
                                                                            seqLen);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
