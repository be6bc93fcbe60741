// Backward kernels of the sparse attention core (sparse_attention_cuda.h), shared by
// sparse_attention_core_cuda.cu and bench/scratch/sparse_attention_01.cu. Only CUDA headers; the
// launcher returns cudaError_t. Three phases, all deterministic (fixed orders, no atomics):
//   1. per query token: delta = dO . O per head, dz [N, H, W] = p (dO . v_s - delta) on valid
//      slots, dq = dh^-1/2 sum_s dz k_s, sinkTerms [N, H] = -p_sink delta. Two kernels:
//      sparse_attention_query_bwd_kernel      one warp per (query, head), scalar fp32.
//      sparse_attention_query_bwd_mma_kernel  tensor cores, dh in {64, 128}: the forward's tiling
//        (sparse_attention_core_fwd.cuh): one CTA per (token, 16 heads of a kv head), the heads
//        on M, 64-key blocks of K and V gathered by cp.async (double-buffered); each warp owns
//        16 keys of a block: dP = dO V^T (tensor cores, fp32), dz = p (dP - delta) in fp32
//        (stored exactly), dq += dz K with dz rounded to bf16 (dq ~2e-3 relative); the four
//        warps' dq partials summed in warp order in shared memory.
//   2. dk = dh^-1/2 sum dz q, dv = sum p dO over the (query, slot) pairs that selected a key:
//      sparse_attention_key_bwd_kernel      one warp per (key token, kv head) over the transposed
//                                           selection in query order, scalar (no atomics);
//      sparse_attention_key_bwd_vec_kernel  the same with vector loads (dh 64 / 128), bitwise;
//      sparse_attention_key_bwd_mma_kernel  tensor cores per 64-key block (described there);
//      sparse_attention_key_bwd_split_kernel  the same per (key block, query span), fp32 partials
//        added in span order (sparse_attention_key_bwd_split.cuh, the engine's path).
//   3. sparse_attention_sink_bwd_kernel: dSink[h] += sum over rows of sinkTerms (row order).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda::sparse_detail {

using bf16 = __nv_bfloat16;
constexpr int kCoreReduceThreads = 256;

// Phase 1: dz [N, H, W] (valid slots), dq and the sink terms -p_sink delta [N, H].
__global__ void sparse_attention_query_bwd_kernel(const bf16* dContext, const bf16* q,
                                                  const bf16* k, const bf16* v, const bf16* context,
                                                  const int32_t* selected, const float* probs,
                                                  const float* sinkProbs, int64_t n, CoreShape s,
                                                  float* dz, bf16* dq, float* sinkTerms) {
  const int64_t pair = int64_t(blockIdx.x) * kCoreWarpsPerBlock + threadIdx.x / 32;
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
  const int64_t item = int64_t(blockIdx.x) * kCoreWarpsPerBlock + threadIdx.x / 32;
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

// Phase 2 for dh = 32 E (E in {2, 4}): the same sums in the same order (bitwise equal to
// sparse_attention_key_bwd_kernel), but each lane owns E consecutive elements and loads them in
// one 4- or 8-byte access (an eighth of the load instructions at dh = 128).
template <int E>
__device__ __forceinline__ void loadVec(const bf16* p, float (&out)[E]) {
  if constexpr (E == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    out[0] = __low2float(a);
    out[1] = __high2float(a);
    out[2] = __low2float(b);
    out[3] = __high2float(b);
  } else {
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(p);
    out[0] = __low2float(a);
    out[1] = __high2float(a);
  }
}

template <int E>
__global__ void sparse_attention_key_bwd_vec_kernel(const bf16* dContext, const bf16* q,
                                                    const float* probs, const float* dz,
                                                    const int32_t* keyStart,
                                                    const int32_t* entries, int64_t n,
                                                    int kvHeads, CoreShape s, bf16* dk, bf16* dv) {
  static_assert(E == 2 || E == 4, "dh must be 64 or 128");
  const int64_t item = int64_t(blockIdx.x) * kCoreWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (item >= n * kvHeads) return;
  const int64_t m = item / kvHeads;
  const int g = int(item % kvHeads);
  float dkAcc[E], dvAcc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) dkAcc[i] = dvAcc[i] = 0.0f;
  const int32_t eEnd = keyStart[m + 1];
  for (int32_t e = keyStart[m]; e < eEnd; ++e) {
    const int64_t entry = entries[e], r = entry / s.width, slot = entry % s.width;
#pragma unroll 4
    for (int h = g * s.group; h < (g + 1) * s.group; ++h) {
      const int64_t row = (r * s.heads + h) * s.width + slot;
      const float dzValue = s.scale * dz[row], pValue = probs[row];
      const int64_t qOffset = r * s.qw + int64_t(h) * (32 * E) + lane * E;
      float qv[E], ov[E];
      loadVec<E>(q + qOffset, qv);
      loadVec<E>(dContext + qOffset, ov);
#pragma unroll
      for (int i = 0; i < E; ++i) {
        dkAcc[i] += dzValue * qv[i];
        dvAcc[i] += pValue * ov[i];
      }
    }
  }
  const int64_t out = m * s.kvw + int64_t(g) * (32 * E) + lane * E;
#pragma unroll
  for (int i = 0; i < E; i += 2) {
    *reinterpret_cast<__nv_bfloat162*>(dk + out + i) =
        __floats2bfloat162_rn(dkAcc[i], dkAcc[i + 1]);
    *reinterpret_cast<__nv_bfloat162*>(dv + out + i) =
        __floats2bfloat162_rn(dvAcc[i], dvAcc[i + 1]);
  }
}

// Phase 3: dSink[h] += sum over rows of sinkTerms[r, h]. One CTA per head.
__global__ void sparse_attention_sink_bwd_kernel(const float* sinkTerms, int64_t n, int heads,
                                                 float* dSink) {
  __shared__ float partial[kCoreReduceThreads];
  const int h = blockIdx.x;
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < n; r += kCoreReduceThreads) sum += sinkTerms[r * heads + h];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kCoreReduceThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dSink[h] += partial[0];
}

// Phase 1 on tensor cores. Grid (N, Hkv * tilesPerGroup) as the forward, kMmaThreads threads,
// mmaFwdSmemBytes<HD>() dynamic shared memory.
template <int HD>
__global__ void __launch_bounds__(kMmaThreads, HD == 128 ? 2 : 3)
    sparse_attention_query_bwd_mma_kernel(const bf16* dContext, const bf16* k, const bf16* v,
                                          const bf16* context, const int32_t* selected,
                                          const float* probs, const float* sinkProbs, int batch,
                                          CoreShape s, int tilesPerGroup, float* dz, bf16* dq,
                                          float* sinkTerms) {
  constexpr int kChunks = HD / 8;
  constexpr int kSteps = HD / 16;
  constexpr int kTiles = HD / 8;
  constexpr int kPitch = HD + 4;
  static_assert(HD % 64 == 0 && HD <= 128, "dh must be 64 or 128");
  extern __shared__ __align__(128) unsigned char smemRaw[];
  bf16* sK = reinterpret_cast<bf16*>(smemRaw);  // [2][64][HD]
  bf16* sV = sK + 2 * kMmaKeys * HD;            // [2][64][HD]
  bf16* sO = sV + 2 * kMmaKeys * HD;            // [16][HD] dO tile
  float* sMerge = reinterpret_cast<float*>(smemRaw);  // [4][16][kPitch], after the loop
  __shared__ float sDelta[kMmaRows];

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
    cpAsync16(sO + swizzled<HD>(row, c),
              dContext + r * s.qw + int64_t(h0 + (ok ? row : 0)) * HD + c * 8, ok);
  }
  cpAsyncCommit();
  for (int row = warp; row < kMmaRows; row += kMmaWarps) {  // delta = dO . O per head
    float delta = 0.0f;
    if (row < rows) {
      float dOut[kPerLane];
      const int64_t off = r * s.qw + int64_t(h0 + row) * HD;
      loadHead(dContext + off, HD, lane, dOut);
      delta = dotHead(dOut, context + off, HD, lane);
      if (lane == 0) {
        sinkTerms[r * s.heads + h0 + row] = -sinkProbs[r * s.heads + h0 + row] * delta;
      }
    }
    if (lane == 0) sDelta[row] = delta;
  }
  const int count = validPrefix(sel, width);  // its barriers also publish sDelta
  const int blocks = (count + kMmaKeys - 1) / kMmaKeys;

  auto loadBlock = [&](int j, int stage) {
    bf16* dK = sK + stage * kMmaKeys * HD;
    bf16* dV = sV + stage * kMmaKeys * HD;
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
  cpAsyncWait<1>();
  __syncthreads();
  unsigned oa[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    ldsm4(oa[ks], sO + swizzled<HD>(lane % 16, 2 * ks + lane / 16));
  }
  const int quadRow = lane / 4, quadCol = 2 * (lane % 4);
  const float delta0 = sDelta[quadRow], delta1 = sDelta[quadRow + 8];
  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const int64_t rowBase = (r * s.heads + h0) * s.width;

  for (int j = 0; j < blocks; ++j) {
    if (j + 1 < blocks) loadBlock(j + 1, (j + 1) & 1);
    cpAsyncCommit();
    const int slot0 = j * kMmaKeys + warp * 16;
    float pr[2][4];  // probs of this thread's (row, slot) pairs, loaded early
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = slot0 + nt * 8 + quadCol + (e & 1), row = quadRow + (e >> 1) * 8;
        pr[nt][e] = slot < count && row < rows ? probs[rowBase + int64_t(row) * s.width + slot]
                                               : 0.0f;
      }
    }
    cpAsyncWait<1>();
    __syncthreads();
    const bf16* cK = sK + (j & 1) * kMmaKeys * HD;
    const bf16* cV = sV + (j & 1) * kMmaKeys * HD;
    float dp[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const int rowB = warp * 16 + (lane % 8) + (lane / 16) * 8;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      unsigned bv[4];
      ldsm4(bv, cV + swizzled<HD>(rowB, 2 * ks + (lane / 8) % 2));
      mma16816(dp[0], oa[ks], bv[0], bv[1]);
      mma16816(dp[1], oa[ks], bv[2], bv[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = slot0 + nt * 8 + quadCol + (e & 1), row = quadRow + (e >> 1) * 8;
        const float value = pr[nt][e] * (dp[nt][e] - (e < 2 ? delta0 : delta1));
        dp[nt][e] = value;  // 0 on invalid slots and padded rows (p = 0 there)
        if (slot < count && row < rows) dz[rowBase + int64_t(row) * s.width + slot] = value;
      }
    }
    const unsigned za[4] = {packBf16(dp[0][0], dp[0][1]), packBf16(dp[0][2], dp[0][3]),
                            packBf16(dp[1][0], dp[1][1]), packBf16(dp[1][2], dp[1][3])};
    const int kRowT = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int u = 0; u < kTiles / 2; ++u) {
      unsigned bk[4];
      ldsm4t(bk, cK + swizzled<HD>(kRowT, 2 * u + lane / 16));
      mma16816(acc[2 * u], za, bk[0], bk[1]);
      mma16816(acc[2 * u + 1], za, bk[2], bk[3]);
    }
    __syncthreads();
  }
  cpAsyncWait<0>();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float* dst = sMerge + (warp * kMmaRows + quadRow + 8 * i) * kPitch + quadCol;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      *reinterpret_cast<float2*>(dst + t * 8) = make_float2(acc[t][2 * i], acc[t][2 * i + 1]);
    }
  }
  __syncthreads();
  for (int i = tid; i < rows * HD / 2; i += kMmaThreads) {
    const int row = i / (HD / 2), col = 2 * (i % (HD / 2));
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float2 part =
          *reinterpret_cast<const float2*>(sMerge + (w * kMmaRows + row) * kPitch + col);
      sum.x += part.x;
      sum.y += part.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(dq + r * s.qw + int64_t(h0 + row) * HD + col) =
        __floats2bfloat162_rn(sum.x * s.scale, sum.y * s.scale);
  }
}

template <int HD>
cudaError_t launchQueryBwdMmaT(cudaStream_t stream, const bf16* dContext, const bf16* k,
                               const bf16* v, const bf16* context, const int32_t* selected,
                               const float* probs, const float* sinkProbs, int batch,
                               const CoreShape& s, float* dz, bf16* dq, float* sinkTerms) {
  constexpr size_t smem = mmaFwdSmemBytes<HD>();
  cudaError_t err = cudaFuncSetAttribute(sparse_attention_query_bwd_mma_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  const int tiles = (s.group + kMmaRows - 1) / kMmaRows;
  const int kvHeads = s.heads / s.group;
  const dim3 grid(unsigned(int64_t(batch) * s.seqLen), unsigned(kvHeads * tiles));
  sparse_attention_query_bwd_mma_kernel<HD><<<grid, kMmaThreads, smem, stream>>>(
      dContext, k, v, context, selected, probs, sinkProbs, batch, s, tiles, dz, dq, sinkTerms);
  return cudaGetLastError();
}

// Phase 2 on tensor cores (dh in {64, 128}): one CTA per (64-key block of a sequence, kv head),
// 4 warps, warp w owning keys 16w..16w+15 of the block (the M tile). The CTA walks the queries
// t >= the block's first key in ascending order; per chunk of 128 candidates each thread finds
// its query's slots [a, b) holding keys of the block by binary search over the ascending
// selection, the non-empty ones are compacted in order, then processed kBwdQueries at a time:
// A = dz^T and P^T [64 keys x 16 heads] (zero where the query did not select the key) built in
// shared memory, B = the query's q and dO rows [16 heads x dh] (cp.async), dk += A_dz q,
// dv += A_p dO on tensor cores. Each query's rows are read once per key block instead of once
// per (key, head). dz and p are rounded to bf16 as A operands (dk, dv ~2e-3 relative); sums run
// in a fixed order (queries ascending, head tiles ascending): deterministic, no atomics.
constexpr int kBwdQueries = 8;  // queries per shared-memory batch

template <int HD>
constexpr size_t keyBwdMmaSmemBytes() {
  return size_t(kBwdQueries) * (2 * kMmaRows * HD + 2 * kMmaKeys * kMmaRows) * sizeof(bf16) +
         size_t(kBwdQueries) * kMmaKeys * sizeof(int) + 3 * kMmaThreads * sizeof(int);
}

// First slot x in [lo, hi) of an ascending, -1-padded selection row with !(0 <= sel[x] < key).
__device__ __forceinline__ int selLowerBound(const int32_t* sel, int lo, int hi, int key) {
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    const int32_t v = sel[mid];
    if (v >= 0 && v < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <int HD>
__global__ void __launch_bounds__(kMmaThreads, 2)
    sparse_attention_key_bwd_mma_kernel(const bf16* dContext, const bf16* q, const float* probs,
                                        const float* dz, const int32_t* selected, int batch,
                                        CoreShape s, bf16* dk, bf16* dv) {
  constexpr int kChunks = HD / 8;
  constexpr int kTiles = HD / 8;
  constexpr int kHeadTile = kMmaRows * HD;       // bf16 elements of one query's 16 head rows
  constexpr int kATile = kMmaKeys * kMmaRows;    // bf16 elements of one [64 keys x 16 heads]
  static_assert(HD % 64 == 0 && HD <= 128, "dh must be 64 or 128");
  extern __shared__ __align__(128) unsigned char smemRaw[];
  bf16* sQ = reinterpret_cast<bf16*>(smemRaw);      // [kBwdQueries][16][HD] swizzled
  bf16* sO = sQ + kBwdQueries * kHeadTile;           // [kBwdQueries][16][HD] swizzled
  bf16* sDz = sO + kBwdQueries * kHeadTile;          // [kBwdQueries][64 keys][16 heads]
  bf16* sP = sDz + kBwdQueries * kATile;             // [kBwdQueries][64 keys][16 heads]
  int* sKeySlot = reinterpret_cast<int*>(sP + kBwdQueries * kATile);  // [kBwdQueries][64]
  int* sListT = sKeySlot + kBwdQueries * kMmaKeys;   // [128] compacted candidates
  int* sListA = sListT + kMmaThreads;
  int* sListB = sListA + kMmaThreads;
  __shared__ int warpSums[32];

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t b = int64_t(blockIdx.x) % batch;
  const int64_t kb = int64_t(blockIdx.x) / batch;  // early keys (the most queries) first
  const int m0 = int(kb * kMmaKeys);
  const int64_t base = b * s.seqLen;
  const int g = int(blockIdx.y);
  const int width = int(s.width), seqLen = int(s.seqLen);
  const int quadRow = lane / 4, quadCol = 2 * (lane % 4);
  const int headTiles = (s.group + kMmaRows - 1) / kMmaRows;

  float dkAcc[kTiles][4], dvAcc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dkAcc[i][e] = dvAcc[i][e] = 0.0f;
  }

  for (int tBase = m0; tBase < seqLen; tBase += kMmaThreads) {
    const int t = tBase + tid;
    int a = 0, bEnd = 0;
    if (t < seqLen) {
      const int32_t* sel = selected + (base + t) * s.width;
      a = selLowerBound(sel, 0, width, m0);
      bEnd = selLowerBound(sel, a, min(width, a + kMmaKeys), m0 + kMmaKeys);
    }
    const int flag = bEnd > a ? 1 : 0;
    int total = 0;
    const int pos = blockExclusiveScan(flag, total, warpSums);
    if (flag) {
      sListT[pos] = t;
      sListA[pos] = a;
      sListB[pos] = bEnd;
    }
    __syncthreads();
    for (int q0 = 0; q0 < total; q0 += kBwdQueries) {
      const int nq = min(kBwdQueries, total - q0);
      for (int i = tid; i < kBwdQueries * kMmaKeys; i += kMmaThreads) sKeySlot[i] = -1;
      __syncthreads();
      for (int i = tid; i < nq * kMmaKeys; i += kMmaThreads) {
        const int qi = i / kMmaKeys, x = sListA[q0 + qi] + i % kMmaKeys;
        if (x < sListB[q0 + qi]) {
          const int32_t key = selected[(base + sListT[q0 + qi]) * s.width + x];
          sKeySlot[qi * kMmaKeys + (key - m0)] = x;
        }
      }
      __syncthreads();
      for (int ht = 0; ht < headTiles; ++ht) {
        const int h0 = g * s.group + ht * kMmaRows;
        const int rows = min(kMmaRows, s.group - ht * kMmaRows);
        for (int i = tid; i < nq * kMmaRows * kChunks; i += kMmaThreads) {
          const int qi = i / (kMmaRows * kChunks), row = (i / kChunks) % kMmaRows;
          const int c = i % kChunks;
          const bool ok = row < rows;
          const int64_t off =
              (base + sListT[q0 + qi]) * s.qw + int64_t(h0 + (ok ? row : 0)) * HD + c * 8;
          cpAsync16(sQ + qi * kHeadTile + swizzled<HD>(row, c), q + off, ok);
          cpAsync16(sO + qi * kHeadTile + swizzled<HD>(row, c), dContext + off, ok);
        }
        cpAsyncCommit();
        for (int i = tid; i < nq * kATile; i += kMmaThreads) {
          const int qi = i / kATile, h = (i / kMmaKeys) % kMmaRows, key = i % kMmaKeys;
          const int slot = sKeySlot[qi * kMmaKeys + key];
          float zv = 0.0f, pv = 0.0f;
          if (slot >= 0 && h < rows) {
            const int64_t idx = ((base + sListT[q0 + qi]) * s.heads + h0 + h) * s.width + slot;
            zv = dz[idx];
            pv = probs[idx];
          }
          sDz[qi * kATile + key * kMmaRows + h] = __float2bfloat16(zv);
          sP[qi * kATile + key * kMmaRows + h] = __float2bfloat16(pv);
        }
        cpAsyncWait<0>();
        __syncthreads();
        for (int qi = 0; qi < nq; ++qi) {
          unsigned az[4], ap[4];
          const int aRow = warp * 16 + lane % 16;
          ldsm4(az, sDz + qi * kATile + aRow * kMmaRows + (lane / 16) * 8);
          ldsm4(ap, sP + qi * kATile + aRow * kMmaRows + (lane / 16) * 8);
          const int bRow = (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
          for (int u = 0; u < kTiles / 2; ++u) {
            unsigned bq[4], bo[4];
            ldsm4t(bq, sQ + qi * kHeadTile + swizzled<HD>(bRow, 2 * u + lane / 16));
            ldsm4t(bo, sO + qi * kHeadTile + swizzled<HD>(bRow, 2 * u + lane / 16));
            mma16816(dkAcc[2 * u], az, bq[0], bq[1]);
            mma16816(dkAcc[2 * u + 1], az, bq[2], bq[3]);
            mma16816(dvAcc[2 * u], ap, bo[0], bo[1]);
            mma16816(dvAcc[2 * u + 1], ap, bo[2], bo[3]);
          }
        }
        __syncthreads();  // the batch buffers are refilled next
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = m0 + warp * 16 + quadRow + 8 * i;
    if (key >= seqLen) continue;
    const int64_t out = (base + key) * s.kvw + int64_t(g) * HD + quadCol;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      *reinterpret_cast<__nv_bfloat162*>(dk + out + t * 8) =
          __floats2bfloat162_rn(dkAcc[t][2 * i] * s.scale, dkAcc[t][2 * i + 1] * s.scale);
      *reinterpret_cast<__nv_bfloat162*>(dv + out + t * 8) =
          __floats2bfloat162_rn(dvAcc[t][2 * i], dvAcc[t][2 * i + 1]);
    }
  }
}

template <int HD>
cudaError_t launchKeyBwdMmaT(cudaStream_t stream, const bf16* dContext, const bf16* q,
                             const float* probs, const float* dz, const int32_t* selected,
                             int batch, const CoreShape& s, bf16* dk, bf16* dv) {
  constexpr size_t smem = keyBwdMmaSmemBytes<HD>();
  cudaError_t err = cudaFuncSetAttribute(sparse_attention_key_bwd_mma_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  const int64_t blocksPerSeq = (s.seqLen + kMmaKeys - 1) / kMmaKeys;
  const dim3 grid(unsigned(blocksPerSeq * batch), unsigned(s.heads / s.group));
  sparse_attention_key_bwd_mma_kernel<HD><<<grid, kMmaThreads, smem, stream>>>(
      dContext, q, probs, dz, selected, batch, s, dk, dv);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::sparse_detail

#include "ops/sparse_attention/sparse_attention_key_bwd_split.cuh"

namespace moewb::engine::cuda::sparse_detail {

// Device buffers of the core backward (shapes in sparse_attention_cuda.h).
struct CoreBwdArgs {
  const bf16* dContext;     // [N, H*dh]
  const bf16* q;            // [N, H*dh]
  const bf16* k;            // [N, Hkv*dh]
  const bf16* v;            // [N, Hkv*dh]
  const bf16* context;      // [N, H*dh]
  const int32_t* selected;  // [N, W]
  const float* probs;       // [N, H, W]
  const float* sinkProbs;   // [N, H]
  const int32_t* keyStart;  // [N + 1] transposed selection
  const int32_t* entries;   // [N W]
  float* dz;                // [N, H, W] scratch
  float* sinkTerms;         // [N, H] scratch
  bf16* dq;                 // [N, H*dh] out
  bf16* dk;                 // [N, Hkv*dh] out
  bf16* dv;                 // [N, Hkv*dh] out
  float* dSink;             // [H] added into
  float* keyPartials;       // keyBwdPartialFloats(N, T, Hkv dh) scratch (KeyBwdPath::kMmaSplit)
};

// How phase 2 (dk, dv) runs: the scalar warp kernel, the same with vector loads (bitwise equal),
// on tensor cores (key blocks; needs no transposed selection), or the same split across query
// spans with partials in args.keyPartials (sparse_attention_key_bwd_split.cuh; bitwise kMma when
// T <= its span). The last three need dh 64 / 128 and fall back to the scalar kernel otherwise.
enum class KeyBwdPath { kScalar, kVector, kMma, kMmaSplit };

// The three phases on `stream`; phase 1 on tensor cores when `queryMma` and dh is 64 or 128.
// Returns the first launch error.
inline cudaError_t launchSparseBwd(cudaStream_t stream, int batch, const CoreShape& s,
                                   const CoreBwdArgs& a, bool queryMma, KeyBwdPath keyPath) {
  const int64_t n = int64_t(batch) * s.seqLen;
  const int kvHeads = s.heads / s.group;
  const bool tc = s.hd == 64 || s.hd == 128;
  auto warpBlocksFor = [](int64_t items) {
    return unsigned((items + kCoreWarpsPerBlock - 1) / kCoreWarpsPerBlock);
  };
  cudaError_t err = cudaSuccess;
  if (queryMma && tc) {
    err = s.hd == 64 ? launchQueryBwdMmaT<64>(stream, a.dContext, a.k, a.v, a.context,
                                              a.selected, a.probs, a.sinkProbs, batch, s, a.dz,
                                              a.dq, a.sinkTerms)
                     : launchQueryBwdMmaT<128>(stream, a.dContext, a.k, a.v, a.context,
                                               a.selected, a.probs, a.sinkProbs, batch, s, a.dz,
                                               a.dq, a.sinkTerms);
  } else {
    sparse_attention_query_bwd_kernel<<<warpBlocksFor(n * s.heads), kCoreWarpThreads, 0,
                                        stream>>>(a.dContext, a.q, a.k, a.v, a.context,
                                                  a.selected, a.probs, a.sinkProbs, n, s, a.dz,
                                                  a.dq, a.sinkTerms);
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) return err;
  const unsigned keyBlocks = warpBlocksFor(n * kvHeads);
  if (keyPath == KeyBwdPath::kMmaSplit && tc && a.keyPartials != nullptr) {
    const int span = keyBwdSpan(s.seqLen);
    err = s.hd == 64 ? launchKeyBwdSplitT<64>(stream, a.dContext, a.q, a.probs, a.dz, a.selected,
                                              batch, s, span, a.keyPartials, a.dk, a.dv)
                     : launchKeyBwdSplitT<128>(stream, a.dContext, a.q, a.probs, a.dz,
                                               a.selected, batch, s, span, a.keyPartials, a.dk,
                                               a.dv);
  } else if ((keyPath == KeyBwdPath::kMma || keyPath == KeyBwdPath::kMmaSplit) && tc) {
    err = s.hd == 64 ? launchKeyBwdMmaT<64>(stream, a.dContext, a.q, a.probs, a.dz, a.selected,
                                            batch, s, a.dk, a.dv)
                     : launchKeyBwdMmaT<128>(stream, a.dContext, a.q, a.probs, a.dz, a.selected,
                                             batch, s, a.dk, a.dv);
  } else if (keyPath == KeyBwdPath::kVector && s.hd == 128) {
    sparse_attention_key_bwd_vec_kernel<4><<<keyBlocks, kCoreWarpThreads, 0, stream>>>(
        a.dContext, a.q, a.probs, a.dz, a.keyStart, a.entries, n, kvHeads, s, a.dk, a.dv);
    err = cudaGetLastError();
  } else if (keyPath == KeyBwdPath::kVector && s.hd == 64) {
    sparse_attention_key_bwd_vec_kernel<2><<<keyBlocks, kCoreWarpThreads, 0, stream>>>(
        a.dContext, a.q, a.probs, a.dz, a.keyStart, a.entries, n, kvHeads, s, a.dk, a.dv);
    err = cudaGetLastError();
  } else {
    sparse_attention_key_bwd_kernel<<<keyBlocks, kCoreWarpThreads, 0, stream>>>(
        a.dContext, a.q, a.probs, a.dz, a.keyStart, a.entries, n, kvHeads, s, a.dk, a.dv);
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) return err;
  sparse_attention_sink_bwd_kernel<<<unsigned(s.heads), kCoreReduceThreads, 0, stream>>>(
      a.sinkTerms, n, s.heads, a.dSink);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::sparse_detail
