// Router top-k (softmax / sigmoid, bias, group limit), its backward and the router losses on the
// GPU (see router_cuda.h). One warp per token row throughout.
#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "ops/router/router_cuda.h"
#include "ops/router/router_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kRowsPerBlock = 4;                  // warps per block of the row kernels
constexpr size_t kRouterSharedBytes = 48 * 1024;  // (E + 2 G) floats per row in the block
constexpr int kColumnChunk = 256;                 // tokens per partial column sum
constexpr int kReduceThreads = 256;               // one-block reductions
constexpr float kNormEps = 1e-20f;                // as the reference's sigmoid guard

__device__ __forceinline__ float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Arg-max over the warp: larger value wins, equal values go to the lower id.
__device__ __forceinline__ void warpArgMax(float& value, int& id) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(kFull, value, o);
    const int i = __shfl_xor_sync(kFull, id, o);
    if (v > value || (v == value && i < id)) {
      value = v;
      id = i;
    }
  }
}

// Arg-max of vals[0..count) for this warp (ties to the lower index).
__device__ __forceinline__ int warpArgMaxOf(const float* vals, int count, int lane) {
  float best = -INFINITY;
  int bestId = 0x7fffffff;
  for (int j = lane; j < count; j += 32) {
    const float v = vals[j];
    if (v > best || (v == best && j < bestId)) {
      best = v;
      bestId = j;
    }
  }
  warpArgMax(best, bestId);
  return bestId;
}

struct RouterParams {
  int64_t n;
  int32_t e;
  int32_t k;
  bool sigmoid;
  float routeScale;
  bool scaled;  // routeScale != 1
  const float* bias;
  int32_t groups;
  int32_t topKGroups;
};

__global__ void router_fwd_kernel(const float* logits, RouterParams p, float* probs, float* scores,
                                  int32_t* topExpert, float* topWeight) {
  extern __shared__ float shared[];  // per warp: sel [E], groupScore [G], groupKept [G]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / 32) + warp;
  if (t >= p.n) return;
  const int e = p.e;
  float* sel = shared + int64_t(warp) * (e + 2 * p.groups);
  float* groupScore = sel + e;
  float* groupKept = groupScore + p.groups;
  const float* z = logits + t * e;
  float* prob = probs + t * e;
  // Selection values and probabilities.
  float maxLogit = -INFINITY, sumScores = 0.0f;
  for (int j = lane; j < e; j += 32) {
    float v = z[j];
    maxLogit = fmaxf(maxLogit, v);
    if (p.sigmoid) {
      v = sigmoidf(v);
      scores[t * e + j] = v;
      sumScores += v;
    }
    sel[j] = p.bias != nullptr ? v + p.bias[j] : v;
  }
  if (p.sigmoid) {
    const float total = warpSum(sumScores) + kNormEps;
    for (int j = lane; j < e; j += 32) prob[j] = sigmoidf(z[j]) / total;
  } else {
    maxLogit = warpMax(maxLogit);
    float sum = 0.0f;
    for (int j = lane; j < e; j += 32) sum += expf(z[j] - maxLogit);
    sum = warpSum(sum);
    for (int j = lane; j < e; j += 32) prob[j] = expf(z[j] - maxLogit) / sum;
  }
  __syncwarp();
  // Group limit: keep the topKGroups groups of largest top-2 sums, mask the rest.
  if (p.groups > 1) {
    const int size = e / p.groups;
    for (int g = lane; g < p.groups; g += 32) {
      float best = -INFINITY, second = -INFINITY;
      for (int j = g * size; j < (g + 1) * size; ++j) {
        if (sel[j] > best) {
          second = best;
          best = sel[j];
        } else if (sel[j] > second) {
          second = sel[j];
        }
      }
      groupScore[g] = size >= 2 ? best + second : best;
      groupKept[g] = 0.0f;
    }
    __syncwarp();
    for (int i = 0; i < p.topKGroups; ++i) {
      const int g = warpArgMaxOf(groupScore, p.groups, lane);
      __syncwarp();
      if (lane == 0) {
        groupScore[g] = -INFINITY;
        groupKept[g] = 1.0f;
      }
      __syncwarp();
    }
    for (int j = lane; j < e; j += 32) {
      if (groupKept[j / size] == 0.0f) sel[j] = -INFINITY;
    }
    __syncwarp();
  }
  // Top-k: k arg-max rounds; lane i keeps the i-th winner.
  int mine = -1;
  for (int i = 0; i < p.k; ++i) {
    const int best = warpArgMaxOf(sel, e, lane);
    if (lane == i) mine = best;
    __syncwarp();
    if (lane == 0) sel[best] = -INFINITY;
    __syncwarp();
  }
  const bool active = lane < p.k;
  const float zi = active ? z[mine] : -INFINITY;
  float w = 0.0f;
  if (p.sigmoid) {
    const float si = active ? sigmoidf(zi) : 0.0f;
    const float selected = warpSum(si) + kNormEps;
    w = p.routeScale * (si / selected);
  } else {
    const float maxSel = warpMax(zi);
    const float ex = active ? expf(zi - maxSel) : 0.0f;
    const float sumTop = warpSum(ex);
    w = ex / sumTop;
    if (p.scaled) w *= p.routeScale;
  }
  if (active) {
    topExpert[t * p.k + lane] = mine;
    topWeight[t * p.k + lane] = w;
  }
}

__global__ void router_bwd_kernel(const float* topWeight, const int32_t* topExpert,
                                  const float* scores, const float* dTopWeight, RouterParams p,
                                  float* dLogits) {
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= p.n) return;
  const bool active = lane < p.k;
  const float w = active ? topWeight[t * p.k + lane] : 0.0f;
  const float dw = active ? dTopWeight[t * p.k + lane] : 0.0f;
  const int idx = active ? topExpert[t * p.k + lane] : 0;
  float dot = warpSum(w * dw);
  if (p.scaled) dot /= p.routeScale;
  float* dz = dLogits + t * p.e;
  if (!p.sigmoid) {
    if (active) dz[idx] += w * (dw - dot);
    return;
  }
  const float si = active ? scores[t * p.e + idx] : 0.0f;
  const float factor = p.routeScale / (warpSum(si) + kNormEps);
  if (active) dz[idx] += factor * (dw - dot) * si * (1.0f - si);
}

// counts[q, e] += assignments of the block's tokens (all inside sequence q = blockIdx.y).
__global__ void router_counts_kernel(const int32_t* topExpert, int64_t seqLen, int32_t k, int32_t e,
                                     int32_t* counts) {
  extern __shared__ int32_t hist[];  // [E]
  for (int j = threadIdx.x; j < e; j += blockDim.x) hist[j] = 0;
  __syncthreads();
  const int64_t q = blockIdx.y;
  const int64_t local = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (local < seqLen) {
    const int32_t* ids = topExpert + (q * seqLen + local) * k;
    for (int i = 0; i < k; ++i) {
      const int32_t id = ids[i];
      if (id >= 0 && id < e) atomicAdd(&hist[id], 1);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < e; j += blockDim.x) {
    if (hist[j] != 0) atomicAdd(&counts[q * e + j], hist[j]);
  }
}

// partial[(q chunks + c), e] = sum of probs[t, e] over chunk c of sequence q.
__global__ void router_colsum_kernel(const float* probs, int64_t seqLen, int64_t chunksPerSeq,
                                     int32_t e, float* partial) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= e) return;
  const int64_t q = blockIdx.y / chunksPerSeq, c = blockIdx.y % chunksPerSeq;
  const int64_t begin = c * kColumnChunk;
  const int64_t end = begin + kColumnChunk < seqLen ? begin + kColumnChunk : seqLen;
  float sum = 0.0f;
  for (int64_t t = begin; t < end; ++t) sum += probs[(q * seqLen + t) * e + j];
  partial[int64_t(blockIdx.y) * e + j] = sum;
}

// loss = alpha E / S sum_{q, e} f_{q,e} P_{q,e}; one block, fixed order.
__global__ void router_aux_loss_kernel(const float* partial, const int32_t* counts, int64_t seqs,
                                       int64_t seqLen, int64_t chunksPerSeq, int32_t e, int32_t k,
                                       double alpha, float* loss) {
  __shared__ double terms[kReduceThreads];
  double acc = 0.0;
  for (int64_t idx = threadIdx.x; idx < seqs * e; idx += blockDim.x) {
    const int64_t q = idx / e, j = idx % e;
    double meanProb = 0.0;
    for (int64_t c = 0; c < chunksPerSeq; ++c) meanProb += partial[(q * chunksPerSeq + c) * e + j];
    meanProb /= double(seqLen);
    acc += double(counts[idx]) / double(int64_t(k) * seqLen) * meanProb;
  }
  terms[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) terms[threadIdx.x] += terms[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = float(alpha * double(e) * terms[0] / double(seqs));
}

// dz[t, :] += the gradient through p of dp[e] = alpha E count[q, e] / (k seqLen) / (seqLen S).
__global__ void router_aux_bwd_kernel(const float* probs, const float* scores,
                                      const int32_t* counts, int64_t n, int64_t seqLen, int32_t e,
                                      int32_t k, double alpha, double countScale, bool sigmoid,
                                      float* dLogits) {
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= n) return;
  const int64_t seqs = n / seqLen;
  const int32_t* count = counts + (t / seqLen) * e;
  const double scale =
      alpha * double(e) / double(int64_t(k) * seqLen) / double(seqLen * seqs) * countScale;
  const float* prob = probs + t * e;
  float dot = 0.0f, total = 0.0f;
  for (int j = lane; j < e; j += 32) {
    dot += prob[j] * float(scale * double(count[j]));
    if (sigmoid) total += scores[t * e + j];
  }
  dot = warpSum(dot);
  total = warpSum(total) + kNormEps;
  float* dz = dLogits + t * e;
  for (int j = lane; j < e; j += 32) {
    const float dp = float(scale * double(count[j]));
    if (sigmoid) {
      const float s = scores[t * e + j];
      dz[j] += (dp - dot) / total * s * (1.0f - s);
    } else {
      dz[j] += prob[j] * (dp - dot);
    }
  }
}

__device__ __forceinline__ float rowLogSumExp(const float* z, int e, int lane, float& maxLogit,
                                              float& sum) {
  float m = -INFINITY;
  for (int j = lane; j < e; j += 32) m = fmaxf(m, z[j]);
  maxLogit = warpMax(m);
  float s = 0.0f;
  for (int j = lane; j < e; j += 32) s += expf(z[j] - maxLogit);
  sum = warpSum(s);
  return maxLogit + logf(sum);
}

__global__ void router_zloss_lse_kernel(const float* logits, int64_t n, int32_t e, float* lse) {
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= n) return;
  float maxLogit, sum;
  const float value = rowLogSumExp(logits + t * e, e, lane, maxLogit, sum);
  if (lane == 0) lse[t] = value;
}

__global__ void router_zloss_sum_kernel(const float* lse, int64_t n, double coef, float* loss) {
  __shared__ double terms[kReduceThreads];
  double acc = 0.0;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) acc += double(lse[t]) * double(lse[t]);
  terms[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) terms[threadIdx.x] += terms[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = n == 0 ? 0.0f : float(coef * terms[0] / double(n));
}

__global__ void router_zloss_bwd_kernel(const float* logits, int64_t n, int32_t e, float scale,
                                        float* dLogits) {
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= n) return;
  const float* z = logits + t * e;
  float maxLogit, sum;
  const float lse = rowLogSumExp(z, e, lane, maxLogit, sum);
  float* dz = dLogits + t * e;
  for (int j = lane; j < e; j += 32) dz[j] += scale * lse * (expf(z[j] - maxLogit) / sum);
}

unsigned rowBlocks(int64_t n) {
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  return unsigned(blocks > 0 ? blocks : 1);
}

RouterParams paramsOf(const DeviceRouterOutput& route) {
  RouterParams p{};
  p.n = route.topExpert.dim(0);
  p.k = int32_t(route.topExpert.dim(1));
  p.e = int32_t(route.probs.dim(1));
  p.sigmoid = route.score == RouterScore::kSigmoid;
  p.routeScale = float(route.routeScale);
  p.scaled = route.routeScale != 1.0;
  return p;
}

Status checkLogits(const char* op, const DeviceRouterOutput& route,
                   const DeviceTensor<float>& dLogits) {
  if (dLogits.rank() != 2 || dLogits.dim(0) != route.probs.dim(0) ||
      dLogits.dim(1) != route.probs.dim(1)) {
    return invalidArgument(std::string(op) + ": dLogits " + dLogits.shapeString() +
                           " does not match probs " + route.probs.shapeString());
  }
  return Status::ok();
}

}  // namespace

Status routerForwardLaunch(cudaStream_t stream, const float* logits, int64_t n, int32_t e,
                           const RouterConfig& config, const float* bias, float* probs,
                           float* scores, int32_t* topExpert, float* topWeight) {
  if (n == 0) return Status::ok();
  RouterParams p{};
  p.n = n;
  p.e = e;
  p.k = config.topK;
  p.sigmoid = config.score == RouterScore::kSigmoid;
  p.routeScale = float(config.routeScale);
  p.scaled = config.routeScale != 1.0;
  p.bias = bias;
  p.groups = config.numGroups;
  p.topKGroups = config.topKGroups;
  const size_t rowBytes = size_t(e + 2 * p.groups) * sizeof(float);
  const int rows = rowBytes * kRowsPerBlock <= kRouterSharedBytes ? kRowsPerBlock : 1;
  if (rowBytes * size_t(rows) > kRouterSharedBytes) {
    return invalidArgument("routerForwardCuda: E = " + std::to_string(e) +
                           " needs more shared memory than one block has");
  }
  const int64_t blocks = (n + rows - 1) / rows;
  router_fwd_kernel<<<unsigned(blocks), rows * 32, rowBytes * size_t(rows), stream>>>(
      logits, p, probs, scores, topExpert, topWeight);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

int64_t auxLossPartialRows(int64_t n, int64_t seqLen) {
  return (n / seqLen) * ((seqLen + kColumnChunk - 1) / kColumnChunk);
}

Status auxLossLaunch(cudaStream_t stream, const int32_t* topExpert, const float* probs, int64_t n,
                     int32_t e, int32_t k, int64_t seqLen, double alpha, float* partial,
                     int32_t* counts, float* loss) {
  const int64_t seqs = n / seqLen;
  MOEWB_RETURN_IF_ERROR(fillInt32(stream, counts, 0, seqs * e));
  if (n == 0) return fillFloat(stream, loss, 0.0f, 1);
  const int64_t chunksPerSeq = (seqLen + kColumnChunk - 1) / kColumnChunk;
  if (seqs * chunksPerSeq > 65535) {
    return invalidArgument("aux loss: " + std::to_string(seqs) + " sequences of " +
                           std::to_string(seqLen) + " tokens exceed one grid column");
  }
  const int countThreads = 256;
  const dim3 countGrid(unsigned((seqLen + countThreads - 1) / countThreads), unsigned(seqs));
  router_counts_kernel<<<countGrid, countThreads, size_t(e) * sizeof(int32_t), stream>>>(
      topExpert, seqLen, k, e, counts);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  const dim3 colGrid(unsigned((e + 127) / 128), unsigned(seqs * chunksPerSeq));
  router_colsum_kernel<<<colGrid, 128, 0, stream>>>(probs, seqLen, chunksPerSeq, e, partial);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  router_aux_loss_kernel<<<1, kReduceThreads, 0, stream>>>(partial, counts, seqs, seqLen,
                                                           chunksPerSeq, e, k, alpha, loss);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status routerTopKBackwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                              const DeviceTensor<float>& dTopWeight, DeviceTensor<float>& dLogits) {
  MOEWB_RETURN_IF_ERROR(checkLogits("routerTopKBackwardCuda", route, dLogits));
  if (dTopWeight.numel() != route.topWeight.numel()) {
    return invalidArgument("routerTopKBackwardCuda: dTopWeight " + dTopWeight.shapeString() +
                           " does not match topWeight " + route.topWeight.shapeString());
  }
  const RouterParams p = paramsOf(route);
  if (p.n == 0) return Status::ok();
  router_bwd_kernel<<<rowBlocks(p.n), kRowsPerBlock * 32, 0, context.stream()>>>(
      route.topWeight.data(), route.topExpert.data(), p.sigmoid ? route.scores.data() : nullptr,
      dTopWeight.data(), p, dLogits.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status auxLossBackwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                           const DeviceAuxLoss& stats, double alpha, DeviceTensor<float>& dLogits) {
  MOEWB_RETURN_IF_ERROR(checkLogits("auxLossBackwardCuda", route, dLogits));
  const RouterParams p = paramsOf(route);
  if (p.n == 0) return Status::ok();
  const DeviceTensor<int32_t>& counts = stats.gradCounts.empty() ? stats.counts : stats.gradCounts;
  const double countScale = stats.gradCounts.empty() ? 1.0 : stats.gradCountScale;
  if (stats.seqLen <= 0 || p.n % stats.seqLen != 0 ||
      counts.numel() != (p.n / stats.seqLen) * p.e) {
    return invalidArgument("auxLossBackwardCuda: stats of seqLen " + std::to_string(stats.seqLen) +
                           " and counts " + counts.shapeString() +
                           " do not match N = " + std::to_string(p.n));
  }
  router_aux_bwd_kernel<<<rowBlocks(p.n), kRowsPerBlock * 32, 0, context.stream()>>>(
      route.probs.data(), p.sigmoid ? route.scores.data() : nullptr, counts.data(), p.n,
      stats.seqLen, p.e, p.k, alpha, countScale, p.sigmoid, dLogits.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status zLossForwardLaunch(cudaStream_t stream, const float* logits, int64_t n, int32_t e,
                          double coef, float* lse, float* loss) {
  if (n > 0) {
    router_zloss_lse_kernel<<<rowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(logits, n, e, lse);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  router_zloss_sum_kernel<<<1, kReduceThreads, 0, stream>>>(lse, n, coef, loss);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status zLossBackwardCuda(CudaContext& context, const DeviceTensor<float>& logits, double coef,
                         DeviceTensor<float>& dLogits) {
  if (logits.rank() != 2 || dLogits.rank() != 2 || logits.dim(0) != dLogits.dim(0) ||
      logits.dim(1) != dLogits.dim(1)) {
    return invalidArgument("zLossBackwardCuda: logits " + logits.shapeString() + ", dLogits " +
                           dLogits.shapeString());
  }
  const int64_t n = logits.dim(0), e = logits.dim(1);
  if (n == 0) return Status::ok();
  const float scale = float(2.0 * coef / double(n));
  router_zloss_bwd_kernel<<<rowBlocks(n), kRowsPerBlock * 32, 0, context.stream()>>>(
      logits.data(), n, int32_t(e), scale, dLogits.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
