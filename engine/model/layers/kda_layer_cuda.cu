// Element-wise and per-head kernels of the KDA layer on the GPU (kda_cuda.h): beta's sigmoid and
// its backward, and the gated per-head output RMSNorm forward and backward (one warp per
// (token, head), fp32 math).
#include "runtime/cuda/cuda_check.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

__device__ float warpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__global__ void kda_sigmoid_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = sigmoidf(x[i]);
  }
}

__global__ void kda_beta_bwd_kernel(const float* dbeta, const float* beta, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(dbeta[i] * beta[i] * (1.f - beta[i]));
  }
}

__global__ void kda_gated_norm_fwd_kernel(int64_t tasks, int64_t numHeads, int64_t headDim,
                                          float eps, const bf16* o, const bf16* gatePre,
                                          const bf16* bg, const bf16* normWeight, bf16* ctx,
                                          float* rstd) {
  const int64_t task = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (task >= tasks) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = task * headDim, col0 = (task % numHeads) * headDim;
  float sum = 0.f;
  for (int64_t d = lane; d < headDim; d += 32) {
    const float v = __bfloat162float(o[base + d]);
    sum += v * v;
  }
  sum = warpSum(sum);
  const float r = 1.f / sqrtf(sum / float(headDim) + eps);
  if (lane == 0) rstd[task] = r;
  for (int64_t d = lane; d < headDim; d += 32) {
    const float s = sigmoidf(__bfloat162float(gatePre[base + d]) + __bfloat162float(bg[col0 + d]));
    ctx[base + d] =
        __float2bfloat16(__bfloat162float(o[base + d]) * r * __bfloat162float(normWeight[d]) * s);
  }
}

// With on = o rstd and s = sigmoid(gate): dGate = dCtx on w s (1 - s), dOn = dCtx s w,
// do = rstd (dOn - on mean(dOn on)), norm-weight term dCtx s on.
__global__ void kda_gated_norm_bwd_kernel(int64_t tasks, int64_t numHeads, int64_t headDim,
                                          const bf16* dCtx, const bf16* o, const bf16* gatePre,
                                          const bf16* bg, const bf16* normWeight,
                                          const float* rstd, bf16* dO, bf16* dGate, float* dGateF,
                                          float* wTerms) {
  const int64_t task = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (task >= tasks) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = task * headDim, col0 = (task % numHeads) * headDim;
  const float r = rstd[task];
  float dot = 0.f;
  for (int64_t d = lane; d < headDim; d += 32) {
    const float s = sigmoidf(__bfloat162float(gatePre[base + d]) + __bfloat162float(bg[col0 + d]));
    const float on = __bfloat162float(o[base + d]) * r;
    const float w = __bfloat162float(normWeight[d]);
    const float dz = __bfloat162float(dCtx[base + d]) * s;
    const float dg = dz * on * w * (1.f - s);
    dGate[base + d] = __float2bfloat16(dg);
    dGateF[base + d] = dg;
    wTerms[base + d] = dz * on;
    dot += dz * w * on;
  }
  dot = warpSum(dot);
  const float meanDot = dot / float(headDim);
  for (int64_t d = lane; d < headDim; d += 32) {
    const float s = sigmoidf(__bfloat162float(gatePre[base + d]) + __bfloat162float(bg[col0 + d]));
    const float on = __bfloat162float(o[base + d]) * r;
    const float dOn = __bfloat162float(dCtx[base + d]) * s * __bfloat162float(normWeight[d]);
    dO[base + d] = __float2bfloat16(r * (dOn - on * meanDot));
  }
}

unsigned warpBlocks(int64_t tasks) { return unsigned((tasks + kWarps - 1) / kWarps); }

}  // namespace

Status launchKdaSigmoid(cudaStream_t stream, float* x, int64_t n) {
  if (n == 0) return Status::ok();
  kda_sigmoid_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(x, n);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaBetaBackward(cudaStream_t stream, const float* dbeta, const float* beta, bf16* out,
                             int64_t n) {
  if (n == 0) return Status::ok();
  kda_beta_bwd_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(dbeta, beta, out, n);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaGatedNormForward(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                                 float eps, const bf16* o, const bf16* gatePre, const bf16* bg,
                                 const bf16* normWeight, bf16* ctx, float* rstd) {
  const int64_t tasks = n * numHeads;
  if (tasks == 0) return Status::ok();
  kda_gated_norm_fwd_kernel<<<warpBlocks(tasks), kThreads, 0, stream>>>(
      tasks, numHeads, headDim, eps, o, gatePre, bg, normWeight, ctx, rstd);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaGatedNormBackward(cudaStream_t stream, int64_t n, int64_t numHeads,
                                  int64_t headDim, const bf16* dCtx, const bf16* o,
                                  const bf16* gatePre, const bf16* bg, const bf16* normWeight,
                                  const float* rstd, bf16* dO, bf16* dGate, float* dGateF,
                                  float* wTerms) {
  const int64_t tasks = n * numHeads;
  if (tasks == 0) return Status::ok();
  kda_gated_norm_bwd_kernel<<<warpBlocks(tasks), kThreads, 0, stream>>>(
      tasks, numHeads, headDim, dCtx, o, gatePre, bg, normWeight, rstd, dO, dGate, dGateF,
      wTerms);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
