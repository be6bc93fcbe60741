// Lightning indexer on the GPU (see sparse_attention_cuda.h, indexer.h): projections with fp32
// outputs, the key LayerNorm (one warp per token), scores and logits, the KL objective (one warp
// per row, the row sum in double by one CTA) and the backward (dq and the head weights per query,
// dk per key through the transposed selection, a column reduction for the norm's gain and bias).
// Two arithmetic paths, chosen per call by indexerUsesTensorCores (HI = 8, dI 64 / 128 with
// kIndexerTensorCores on):
//   tensor cores (indexer_mma.cuh): scores per 64x64 tile, logits per query token over gathered
//     keys, the query-side backward per query token (pre-activations, coef, dw, and dq as an MMA);
//     all pre-activations use one 3xbf16 mma sequence, ~4e-6 relative to fp64;
//   scalar (every other shape, and the old path): one CTA per query token, its indexer row in
//     shared memory, one key per thread; one warp per (query, head) in the backward; all through
//     indexerScore / indexerDot, fp32 FMA in dI order.
// Within a path the scores, the logits and the backward's ReLU test compute every pre-activation
// identically, so logits are bitwise the dense scores and the backward's ReLU pattern is bitwise
// the forward's. The key side (dk) is the scalar indexer_key_bwd_kernel on both paths, or the
// key-tile x query-tile product of indexer_key_bwd_tiled.cuh when keyBwdTiled() (on by default;
// the test hook / MOEWB_INDEXER_KEY_TILED) selects it and the shape allows it.
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernel_choice.h"
#include "ops/sparse_attention/indexer_key_bwd_tiled.cuh"
#include "ops/sparse_attention/indexer_mma.cuh"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda {
namespace {

using namespace sparse_detail;

constexpr int kWarpsPerBlock = 4;
constexpr int kWarpThreads = kWarpsPerBlock * 32;
constexpr int kScoreThreads = 128;
constexpr int kReduceThreads = 256;

// The tensor-core path (indexer_mma.cuh) where the shape allows it; false selects the scalar
// kernels everywhere (round 1's engine path).
constexpr bool kIndexerTensorCores = true;

// The tiled key-side backward (indexer_key_bwd_tiled.cuh, bench/scratch/indexer_key_bwd_01.md):
// on since its H200 check (B4 T4096 top-512: 4.54 -> 1.99 ms; B1 T32768 top-2048: 31.6 -> 20.3
// ms; the same values as the scalar kernel at every benchmark shape).
KernelChoice& keyBwdTiled() {
  static KernelChoice choice("MOEWB_INDEXER_KEY_TILED", true);
  return choice;
}

bool indexerUsesTensorCores(const IndexerDims& dims, int64_t width) {
  return kIndexerTensorCores && indexerTcSupported(dims.numHeads, dims.headDim) &&
         dims.seqLen < (int64_t(1) << 31) && width < (int64_t(1) << 31);
}

// qI[j] . kI in fp32, serial over the head width (the same order everywhere).
__device__ __forceinline__ float indexerDot(const float* q, const float* k, int di) {
  float acc = 0.0f;
  for (int d = 0; d < di; ++d) acc = fmaf(q[d], k[d], acc);
  return acc;
}

// I[t, s] = c sum_j w[t, j] ReLU(qI[t, j] . kI[s]); +0 for an exact zero.
__device__ __forceinline__ float indexerScore(const float* qRow, const float* wRow,
                                              const float* kRow, int hi, int di, float c) {
  float out = 0.0f;
  for (int j = 0; j < hi; ++j) {
    const float a = indexerDot(qRow + j * di, kRow, di);
    out = fmaf(wRow[j], a > 0.0f ? a : 0.0f, out);
  }
  return __fadd_rn(__fmul_rn(out, c), 0.0f);
}

// kI = LayerNorm(kPre) * gain + bias per token, one warp per row.
__global__ void indexer_norm_fwd_kernel(const float* kPre, const bf16* gain, const bf16* bias,
                                        int64_t n, int di, float eps, float* kHat, float* rstdOut,
                                        float* k) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  const float* pre = kPre + r * di;
  float sum = 0.0f;
  for (int i = lane; i < di; i += 32) sum += pre[i];
  const float mean = warpSum(sum) / float(di);
  float var = 0.0f;
  for (int i = lane; i < di; i += 32) var += (pre[i] - mean) * (pre[i] - mean);
  const float rstd = 1.0f / sqrtf(warpSum(var) / float(di) + eps);
  if (lane == 0) rstdOut[r] = rstd;
  for (int i = lane; i < di; i += 32) {
    const float xhat = (pre[i] - mean) * rstd;
    kHat[r * di + i] = xhat;
    k[r * di + i] = xhat * loadBf16(gain + i) + loadBf16(bias + i);
  }
}

// Loads query n's indexer row (HI dI query values, then HI weights) into shared memory.
__device__ __forceinline__ void loadIndexerRow(const float* q, const float* w, int64_t n, int hi,
                                               int di, float* shared) {
  const int qw = hi * di;
  for (int i = int(threadIdx.x); i < qw; i += int(blockDim.x)) shared[i] = q[n * qw + i];
  for (int j = int(threadIdx.x); j < hi; j += int(blockDim.x)) shared[qw + j] = w[n * hi + j];
  __syncthreads();
}

// scores[n, s] for every s < T (0 above the diagonal). One CTA per query token.
__global__ void indexer_scores_fwd_kernel(const float* q, const float* k, const float* w,
                                          int64_t seqLen, int hi, int di, float c, float* scores) {
  extern __shared__ float row[];
  const int64_t n = blockIdx.x, t = n % seqLen, base = n - t;
  loadIndexerRow(q, w, n, hi, di, row);
  for (int64_t s = threadIdx.x; s < seqLen; s += blockDim.x) {
    scores[n * seqLen + s] =
        s <= t ? indexerScore(row, row + hi * di, k + (base + s) * di, hi, di, c) : 0.0f;
  }
}

// logits[n, slot] = I[t, selected[n, slot]] (0 on padding). One CTA per query token.
__global__ void indexer_logits_fwd_kernel(const float* q, const float* k, const float* w,
                                          const int32_t* selected, int64_t seqLen, int64_t width,
                                          int hi, int di, float c, float* logits) {
  extern __shared__ float row[];
  const int64_t n = blockIdx.x, base = n - n % seqLen;
  loadIndexerRow(q, w, n, hi, di, row);
  for (int64_t slot = threadIdx.x; slot < width; slot += blockDim.x) {
    const int32_t key = selected[n * width + slot];
    logits[n * width + slot] =
        key >= 0 ? indexerScore(row, row + hi * di, k + (base + key) * di, hi, di, c) : 0.0f;
  }
}

// Softmax of the valid logits, probs (0 on padding) and the row's KL. One warp per row.
__global__ void indexer_kl_fwd_kernel(const float* logits, const float* target,
                                      const int32_t* selected, int64_t n, int64_t width,
                                      float* probs, float* rowKl) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  const float* l = logits + r * width;
  const int32_t* sel = selected + r * width;
  float maxValue = -INFINITY;
  for (int64_t s = lane; s < width; s += 32) {
    if (sel[s] >= 0) maxValue = fmaxf(maxValue, l[s]);
  }
  maxValue = warpMax(maxValue);
  float sum = 0.0f;
  for (int64_t s = lane; s < width; s += 32) {
    if (sel[s] >= 0) sum += expf(l[s] - maxValue);
  }
  const float lse = maxValue + logf(warpSum(sum));
  float kl = 0.0f;
  for (int64_t s = lane; s < width; s += 32) {
    if (sel[s] < 0) {
      probs[r * width + s] = 0.0f;
      continue;
    }
    const float logP = l[s] - lse;
    probs[r * width + s] = expf(logP);
    const float p = target[r * width + s];
    if (p > 0.0f) kl += p * (logf(p) - logP);
  }
  kl = warpSum(kl);
  if (lane == 0) rowKl[r] = kl;
}

// out[0] = sum of rowKl in double, fixed order. One CTA.
__global__ void indexer_kl_sum_kernel(const float* rowKl, int64_t n, float* out) {
  __shared__ double partial[kReduceThreads];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < n; r += kReduceThreads) sum += double(rowKl[r]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = float(partial[0]);
}

__global__ void indexer_kl_bwd_kernel(const float* probs, const float* target,
                                      const int32_t* selected, int64_t total, float scale,
                                      float* dLogits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    dLogits[i] = selected[i] >= 0 ? scale * (probs[i] - target[i]) : 0.0f;
  }
}

// Per (query n, head j), one warp: coef[n, j, slot] = dI w c where qI . kI > 0 (else 0),
// dwPre[n, j] = c HI^-0.5 sum_slot dI ReLU(a), dq[n, j] = sum_slot coef kI[key].
__global__ void indexer_query_bwd_kernel(const float* q, const float* k, const float* w,
                                         const int32_t* selected, const float* dLogits, int64_t n,
                                         int64_t seqLen, int64_t width, int hi, int di, float c,
                                         float headScale, float* coef, bf16* dwPre, bf16* dq) {
  const int64_t pair = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (pair >= n * hi) return;
  const int64_t r = pair / hi, base = r - r % seqLen;
  const int j = int(pair % hi);
  const float* qh = q + r * int64_t(hi) * di + int64_t(j) * di;
  const float wj = w[r * hi + j];
  const int32_t* sel = selected + r * width;
  float* coefRow = coef + pair * width;
  float dw = 0.0f;
  for (int64_t slot = lane; slot < width; slot += 32) {
    const int32_t key = sel[slot];
    if (key < 0) continue;
    const float a = indexerDot(qh, k + (base + key) * di, di);
    const float g = dLogits[r * width + slot];
    float cf = 0.0f;
    if (a > 0.0f) {
      dw += g * a;
      cf = g * wj * c;
    }
    coefRow[slot] = cf;
  }
  dw = warpSum(dw);
  if (lane == 0) dwPre[pair] = __float2bfloat16(dw * c * headScale);
  __syncwarp();
  for (int d = lane; d < di; d += 32) {
    float acc = 0.0f;
    for (int64_t slot = 0; slot < width; ++slot) {
      const int32_t key = sel[slot];
      if (key < 0) break;
      acc += coefRow[slot] * k[(base + key) * di + d];
    }
    dq[r * int64_t(hi) * di + int64_t(j) * di + d] = __float2bfloat16(acc);
  }
}

// dk[m] = sum over the (query, slot) pairs that selected key m (query order) and heads j of
// coef[n, j, slot] qI[n, j]. One warp per key token.
__global__ void indexer_key_bwd_kernel(const float* q, const float* coef, const int32_t* keyStart,
                                       const int32_t* entries, int64_t n, int64_t width, int hi,
                                       int di, float* dk) {
  const int64_t m = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (m >= n) return;
  const int32_t begin = keyStart[m], end = keyStart[m + 1];
  for (int d = lane; d < di; d += 32) {
    float acc = 0.0f;
    for (int32_t e = begin; e < end; ++e) {
      const int64_t entry = entries[e], r = entry / width, slot = entry % width;
      for (int j = 0; j < hi; ++j) {
        acc += coef[(r * hi + j) * width + slot] * q[r * int64_t(hi) * di + int64_t(j) * di + d];
      }
    }
    dk[m * di + d] = acc;
  }
}

// LayerNorm backward of the key per token: dPre = rstd (g gain - mean(g gain) - xhat
// mean(g gain xhat)). One warp per row.
__global__ void indexer_norm_bwd_kernel(const float* dk, const float* kHat, const float* rstd,
                                        const bf16* gain, int64_t n, int di, bf16* dPre) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  float sumG = 0.0f, sumGX = 0.0f;
  for (int i = lane; i < di; i += 32) {
    const float gg = dk[r * di + i] * loadBf16(gain + i);
    sumG += gg;
    sumGX += gg * kHat[r * di + i];
  }
  const float meanG = warpSum(sumG) / float(di), meanGX = warpSum(sumGX) / float(di);
  for (int i = lane; i < di; i += 32) {
    const float gg = dk[r * di + i] * loadBf16(gain + i);
    dPre[r * di + i] = __float2bfloat16(rstd[r] * (gg - meanG - kHat[r * di + i] * meanGX));
  }
}

// dGain[i] += sum_r dk[r, i] kHat[r, i], dBias[i] += sum_r dk[r, i]. One CTA per column.
__global__ void indexer_norm_params_bwd_kernel(const float* dk, const float* kHat, int64_t n,
                                               int di, float* dGain, float* dBias) {
  __shared__ float gainPart[kReduceThreads];
  __shared__ float biasPart[kReduceThreads];
  const int i = blockIdx.x;
  float g = 0.0f, b = 0.0f;
  for (int64_t r = threadIdx.x; r < n; r += kReduceThreads) {
    g += dk[r * di + i] * kHat[r * di + i];
    b += dk[r * di + i];
  }
  gainPart[threadIdx.x] = g;
  biasPart[threadIdx.x] = b;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) {
      gainPart[threadIdx.x] += gainPart[threadIdx.x + stride];
      biasPart[threadIdx.x] += biasPart[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    dGain[i] += gainPart[0];
    dBias[i] += biasPart[0];
  }
}

unsigned warpBlocks(int64_t items) {
  return unsigned((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

Status checkIndexerDims(const IndexerDims& dims) {
  if (dims.batch < 0 || dims.seqLen < 0 || dims.numHeads < 1 || dims.headDim < 1 ||
      dims.dModel < 1) {
    return invalidArgument("indexer dims must be positive (heads " + std::to_string(dims.numHeads) +
                           ", dim " + std::to_string(dims.headDim) + ")");
  }
  if (dims.numHeads * dims.headDim + dims.numHeads > kSparseCudaMaxIndexerRow) {
    return invalidArgument("indexer heads * dim + heads = " +
                           std::to_string(dims.numHeads * dims.headDim + dims.numHeads) +
                           " exceeds the CUDA score kernel's limit of " +
                           std::to_string(kSparseCudaMaxIndexerRow));
  }
  return Status::ok();
}

size_t indexerRowBytes(const IndexerDims& dims) {
  return size_t(dims.numHeads * dims.headDim + dims.numHeads) * sizeof(float);
}

}  // namespace

void setIndexerKeyBwdTiled(int mode) { keyBwdTiled().force(mode); }

Status launchIndexerNormForward(cudaStream_t stream, const float* kPre, const bf16* gain,
                                const bf16* bias, int64_t n, int64_t di, double eps, float* kHat,
                                float* rstd, float* k) {
  if (n == 0) return Status::ok();
  indexer_norm_fwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(kPre, gain, bias, n, int(di),
                                                                      float(eps), kHat, rstd, k);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status checkIndexerDimsCuda(const IndexerDims& dims) {
  return checkIndexerDims(dims);
}

Status indexerScoresCuda(cudaStream_t stream, const IndexerDims& dims, const float* q,
                         const float* k, const float* w, float* scores) {
  MOEWB_RETURN_IF_ERROR(checkIndexerDims(dims));
  const int64_t n = dims.tokens();
  if (n == 0) return Status::ok();
  if (indexerUsesTensorCores(dims, dims.seqLen)) {
    MOEWB_CUDA_RETURN_IF_ERROR(launchIndexerScoresTc(stream, q, k, w, int(dims.batch),
                                                     int(dims.seqLen), int(dims.headDim), scores));
    return Status::ok();
  }
  const float c = float(1.0 / std::sqrt(double(dims.headDim)));
  indexer_scores_fwd_kernel<<<unsigned(n), kScoreThreads, indexerRowBytes(dims), stream>>>(
      q, k, w, dims.seqLen, int(dims.numHeads), int(dims.headDim), c, scores);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status indexerLogitsCuda(cudaStream_t stream, const IndexerDims& dims, const float* q,
                         const float* k, const float* w, const int32_t* selected, int64_t width,
                         float* logits) {
  MOEWB_RETURN_IF_ERROR(checkIndexerDims(dims));
  const int64_t n = dims.tokens();
  if (n == 0 || width == 0) return Status::ok();
  if (indexerUsesTensorCores(dims, width)) {
    MOEWB_CUDA_RETURN_IF_ERROR(launchIndexerLogitsTc(stream, q, k, w, selected, n,
                                                     int(dims.seqLen), int(width),
                                                     int(dims.headDim), logits));
    return Status::ok();
  }
  const float c = float(1.0 / std::sqrt(double(dims.headDim)));
  indexer_logits_fwd_kernel<<<unsigned(n), kScoreThreads, indexerRowBytes(dims), stream>>>(
      q, k, w, selected, dims.seqLen, width, int(dims.numHeads), int(dims.headDim), c, logits);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchIndexerKl(cudaStream_t stream, const float* logits, const float* target,
                       const int32_t* selected, int64_t n, int64_t width, float* probs,
                       float* rowKl, float* klSum) {
  if (n > 0) {
    indexer_kl_fwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(logits, target, selected, n,
                                                                      width, probs, rowKl);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  indexer_kl_sum_kernel<<<1, kReduceThreads, 0, stream>>>(rowKl, n, klSum);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status indexerKlBackwardCuda(cudaStream_t stream, const float* probs, const float* target,
                             const int32_t* selected, int64_t n, int64_t width, double scale,
                             float* dLogits) {
  const int64_t total = n * width;
  if (total == 0) return Status::ok();
  indexer_kl_bwd_kernel<<<gridFor(total), 256, 0, stream>>>(probs, target, selected, total,
                                                            float(scale), dLogits);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchIndexerBackward(cudaStream_t stream, const IndexerDims& dims,
                             const IndexerBackwardBuffers& b, const int32_t* selected,
                             int64_t width, const int32_t* keyStart, const int32_t* entries,
                             const float* dLogits, const bf16* gain, float* dGain, float* dBias) {
  const int64_t n = dims.tokens(), hi = dims.numHeads, di = dims.headDim;
  if (n == 0 || width == 0) return Status::ok();
  const float c = float(1.0 / std::sqrt(double(di)));
  const float headScale = float(1.0 / std::sqrt(double(hi)));
  if (indexerUsesTensorCores(dims, width)) {
    MOEWB_CUDA_RETURN_IF_ERROR(launchIndexerQueryBwdTc(stream, b.q, b.k, b.w, selected, dLogits,
                                                       n, int(dims.seqLen), int(width), int(di),
                                                       b.coef, b.dwPre, b.dq));
  } else {
    indexer_query_bwd_kernel<<<warpBlocks(n * hi), kWarpThreads, 0, stream>>>(
        b.q, b.k, b.w, selected, dLogits, n, dims.seqLen, width, int(hi), int(di), c, headScale,
        b.coef, b.dwPre, b.dq);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  if (keyBwdTiled().newer() && indexerKeyBwdTiledSupported(hi, di, b.q, b.dk) &&
      n * width < (int64_t(1) << 31)) {
    MOEWB_CUDA_RETURN_IF_ERROR(launchIndexerKeyBwdTiled(stream, b.q, b.coef, keyStart, entries,
                                                        dims.batch, dims.seqLen, width, hi, di,
                                                        b.dk));
  } else {
    indexer_key_bwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(
        b.q, b.coef, keyStart, entries, n, width, int(hi), int(di), b.dk);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  indexer_norm_bwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(b.dk, b.kHat, b.rstd, gain, n,
                                                                      int(di), b.dkPre);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  indexer_norm_params_bwd_kernel<<<unsigned(di), kReduceThreads, 0, stream>>>(
      b.dk, b.kHat, n, int(di), dGain, dBias);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
