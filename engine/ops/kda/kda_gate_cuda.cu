// Element-wise and per-head kernels around the KDA core on the GPU (kda_cuda.h): the forget gate
// and the per-head L2 norm (each forward and backward; the short conv is in kda_conv_cuda.cu),
// and the deterministic token reductions the weight gradients need: per-column partial sums over
// fixed row splits, then one fixed-order fold into the fp32 gradient. All math in fp32.
#include "runtime/cuda/cuda_check.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// log(1 + e^x) without overflow.
__device__ float softplusf(float x) { return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x))); }

__device__ float warpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__global__ void kda_gate_fwd_kernel(int64_t total, int64_t width, int64_t headDim, bool isDefault,
                                    float lb, const bf16* f, const bf16* aLog, const bf16* dtBias,
                                    float* g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % width;
    const float a = expf(__bfloat162float(aLog[c / headDim]));
    const float z = __bfloat162float(f[i]) + __bfloat162float(dtBias[c]);
    g[i] = isDefault ? -a * softplusf(z) : lb * sigmoidf(a * z);
  }
}

// grid (column blocks, splits): df for the rows of one split and its per-column partial sums of
// df (-> dt_bias) and dg * dg/dA_log (-> A_log).
__global__ void kda_gate_bwd_kernel(int64_t n, int64_t width, int64_t headDim, bool isDefault,
                                    float lb, int64_t rowsPerSplit, const float* dg, const bf16* f,
                                    const float* g, const bf16* aLog, const bf16* dtBias, bf16* df,
                                    float* partDf, float* partDA) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= width) return;
  const int64_t r0 = blockIdx.y * rowsPerSplit, r1 = min(n, r0 + rowsPerSplit);
  const float a = expf(__bfloat162float(aLog[c / headDim]));
  const float bias = __bfloat162float(dtBias[c]);
  float sumDf = 0.f, sumDA = 0.f;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t i = row * width + c;
    const float grad = dg[i], gate = g[i], z = __bfloat162float(f[i]) + bias;
    float d, dA;
    if (isDefault) {  // dg/dz = -a sigmoid(z), dg/dA = g
      d = -grad * a * sigmoidf(z);
      dA = grad * gate;
    } else {  // s = g / lb: dg/dz = lb s (1 - s) a, dg/dA = dg/dz z
      const float s = gate / lb;
      d = grad * lb * s * (1.f - s) * a;
      dA = d * z;
    }
    df[i] = __float2bfloat16(d);
    sumDf += d;
    sumDA += dA;
  }
  partDf[blockIdx.y * width + c] = sumDf;
  partDA[blockIdx.y * width + c] = sumDA;
}

// out[d] += sum_s sum_h part[s, h * fold + d] for d < fold (cols = H * fold), splits outer and h
// inner: term t = s * H + h sits at part[t * fold + d]. The loads of 8 terms are issued before
// their adds (same order of adds): one load per add waited a memory round trip each, 54 us for a
// conv weight gradient's 128 x 8192 partials on the H200.
__global__ void kda_fold_mod_kernel(const float* part, int64_t splits, int64_t cols, int64_t fold,
                                    float* out) {
  const int64_t d = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (d >= fold) return;
  const int64_t terms = splits * (cols / fold);
  constexpr int kBatch = 8;
  float acc = 0.f;
  int64_t t = 0;
  for (; t + kBatch <= terms; t += kBatch) {
    float batch[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) batch[u] = part[(t + u) * fold + d];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) acc += batch[u];
  }
  for (; t < terms; ++t) acc += part[t * fold + d];
  out[d] += acc;
}

// out[h] += sum_s sum_{d < block} part[s, h * block + d]; one CTA per h.
__global__ void kda_fold_block_kernel(const float* part, int64_t splits, int64_t cols,
                                      int64_t block, float* out) {
  __shared__ float sums[kWarps];
  const int64_t h = blockIdx.x;
  float acc = 0.f;
  for (int64_t idx = threadIdx.x; idx < splits * block; idx += blockDim.x) {
    acc += part[(idx / block) * cols + h * block + idx % block];
  }
  acc = warpSum(acc);
  if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += sums[w];
    out[h] += total;
  }
}

// Per-column partial sums part[s, c] = sum over the rows of split s of in[row, c].
__global__ void kda_column_partials_kernel(const float* in, int64_t n, int64_t cols,
                                           int64_t rowsPerSplit, float* part) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * rowsPerSplit, r1 = min(n, r0 + rowsPerSplit);
  float acc = 0.f;
  for (int64_t row = r0; row < r1; ++row) acc += in[row * cols + c];
  part[blockIdx.y * cols + c] = acc;
}

// One warp per (row, head).
__global__ void kda_l2norm_fwd_kernel(int64_t rowsHeads, int64_t headDim, float scale, float eps,
                                      const bf16* x, bf16* y, float* rinv) {
  const int64_t task = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (task >= rowsHeads) return;
  const int lane = threadIdx.x % 32;
  const bf16* xr = x + task * headDim;
  float sum = 0.f;
  for (int64_t d = lane; d < headDim; d += 32) {
    const float v = __bfloat162float(xr[d]);
    sum += v * v;
  }
  sum = warpSum(sum);
  const float r = 1.f / sqrtf(sum + eps);
  if (lane == 0) rinv[task] = r;
  for (int64_t d = lane; d < headDim; d += 32) {
    y[task * headDim + d] = __float2bfloat16(scale * __bfloat162float(xr[d]) * r);
  }
}

__global__ void kda_l2norm_bwd_kernel(int64_t rowsHeads, int64_t headDim, float scale,
                                      const bf16* dy, const bf16* x, const float* rinv, bf16* dx) {
  const int64_t task = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (task >= rowsHeads) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = task * headDim;
  const float r = rinv[task];
  float dot = 0.f;  // y · dy with y = x r
  for (int64_t d = lane; d < headDim; d += 32) {
    dot += __bfloat162float(x[base + d]) * r * __bfloat162float(dy[base + d]);
  }
  dot = warpSum(dot);
  for (int64_t d = lane; d < headDim; d += 32) {
    const float yd = __bfloat162float(x[base + d]) * r;
    dx[base + d] = __float2bfloat16(scale * (__bfloat162float(dy[base + d]) - yd * dot) * r);
  }
}

unsigned blocksFor(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

int64_t kdaRowsPerSplit(int64_t n) {
  const int64_t perSplit = (n + kKdaMaxSplits - 1) / kKdaMaxSplits;
  return perSplit > 32 ? perSplit : 32;
}

int64_t kdaSplits(int64_t n) {
  const int64_t rows = kdaRowsPerSplit(n);
  return n > 0 ? (n + rows - 1) / rows : 1;
}

Status launchKdaGateForward(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                            const bf16* f, const bf16* aLog, const bf16* dtBias, float* g) {
  const int64_t width = params.numHeads * params.headDim, total = n * width;
  if (total == 0) return Status::ok();
  kda_gate_fwd_kernel<<<gridFor(total, kThreads), kThreads, 0, stream>>>(
      total, width, params.headDim, params.kind == KdaGateKind::kDefault,
      float(params.lowerBound), f, aLog, dtBias, g);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaGateBackward(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                             const float* dg, const bf16* f, const float* g, const bf16* aLog,
                             const bf16* dtBias, bf16* df, float* dALog, float* dDtBias,
                             float* partDf, float* partDA) {
  const int64_t width = params.numHeads * params.headDim;
  if (n == 0 || width == 0) return Status::ok();
  const int64_t splits = kdaSplits(n);
  kda_gate_bwd_kernel<<<dim3(blocksFor(width), unsigned(splits)), kThreads, 0, stream>>>(
      n, width, params.headDim, params.kind == KdaGateKind::kDefault, float(params.lowerBound),
      kdaRowsPerSplit(n), dg, f, g, aLog, dtBias, df, partDf, partDA);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  MOEWB_RETURN_IF_ERROR(launchKdaFoldMod(stream, partDf, splits, width, width, dDtBias));
  kda_fold_block_kernel<<<unsigned(params.numHeads), kThreads, 0, stream>>>(
      partDA, splits, width, params.headDim, dALog);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaColumnSums(cudaStream_t stream, const float* in, int64_t n, int64_t cols,
                           int64_t fold, float* part, float* out) {
  if (n == 0 || cols == 0) return Status::ok();
  const int64_t splits = kdaSplits(n);
  kda_column_partials_kernel<<<dim3(blocksFor(cols), unsigned(splits)), kThreads, 0, stream>>>(
      in, n, cols, kdaRowsPerSplit(n), part);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return launchKdaFoldMod(stream, part, splits, cols, fold, out);
}

Status launchKdaFoldMod(cudaStream_t stream, const float* part, int64_t splits, int64_t cols,
                        int64_t fold, float* out) {
  if (fold == 0) return Status::ok();
  kda_fold_mod_kernel<<<blocksFor(fold), kThreads, 0, stream>>>(part, splits, cols, fold, out);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status kdaL2NormForwardCuda(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                            double scale, double eps, const bf16* x, bf16* y, float* rinv) {
  const int64_t tasks = n * numHeads;
  if (tasks == 0) return Status::ok();
  kda_l2norm_fwd_kernel<<<unsigned((tasks + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      tasks, headDim, float(scale), float(eps), x, y, rinv);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status kdaL2NormBackwardCuda(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                             double scale, const bf16* dy, const bf16* x, const float* rinv,
                             bf16* dx) {
  const int64_t tasks = n * numHeads;
  if (tasks == 0) return Status::ok();
  kda_l2norm_bwd_kernel<<<unsigned((tasks + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      tasks, headDim, float(scale), dy, x, rinv, dx);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
