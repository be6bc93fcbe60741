// Forward kernels of the sparse attention core (softmax attention with sink over a selection,
// sparse_attention_cuda.h), shared by sparse_attention_core_cuda.cu and the scratch benchmark
// bench/scratch/sparse_attention_01.cu (one source of truth). Only CUDA headers: no Status here,
// the launchers return cudaError_t.
//
// Two kernels with the same contract: probs [N, H, W] fp32 (0 on padding), sinkProbs [N, H] fp32,
// context [N, H*dh] bf16, from q [N, H*dh], k, v [N, Hkv*dh] bf16, sink [H] bf16 and a selection
// [N, W] (ascending keys s <= t, then -1 padding).
//   sparse_attention_fwd_warp_kernel  one warp per (query, head), scalar fp32 (any dh <= 256).
//   sparse_attention_fwd_mma_kernel   tensor cores, dh in {64, 128}: one CTA of 4 warps per
//     (query token, 16 query heads of one kv head). All heads of a token share its selection and
//     (per kv head) the key/value rows, so the work is Q [16 heads x dh] against the gathered K, V
//     [count x dh]: heads on M of mma.sync m16n8k16 (zero rows pad a group of < 16 heads; more
//     than 16 heads take several CTAs), 64-key blocks gathered with 16-byte cp.async into
//     XOR-swizzled shared memory (double-buffered, invalid slots zero-filled), each warp owning 16
//     keys of every block with its own running max and sum (split-K inside the CTA); S = Q K^T and
//     P V on tensor cores, scale, mask and softmax in fp32; the four warps' partial (max, sum, O)
//     merged in shared memory in warp order. The scaled logits go to probs during the loop and
//     are normalised in place at the end (exp(z - max) / (sum + exp(sink - max)), padding 0).
//     Precision: S is exact bf16 products accumulated in fp32 (probs ~1e-6 relative to fp64);
//     P is rounded to bf16 for P V (context ~2e-3 relative, inside the bf16 output's own error).
//     Deterministic: fixed orders everywhere, no atomics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"
#include "runtime/cuda/warp_mma.cuh"

namespace moewb::engine::cuda::sparse_detail {

constexpr int kCoreWarpsPerBlock = 4;
constexpr int kCoreWarpThreads = kCoreWarpsPerBlock * 32;
constexpr int kPerLane = 256 / 32;  // head-dim elements per lane (dh <= 256)

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

inline CoreShape makeCoreShape(int64_t seqLen, int64_t width, int heads, int kvHeads, int hd) {
  return {seqLen,           width,          heads, heads / kvHeads, hd, int64_t(heads) * hd,
          int64_t(kvHeads) * hd, float(1.0 / std::sqrt(double(hd)))};
}

// Loads elements lane, lane + 32, ... of a bf16 head vector (0 beyond hd).
__device__ __forceinline__ void loadHead(const __nv_bfloat16* p, int hd, int lane, float* out) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    out[i] = d < hd ? __bfloat162float(p[d]) : 0.0f;
  }
}

__device__ __forceinline__ float dotHead(const float* a, const __nv_bfloat16* p, int hd,
                                         int lane) {
  float partial = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) partial += a[i] * __bfloat162float(p[d]);
  }
  return warpSum(partial);
}

__device__ __forceinline__ void storeHead(__nv_bfloat16* p, int hd, int lane, const float* in) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) p[d] = __float2bfloat16(in[i]);
  }
}

// static: this header is included by more than one translation unit (indexer_mma.cuh).
static __global__ void sparse_attention_fwd_warp_kernel(const __nv_bfloat16* q,
                                                        const __nv_bfloat16* k,
                                                        const __nv_bfloat16* v,
                                                        const __nv_bfloat16* sink,
                                                        const int32_t* selected, int64_t n,
                                                        CoreShape s, float* probs,
                                                        float* sinkProbs,
                                                        __nv_bfloat16* context) {
  const int64_t pair = int64_t(blockIdx.x) * kCoreWarpsPerBlock + threadIdx.x / 32;
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
    const __nv_bfloat16* vRow = v + (base + sel[slot]) * s.kvw + kvOffset;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < s.hd) o[i] += ps * __bfloat162float(vRow[d]);
    }
  }
  storeHead(context + r * s.qw + int64_t(h) * s.hd, s.hd, lane, o);
  if (lane == 0) sinkProbs[pair] = sinkWeight * inv;
}

inline cudaError_t launchSparseFwdWarp(cudaStream_t stream, const __nv_bfloat16* q,
                                       const __nv_bfloat16* k, const __nv_bfloat16* v,
                                       const __nv_bfloat16* sink, const int32_t* selected,
                                       int64_t n, const CoreShape& s, float* probs,
                                       float* sinkProbs, __nv_bfloat16* context) {
  const int64_t pairs = n * s.heads;
  const unsigned blocks = unsigned((pairs + kCoreWarpsPerBlock - 1) / kCoreWarpsPerBlock);
  sparse_attention_fwd_warp_kernel<<<blocks, kCoreWarpThreads, 0, stream>>>(
      q, k, v, sink, selected, n, s, probs, sinkProbs, context);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Tensor-core forward.

constexpr int kMmaKeys = 64;     // keys per gathered block
constexpr int kMmaWarps = 4;     // each owns 16 keys of a block
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaRows = 16;     // query heads per CTA (one m16 tile)

// c += a (16x16, row) * b (16x8, col), bf16 operands, fp32 accumulators.

__device__ __forceinline__ unsigned packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows, hd] bf16 tile whose chunks are
// XOR-swizzled by row % 8 (ldmatrix reads 8 rows at one column without bank conflicts).
template <int HD>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * HD + ((chunk ^ (row & 7)) << 3);
}

// Number of valid slots of a selection row (valid slots are a prefix): a block-wide search
// that probes blockDim.x evenly spaced slots per round (2 rounds for W <= 16384). Every thread of
// the block must call it; all receive the same value.
__device__ __forceinline__ int validPrefix(const int32_t* sel, int width) {
  int lo = 0, hi = width;  // count in [lo, hi]
  while (lo < hi) {
    const int step = (hi - lo + int(blockDim.x) - 1) / int(blockDim.x);
    const int p = lo + int(threadIdx.x) * step;
    const int valid = __syncthreads_count(p < hi && sel[p] >= 0);
    if (valid == 0) break;  // sel[lo] invalid: count = lo
    const int last = lo + (valid - 1) * step;  // valid; last + step invalid or >= hi
    hi = min(hi, last + step);
    lo = last + 1;
  }
  return lo;
}

template <int HD>
constexpr size_t mmaFwdSmemBytes() {
  return size_t(4 * kMmaKeys * HD + kMmaRows * HD) * sizeof(__nv_bfloat16);
}

// Grid (N, Hkv * tilesPerGroup), kMmaThreads threads, mmaFwdSmemBytes<HD>() dynamic smem.
// blockIdx.x walks tokens from the end of each sequence first (long rows start first).
template <int HD>
__global__ void __launch_bounds__(kMmaThreads, HD == 128 ? 2 : 3)
    sparse_attention_fwd_mma_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                    const __nv_bfloat16* v, const __nv_bfloat16* sink,
                                    const int32_t* selected, int batch, CoreShape s,
                                    int tilesPerGroup, float* probs, float* sinkProbs,
                                    __nv_bfloat16* context) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  constexpr int kSteps = HD / 16;  // k-steps of Q K^T
  constexpr int kTiles = HD / 8;   // n8 tiles of O
  constexpr int kPitch = HD + 4;   // fp32 pitch of the merge buffer
  static_assert(HD % 64 == 0 && HD <= 128, "dh must be 64 or 128");
  static_assert(kMmaWarps * kMmaRows * kPitch * 4 <= 4 * kMmaKeys * HD * 2, "merge buffer");
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smemRaw);  // [2][64][HD]
  __nv_bfloat16* sV = sK + 2 * kMmaKeys * HD;                      // [2][64][HD]
  __nv_bfloat16* sQ = sV + 2 * kMmaKeys * HD;                      // [16][HD]
  float* sMerge = reinterpret_cast<float*>(smemRaw);               // [4][16][kPitch], after loop
  __shared__ float sMax[kMmaWarps][kMmaRows], sSum[kMmaWarps][kMmaRows];
  __shared__ float sRowMax[kMmaRows], sRowInv[kMmaRows];

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t tt = int64_t(blockIdx.x) / batch;
  const int64_t b = int64_t(blockIdx.x) % batch;
  const int64_t base = b * s.seqLen, r = base + s.seqLen - 1 - tt;
  const int g = int(blockIdx.y) / tilesPerGroup, tile = int(blockIdx.y) % tilesPerGroup;
  const int h0 = g * s.group + tile * kMmaRows;
  const int rows = min(kMmaRows, s.group - tile * kMmaRows);
  const int64_t kvOff = int64_t(g) * HD;
  const int width = int(s.width);
  const int32_t* sel = selected + r * s.width;

  for (int i = tid; i < kMmaRows * kChunks; i += kMmaThreads) {
    const int row = i / kChunks, c = i % kChunks;
    const bool ok = row < rows;
    cpAsync16(sQ + swizzled<HD>(row, c), q + r * s.qw + int64_t(h0 + (ok ? row : 0)) * HD + c * 8,
              ok);
  }
  cpAsyncCommit();
  const int count = validPrefix(sel, width);
  const int blocks = (count + kMmaKeys - 1) / kMmaKeys;

  auto loadBlock = [&](int j, int stage) {
    __nv_bfloat16* dK = sK + stage * kMmaKeys * HD;
    __nv_bfloat16* dV = sV + stage * kMmaKeys * HD;
#pragma unroll
    for (int i = 0; i < kMmaKeys * kChunks / kMmaThreads; ++i) {
      const int idx = tid + kMmaThreads * i, row = idx / kChunks, c = idx % kChunks;
      const int slot = j * kMmaKeys + row;
      const bool ok = slot < count;
      const int64_t key = ok ? sel[slot] : 0;
      const int64_t off = (base + key) * s.kvw + kvOff + c * 8;
      cpAsync16(dK + swizzled<HD>(row, c), k + off, ok);
      cpAsync16(dV + swizzled<HD>(row, c), v + off, ok);
    }
  };
  if (blocks > 0) loadBlock(0, 0);
  cpAsyncCommit();
  cpAsyncWait<1>();  // Q has landed
  __syncthreads();
  unsigned qa[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    ldsm4(qa[ks], sQ + swizzled<HD>(lane % 16, 2 * ks + lane / 16));
  }

  float o[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float mRow[2] = {-INFINITY, -INFINITY}, lRow[2] = {0.0f, 0.0f};
  const int quadRow = lane / 4, quadCol = 2 * (lane % 4);
  float* probsBase = probs + (r * s.heads + h0) * s.width;

  for (int j = 0; j < blocks; ++j) {
    if (j + 1 < blocks) loadBlock(j + 1, (j + 1) & 1);
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
    const __nv_bfloat16* cK = sK + (j & 1) * kMmaKeys * HD;
    const __nv_bfloat16* cV = sV + (j & 1) * kMmaKeys * HD;
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const int kRowB = warp * 16 + (lane % 8) + (lane / 16) * 8;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      unsigned bk[4];
      ldsm4(bk, cK + swizzled<HD>(kRowB, 2 * ks + (lane / 8) % 2));
      mma16816(sc[0], qa[ks], bk[0], bk[1]);
      mma16816(sc[1], qa[ks], bk[2], bk[3]);
    }
    const int slot0 = j * kMmaKeys + warp * 16;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = slot0 + nt * 8 + quadCol + (e & 1), row = quadRow + (e >> 1) * 8;
        const float z = sc[nt][e] * s.scale;
        const bool ok = slot < count;
        sc[nt][e] = ok ? z : -INFINITY;
        if (ok && row < rows) probsBase[int64_t(row) * s.width + slot] = z;
      }
    }
    unsigned pa[4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // rows quadRow and quadRow + 8
      float mx = fmaxf(fmaxf(sc[0][2 * i], sc[0][2 * i + 1]),
                       fmaxf(sc[1][2 * i], sc[1][2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
      const float mNew = fmaxf(mRow[i], mx);
      const float mUse = mNew == -INFINITY ? 0.0f : mNew;
      const float alpha = expf(mRow[i] - mUse);
      const float p0 = expf(sc[0][2 * i] - mUse), p1 = expf(sc[0][2 * i + 1] - mUse);
      const float p2 = expf(sc[1][2 * i] - mUse), p3 = expf(sc[1][2 * i + 1] - mUse);
      lRow[i] = lRow[i] * alpha + ((p0 + p1) + (p2 + p3));
      mRow[i] = mNew;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        o[t][2 * i] *= alpha;
        o[t][2 * i + 1] *= alpha;
      }
      pa[i] = packBf16(p0, p1);      // a0 / a1: keys quadCol.. of n-tile 0
      pa[2 + i] = packBf16(p2, p3);  // a2 / a3: keys 8 + quadCol.. of n-tile 1
    }
    const int vRow = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int u = 0; u < kTiles / 2; ++u) {
      unsigned bv[4];
      ldsm4t(bv, cV + swizzled<HD>(vRow, 2 * u + lane / 16));
      mma16816(o[2 * u], pa, bv[0], bv[1]);
      mma16816(o[2 * u + 1], pa, bv[2], bv[3]);
    }
    __syncthreads();  // the stage is refilled by the next iteration
  }
  cpAsyncWait<0>();
  __syncthreads();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    lRow[i] += __shfl_xor_sync(kFullMask, lRow[i], 1);
    lRow[i] += __shfl_xor_sync(kFullMask, lRow[i], 2);
    if (lane % 4 == 0) {
      sMax[warp][quadRow + 8 * i] = mRow[i];
      sSum[warp][quadRow + 8 * i] = lRow[i];
    }
  }
  __syncthreads();
  if (tid < kMmaRows) {
    const float sinkLogit = tid < rows ? __bfloat162float(sink[h0 + tid]) : 0.0f;
    float m = sinkLogit;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) m = fmaxf(m, sMax[w][tid]);
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) l += sSum[w][tid] * expf(sMax[w][tid] - m);
    const float sinkWeight = expf(sinkLogit - m);
    const float inv = 1.0f / (l + sinkWeight);
    sRowMax[tid] = m;
    sRowInv[tid] = inv;
    if (tid < rows) sinkProbs[r * s.heads + h0 + tid] = sinkWeight * inv;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = quadRow + 8 * i;
    const float f = expf(sMax[warp][row] - sRowMax[row]);  // 0 when this warp saw no key
    float* dst = sMerge + (warp * kMmaRows + row) * kPitch + quadCol;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      *reinterpret_cast<float2*>(dst + t * 8) = make_float2(o[t][2 * i] * f, o[t][2 * i + 1] * f);
    }
  }
  __syncthreads();
  for (int i = tid; i < rows * HD / 2; i += kMmaThreads) {
    const int row = i / (HD / 2), col = 2 * (i % (HD / 2));
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float2 part = *reinterpret_cast<const float2*>(sMerge + (w * kMmaRows + row) * kPitch +
                                                           col);
      acc.x += part.x;
      acc.y += part.y;
    }
    const float inv = sRowInv[row];
    *reinterpret_cast<__nv_bfloat162*>(context + r * s.qw + int64_t(h0 + row) * HD + col) =
        __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  }
  for (int row = 0; row < rows; ++row) {
    const float m = sRowMax[row], inv = sRowInv[row];
    float* p = probsBase + int64_t(row) * s.width;
    for (int slot = tid; slot < width; slot += kMmaThreads) {
      p[slot] = slot < count ? expf(p[slot] - m) * inv : 0.0f;
    }
  }
}

inline bool sparseFwdMmaSupported(int hd) { return hd == 64 || hd == 128; }

template <int HD>
cudaError_t launchSparseFwdMmaT(cudaStream_t stream, const __nv_bfloat16* q,
                                const __nv_bfloat16* k, const __nv_bfloat16* v,
                                const __nv_bfloat16* sink, const int32_t* selected, int batch,
                                const CoreShape& s, float* probs, float* sinkProbs,
                                __nv_bfloat16* context) {
  constexpr size_t smem = mmaFwdSmemBytes<HD>();
  cudaError_t err = cudaFuncSetAttribute(sparse_attention_fwd_mma_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  const int tiles = (s.group + kMmaRows - 1) / kMmaRows;
  const int kvHeads = s.heads / s.group;
  const dim3 grid(unsigned(int64_t(batch) * s.seqLen), unsigned(kvHeads * tiles));
  sparse_attention_fwd_mma_kernel<HD><<<grid, kMmaThreads, smem, stream>>>(
      q, k, v, sink, selected, batch, s, tiles, probs, sinkProbs, context);
  return cudaGetLastError();
}

// Tensor-core forward for dh in {64, 128} (sparseFwdMmaSupported), N = batch * T tokens,
// W < 2^31. Returns the launch error.
inline cudaError_t launchSparseFwdMma(cudaStream_t stream, const __nv_bfloat16* q,
                                      const __nv_bfloat16* k, const __nv_bfloat16* v,
                                      const __nv_bfloat16* sink, const int32_t* selected,
                                      int batch, const CoreShape& s, float* probs,
                                      float* sinkProbs, __nv_bfloat16* context) {
  if (s.hd == 64) {
    return launchSparseFwdMmaT<64>(stream, q, k, v, sink, selected, batch, s, probs, sinkProbs,
                                   context);
  }
  if (s.hd == 128) {
    return launchSparseFwdMmaT<128>(stream, q, k, v, sink, selected, batch, s, probs, sinkProbs,
                                    context);
  }
  return cudaErrorInvalidValue;
}

}  // namespace moewb::engine::cuda::sparse_detail
