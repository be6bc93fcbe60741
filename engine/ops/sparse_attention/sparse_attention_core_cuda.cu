// Sparse softmax attention with sink over a selection on the GPU (see sparse_attention_cuda.h,
// sparse_attention_core_ref.cpp), forward and backward, and the indexer target p*.
// Forward: one warp per (query token, head); lanes split the head dim (up to 8 elements each),
// the selected keys are walked in slot order (a warp reduction per key), the logits parked in
// the probs row by the lane that owns slot % 32, then normalised with the sink in the max and the
// denominator, then o = sum_s p v in slot order.
// Backward: phase 1 one warp per (query, head): delta, dz (parked in a workspace) and dq; phase 2
// one warp per (key token, kv head) walking the transposed selection (query order) and the query
// heads of its group in order: dk, dv without atomics; phase 3 one CTA per head sums the sink
// terms in row order. Everything is deterministic.
#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda {
namespace {

using namespace sparse_detail;

constexpr int kWarpsPerBlock = 4;
constexpr int kWarpThreads = kWarpsPerBlock * 32;
constexpr int kPerLane = int(kSparseCudaMaxHeadDim / 32);  // head-dim elements per lane
constexpr int kReduceThreads = 256;

struct CoreShape {
  int64_t seqLen;  // T
  int64_t width;   // W
  int heads;       // H
  int group;       // H / Hkv
  int hd;          // dh
  int64_t qw;      // H dh
  int64_t kvw;     // Hkv dh
  float scale;     // dh^-1/2
};

CoreShape coreShape(const SparseAttentionDims& dims, int64_t width) {
  return {dims.seqLen,        width,
          int(dims.numHeads), int(dims.numHeads / dims.kvHeads),
          int(dims.headDim),  dims.qWidth(),
          dims.kvWidth(),     float(1.0 / std::sqrt(double(dims.headDim)))};
}

// Loads elements lane, lane + 32, ... of a bf16 head vector (0 beyond hd).
__device__ __forceinline__ void loadHead(const bf16* p, int hd, int lane, float* out) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    out[i] = d < hd ? __bfloat162float(p[d]) : 0.0f;
  }
}

__device__ __forceinline__ float dotHead(const float* a, const bf16* p, int hd, int lane) {
  float partial = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) partial += a[i] * __bfloat162float(p[d]);
  }
  return warpSum(partial);
}

__device__ __forceinline__ void storeHead(bf16* p, int hd, int lane, const float* in) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) p[d] = __float2bfloat16(in[i]);
  }
}

__global__ void sparse_attention_fwd_kernel(const bf16* q, const bf16* k, const bf16* v,
                                            const bf16* sink, const int32_t* selected, int64_t n,
                                            CoreShape s, float* probs, float* sinkProbs,
                                            bf16* context) {
  const int64_t pair = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (pair >= n * s.heads) return;
  const int64_t r = pair / s.heads, base = r - r % s.seqLen;
  const int h = int(pair % s.heads);
  const int64_t kvOffset = int64_t(h / s.group) * s.hd;
  const int32_t* sel = selected + r * s.width;
  float* p = probs + pair * s.width;
  float qh[kPerLane];
  loadHead(q + r * s.qw + int64_t(h) * s.hd, s.hd, lane, qh);
  const float sinkLogit = __bfloat162float(sink[h]);
  float maxValue = sinkLogit;
  int64_t count = 0;
  for (; count < s.width; ++count) {
    const int32_t key = sel[count];
    if (key < 0) break;
    const float z = s.scale * dotHead(qh, k + (base + key) * s.kvw + kvOffset, s.hd, lane);
    if (count % 32 == lane) p[count] = z;
    maxValue = fmaxf(maxValue, z);
  }
  float sum = 0.0f;
  for (int64_t slot = lane; slot < count; slot += 32) {
    const float e = expf(p[slot] - maxValue);
    p[slot] = e;
    sum += e;
  }
  sum = warpSum(sum);
  const float sinkWeight = expf(sinkLogit - maxValue);
  const float inv = 1.0f / (sum + sinkWeight);
  for (int64_t slot = lane; slot < s.width; slot += 32)
    p[slot] = slot < count ? p[slot] * inv : 0.0f;
  __syncwarp();
  float o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) o[i] = 0.0f;
  for (int64_t slot = 0; slot < count; ++slot) {
    const float ps = p[slot];
    const bf16* vRow = v + (base + sel[slot]) * s.kvw + kvOffset;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < s.hd) o[i] += ps * __bfloat162float(vRow[d]);
    }
  }
  storeHead(context + r * s.qw + int64_t(h) * s.hd, s.hd, lane, o);
  if (lane == 0) sinkProbs[pair] = sinkWeight * inv;
}

// Phase 1: dz [N, H, W] (valid slots), dq and the sink terms -p_sink delta [N, H].
__global__ void sparse_attention_query_bwd_kernel(const bf16* dContext, const bf16* q,
                                                  const bf16* k, const bf16* v, const bf16* context,
                                                  const int32_t* selected, const float* probs,
                                                  const float* sinkProbs, int64_t n, CoreShape s,
                                                  float* dz, bf16* dq, float* sinkTerms) {
  const int64_t pair = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (pair >= n * s.heads) return;
  const int64_t r = pair / s.heads, base = r - r % s.seqLen;
  const int h = int(pair % s.heads);
  const int64_t kvOffset = int64_t(h / s.group) * s.hd, qOffset = r * s.qw + int64_t(h) * s.hd;
  const int32_t* sel = selected + r * s.width;
  float dOut[kPerLane], acc[kPerLane];
  loadHead(dContext + qOffset, s.hd, lane, dOut);
  const float delta = dotHead(dOut, context + qOffset, s.hd, lane);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  for (int64_t slot = 0; slot < s.width; ++slot) {
    const int32_t key = sel[slot];
    if (key < 0) break;
    const int64_t kvRow = (base + key) * s.kvw + kvOffset;
    const float dp = dotHead(dOut, v + kvRow, s.hd, lane);
    const float dzValue = probs[pair * s.width + slot] * (dp - delta);
    if (slot % 32 == lane) dz[pair * s.width + slot] = dzValue;
    const float coef = s.scale * dzValue;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < s.hd) acc[i] += coef * __bfloat162float(k[kvRow + d]);
    }
  }
  storeHead(dq + qOffset, s.hd, lane, acc);
  if (lane == 0) sinkTerms[pair] = -sinkProbs[pair] * delta;
}

// Phase 2: dk, dv of key token m, kv head g, over the entries that selected m (query order).
__global__ void sparse_attention_key_bwd_kernel(const bf16* dContext, const bf16* q,
                                                const float* probs, const float* dz,
                                                const int32_t* keyStart, const int32_t* entries,
                                                int64_t n, int kvHeads, CoreShape s, bf16* dk,
                                                bf16* dv) {
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (item >= n * kvHeads) return;
  const int64_t m = item / kvHeads;
  const int g = int(item % kvHeads);
  float dkAcc[kPerLane], dvAcc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dkAcc[i] = dvAcc[i] = 0.0f;
  for (int32_t e = keyStart[m]; e < keyStart[m + 1]; ++e) {
    const int64_t entry = entries[e], r = entry / s.width, slot = entry % s.width;
    for (int h = g * s.group; h < (g + 1) * s.group; ++h) {
      const int64_t row = (r * s.heads + h) * s.width + slot;
      const float dzValue = s.scale * dz[row], pValue = probs[row];
      const int64_t qOffset = r * s.qw + int64_t(h) * s.hd;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < s.hd) {
          dkAcc[i] += dzValue * __bfloat162float(q[qOffset + d]);
          dvAcc[i] += pValue * __bfloat162float(dContext[qOffset + d]);
        }
      }
    }
  }
  const int64_t out = m * s.kvw + int64_t(g) * s.hd;
  storeHead(dk + out, s.hd, lane, dkAcc);
  storeHead(dv + out, s.hd, lane, dvAcc);
}

// Phase 3: dSink[h] += sum over rows of sinkTerms[r, h]. One CTA per head.
__global__ void sparse_attention_sink_bwd_kernel(const float* sinkTerms, int64_t n, int heads,
                                                 float* dSink) {
  __shared__ float partial[kReduceThreads];
  const int h = blockIdx.x;
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < n; r += kReduceThreads) sum += sinkTerms[r * heads + h];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dSink[h] += partial[0];
}

// p*[r, slot] = sum_h probs[r, h, slot] / (sum over valid slots), 0 on padding. One warp per row.
__global__ void indexer_target_fwd_kernel(const float* probs, const int32_t* selected, int64_t n,
                                          int64_t heads, int64_t width, float* target) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  float partial = 0.0f;
  for (int64_t slot = lane; slot < width; slot += 32) {
    if (selected[r * width + slot] < 0) continue;
    float value = 0.0f;
    for (int64_t h = 0; h < heads; ++h) value += probs[(r * heads + h) * width + slot];
    target[r * width + slot] = value;
    partial += value;
  }
  const float inv = 1.0f / warpSum(partial);
  for (int64_t slot = lane; slot < width; slot += 32) {
    const int64_t i = r * width + slot;
    target[i] = selected[i] >= 0 ? target[i] * inv : 0.0f;
  }
}

__global__ void sparse_gate_fwd_kernel(const bf16* gatePre, const bf16* context, int64_t n,
                                       bf16* gate, bf16* gated) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(gatePre[i]);
    const float g = a >= 0.0f ? 1.0f / (1.0f + expf(-a)) : expf(a) / (1.0f + expf(a));
    gate[i] = __float2bfloat16(g);
    gated[i] = __float2bfloat16(__bfloat162float(context[i]) * g);
  }
}

__global__ void sparse_gate_bwd_kernel(const bf16* dGated, const bf16* context, const bf16* gate,
                                       int64_t n, bf16* dGatePre, bf16* dContext) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float dg = __bfloat162float(dGated[i]), g = __bfloat162float(gate[i]);
    dGatePre[i] = __float2bfloat16(dg * __bfloat162float(context[i]) * g * (1.0f - g));
    dContext[i] = __float2bfloat16(dg * g);
  }
}

__global__ void sparse_indexer_loss_kernel(const float* klSum, int64_t tokens, float coef,
                                           float* kl, float* loss) {
  const float mean = tokens > 0 ? float(double(klSum[0]) / double(tokens)) : 0.0f;
  kl[0] = mean;
  loss[0] = coef * mean;
}

unsigned warpBlocks(int64_t items) {
  return unsigned((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

Status checkCoreDims(const SparseAttentionDims& dims) {
  if (dims.numHeads < 1 || dims.kvHeads < 1 || dims.numHeads % dims.kvHeads != 0) {
    return invalidArgument("sparse attention needs kv_heads (" + std::to_string(dims.kvHeads) +
                           ") to divide heads (" + std::to_string(dims.numHeads) + ")");
  }
  if (dims.headDim < 1 || dims.headDim > kSparseCudaMaxHeadDim) {
    return invalidArgument("sparse attention head_dim " + std::to_string(dims.headDim) +
                           " is outside the CUDA kernels' range [1, " +
                           std::to_string(kSparseCudaMaxHeadDim) + "]");
  }
  return Status::ok();
}

}  // namespace

Status sparseAttentionCoreForwardCuda(cudaStream_t stream, const SparseAttentionDims& dims,
                                      const bf16* q, const bf16* k, const bf16* v, const bf16* sink,
                                      const int32_t* selected, int64_t width, float* probs,
                                      float* sinkProbs, bf16* context) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  const int64_t n = dims.tokens();
  if (n == 0) return Status::ok();
  sparse_attention_fwd_kernel<<<warpBlocks(n * dims.numHeads), kWarpThreads, 0, stream>>>(
      q, k, v, sink, selected, n, coreShape(dims, width), probs, sinkProbs, context);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchSparseCoreBackward(cudaStream_t stream, const SparseAttentionDims& dims,
                                const bf16* dContext, const SparseCoreSavedView& saved,
                                const int32_t* keyStart, const int32_t* entries, float* dz,
                                float* sinkTerms, bf16* dq, bf16* dk, bf16* dv, float* dSink) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  const int64_t n = dims.tokens(), heads = dims.numHeads;
  if (n == 0) return Status::ok();
  const CoreShape shape = coreShape(dims, saved.width);
  sparse_attention_query_bwd_kernel<<<warpBlocks(n * heads), kWarpThreads, 0, stream>>>(
      dContext, saved.q, saved.k, saved.v, saved.context, saved.selected, saved.probs,
      saved.sinkProbs, n, shape, dz, dq, sinkTerms);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  sparse_attention_key_bwd_kernel<<<warpBlocks(n * dims.kvHeads), kWarpThreads, 0, stream>>>(
      dContext, saved.q, saved.probs, dz, keyStart, entries, n, int(dims.kvHeads), shape, dk, dv);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  sparse_attention_sink_bwd_kernel<<<unsigned(heads), kReduceThreads, 0, stream>>>(
      sinkTerms, n, int(heads), dSink);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status indexerTargetFromProbsCuda(cudaStream_t stream, const float* probs, const int32_t* selected,
                                  int64_t n, int64_t heads, int64_t width, float* target) {
  if (n == 0 || width == 0) return Status::ok();
  indexer_target_fwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(probs, selected, n, heads,
                                                                        width, target);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseGateForwardCuda(cudaStream_t stream, const bf16* gatePre, const bf16* context,
                             int64_t n, bf16* gate, bf16* gated) {
  if (n == 0) return Status::ok();
  sparse_gate_fwd_kernel<<<gridFor(n), 256, 0, stream>>>(gatePre, context, n, gate, gated);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseGateBackwardCuda(cudaStream_t stream, const bf16* dGated, const bf16* context,
                              const bf16* gate, int64_t n, bf16* dGatePre, bf16* dContext) {
  if (n == 0) return Status::ok();
  sparse_gate_bwd_kernel<<<gridFor(n), 256, 0, stream>>>(dGated, context, gate, n, dGatePre,
                                                         dContext);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseIndexerLossCuda(cudaStream_t stream, const float* klSum, int64_t tokens, double coef,
                             float* kl, float* loss) {
  sparse_indexer_loss_kernel<<<1, 1, 0, stream>>>(klSum, tokens, float(coef), kl, loss);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
