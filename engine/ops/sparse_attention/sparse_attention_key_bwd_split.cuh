// Phase 2 of the sparse attention core backward (dk, dv), round 2: round 1's tensor-core kernel
// (sparse_attention_key_bwd_mma_kernel, sparse_attention_core_bwd.cuh) with two changes.
//  1. Split query range. Round 1 ran one CTA per (64-key block, kv head) over all queries t >= the
//     block start, so the first block's CTA walked all T queries alone (18.7 ms of 19 at B=4
//     T=4096 W=512). Here the queries are cut into fixed spans of `span` tokens: one CTA per
//     (key block, kv head, span) over the queries of that span at or after the block start
//     (empty ranges exit at once). Each CTA writes fp32 partial sums [part][N][Hkv dh] of its 64
//     keys (all of them, zeros included); sparse_attention_key_bwd_combine_kernel adds a key's
//     parts in ascending order and rounds to bf16 once. No atomics: deterministic. With
//     span >= T there is one part and the result is bitwise round 1's.
//  2. A tiles from the valid slots only. Round 1 filled the [64 keys x 16 heads] dz^T / P^T
//     tiles of a query batch by scanning all 64 x 16 positions per query with a dependent
//     shared lookup before each dz / p load (latency-bound). Here the tiles are zeroed with
//     16-byte stores, then one element per (query, selected slot, head), slot fastest
//     (coalesced dz / p / selected reads), four loads in flight per thread before the stores.
// Cost: the same MMAs and q / dO traffic as round 1 (8 KB per (query, key block) pair), plus the
// partials: parts x N x Hkv dh x 8 bytes written and read once (67 MB at B=4 T=4096, 4 parts).
// Work per CTA is bounded by `span` queries, so the kernel time is about max(total work / slots,
// one span) instead of the longest key block's walk.
// Part of sparse_attention_core_bwd.cuh, which includes this file after the round-1 key kernel
// (it uses kBwdQueries, selLowerBound and the fwd.cuh helpers): include that header instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda::sparse_detail {

// Query span of one CTA: >= 1024 queries, at most kKeyBwdMaxParts parts per sequence.
constexpr int kKeyBwdMinSpan = 1024;
constexpr int kKeyBwdMaxParts = 8;

inline int keyBwdSpan(int64_t seqLen) {
  int64_t span = (seqLen + kKeyBwdMaxParts - 1) / kKeyBwdMaxParts;
  if (span < kKeyBwdMinSpan) span = kKeyBwdMinSpan;
  return int(span);
}

inline int keyBwdParts(int64_t seqLen, int span) { return int((seqLen + span - 1) / span); }

// fp32 elements of the partial sums (dk and dv) for `tokens` = B T tokens.
inline int64_t keyBwdPartialFloats(int64_t tokens, int64_t seqLen, int64_t kvw) {
  return 2 * int64_t(keyBwdParts(seqLen, keyBwdSpan(seqLen))) * tokens * kvw;
}

template <int HD>
constexpr size_t keyBwdSplitSmemBytes() {
  return size_t(kBwdQueries) * (2 * kMmaRows * HD + 2 * kMmaKeys * kMmaRows) * sizeof(bf16) +
         3 * kMmaThreads * sizeof(int) + (kBwdQueries + 1) * sizeof(int);
}

// Grid (ceil(T / 64) * B, Hkv, parts), kMmaThreads threads, keyBwdSplitSmemBytes<HD>() dynamic
// shared memory. dkPart / dvPart [parts][N][Hkv dh] fp32: dk unscaled (sum dz q), dv = sum p dO.
template <int HD>
__global__ void __launch_bounds__(kMmaThreads, 2)
    sparse_attention_key_bwd_split_kernel(const bf16* dContext, const bf16* q, const float* probs,
                                          const float* dz, const int32_t* selected, int batch,
                                          CoreShape s, int span, float* dkPart, float* dvPart) {
  constexpr int kChunks = HD / 8;
  constexpr int kTiles = HD / 8;
  constexpr int kHeadTile = kMmaRows * HD;
  constexpr int kATile = kMmaKeys * kMmaRows;
  static_assert(HD % 64 == 0 && HD <= 128, "dh must be 64 or 128");
  extern __shared__ __align__(128) unsigned char smemRaw[];
  bf16* sQ = reinterpret_cast<bf16*>(smemRaw);      // [kBwdQueries][16][HD] swizzled
  bf16* sO = sQ + kBwdQueries * kHeadTile;           // [kBwdQueries][16][HD] swizzled
  bf16* sDz = sO + kBwdQueries * kHeadTile;          // [kBwdQueries][64 keys][16 heads]
  bf16* sP = sDz + kBwdQueries * kATile;             // [kBwdQueries][64 keys][16 heads]
  int* sListT = reinterpret_cast<int*>(sP + kBwdQueries * kATile);  // [128] candidates
  int* sListA = sListT + kMmaThreads;
  int* sListB = sListA + kMmaThreads;
  int* sOff = sListB + kMmaThreads;  // [kBwdQueries + 1] element offsets of the batch's queries
  __shared__ int warpSums[32];

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t b = int64_t(blockIdx.x) % batch;
  const int64_t kb = int64_t(blockIdx.x) / batch;
  const int m0 = int(kb * kMmaKeys);
  const int64_t base = b * s.seqLen;
  const int g = int(blockIdx.y);
  const int part = int(blockIdx.z);
  const int width = int(s.width), seqLen = int(s.seqLen);
  const int tBegin = max(m0, part * span), tEnd = min(seqLen, (part + 1) * span);
  if (tBegin >= tEnd) return;  // CTA-uniform: this part has no queries at or after the block
  const int quadRow = lane / 4, quadCol = 2 * (lane % 4);
  const int headTiles = (s.group + kMmaRows - 1) / kMmaRows;

  float dkAcc[kTiles][4], dvAcc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dkAcc[i][e] = dvAcc[i][e] = 0.0f;
  }

  for (int tBase = tBegin; tBase < tEnd; tBase += kMmaThreads) {
    const int t = tBase + tid;
    int a = 0, bEnd = 0;
    if (t < tEnd) {
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
        // Zero the A tiles (16-byte stores) and the element offsets of the batch's queries:
        // query qi owns (b - a) slots x `rows` heads, slot fastest.
        for (int i = tid; i < nq * kATile / 8; i += kMmaThreads) {
          reinterpret_cast<uint4*>(sDz)[i] = make_uint4(0u, 0u, 0u, 0u);
          reinterpret_cast<uint4*>(sP)[i] = make_uint4(0u, 0u, 0u, 0u);
        }
        if (tid == 0) {
          int acc = 0;
          for (int qi = 0; qi < nq; ++qi) {
            sOff[qi] = acc;
            acc += (sListB[q0 + qi] - sListA[q0 + qi]) * rows;
          }
          sOff[nq] = acc;
        }
        __syncthreads();
        const int elems = sOff[nq];
        for (int e0 = tid; e0 < elems; e0 += 4 * kMmaThreads) {
          int dst[4];
          float zv[4], pv[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int e = e0 + u * kMmaThreads;
            dst[u] = -1;
            zv[u] = pv[u] = 0.0f;
            if (e < elems) {
              int qi = 0;
              while (qi + 1 < nq && sOff[qi + 1] <= e) ++qi;
              const int aq = sListA[q0 + qi], nSlots = sListB[q0 + qi] - aq;
              const int local = e - sOff[qi], h = local / nSlots, x = aq + local % nSlots;
              const int64_t r = base + sListT[q0 + qi];
              const int32_t key = selected[r * s.width + x];
              const int64_t idx = (r * s.heads + h0 + h) * s.width + x;
              zv[u] = dz[idx];
              pv[u] = probs[idx];
              dst[u] = qi * kATile + (key - m0) * kMmaRows + h;
            }
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (dst[u] >= 0) {
              sDz[dst[u]] = __float2bfloat16(zv[u]);
              sP[dst[u]] = __float2bfloat16(pv[u]);
            }
          }
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
  const int64_t n = int64_t(batch) * s.seqLen;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = m0 + warp * 16 + quadRow + 8 * i;
    if (key >= seqLen) continue;
    const int64_t out = (int64_t(part) * n + base + key) * s.kvw + int64_t(g) * HD + quadCol;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      *reinterpret_cast<float2*>(dkPart + out + t * 8) =
          make_float2(dkAcc[t][2 * i], dkAcc[t][2 * i + 1]);
      *reinterpret_cast<float2*>(dvPart + out + t * 8) =
          make_float2(dvAcc[t][2 * i], dvAcc[t][2 * i + 1]);
    }
  }
}

// dk[m] = bf16(scale * sum of parts p0.. in order), dv[m] = bf16(sum of parts), where p0 is the
// first part with queries at or after m's 64-key block. Grid-stride over N * Hkv dh elements.
__global__ void sparse_attention_key_bwd_combine_kernel(const float* dkPart, const float* dvPart,
                                                        int64_t n, CoreShape s, int span,
                                                        int parts, bf16* dk, bf16* dv) {
  const int64_t total = n * s.kvw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / s.kvw;
    const int m0 = int((m % s.seqLen) / kMmaKeys) * kMmaKeys;
    const int p0 = m0 / span;
    float k = dkPart[int64_t(p0) * total + i], v = dvPart[int64_t(p0) * total + i];
    for (int p = p0 + 1; p < parts; ++p) {
      k += dkPart[int64_t(p) * total + i];
      v += dvPart[int64_t(p) * total + i];
    }
    dk[i] = __float2bfloat16(k * s.scale);
    dv[i] = __float2bfloat16(v);
  }
}

// Phase 2 split across query spans of `span` tokens (the engine passes keyBwdSpan(T)); `partials`
// holds 2 keyBwdParts(T, span) N Hkv dh floats (keyBwdPartialFloats for the engine's span).
template <int HD>
cudaError_t launchKeyBwdSplitT(cudaStream_t stream, const bf16* dContext, const bf16* q,
                               const float* probs, const float* dz, const int32_t* selected,
                               int batch, const CoreShape& s, int span, float* partials, bf16* dk,
                               bf16* dv) {
  constexpr size_t smem = keyBwdSplitSmemBytes<HD>();
  cudaError_t err = cudaFuncSetAttribute(sparse_attention_key_bwd_split_kernel<HD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  if (span < 1) return cudaErrorInvalidValue;
  const int parts = keyBwdParts(s.seqLen, span);
  const int64_t n = int64_t(batch) * s.seqLen;
  float* dkPart = partials;
  float* dvPart = partials + int64_t(parts) * n * s.kvw;
  const int64_t blocksPerSeq = (s.seqLen + kMmaKeys - 1) / kMmaKeys;
  const dim3 grid(unsigned(blocksPerSeq * batch), unsigned(s.heads / s.group), unsigned(parts));
  sparse_attention_key_bwd_split_kernel<HD><<<grid, kMmaThreads, smem, stream>>>(
      dContext, q, probs, dz, selected, batch, s, span, dkPart, dvPart);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t total = n * s.kvw;
  const unsigned blocks = unsigned(total / 256 + 1 < 8192 ? total / 256 + 1 : 8192);
  sparse_attention_key_bwd_combine_kernel<<<blocks, 256, 0, stream>>>(dkPart, dvPart, n, s, span,
                                                                      parts, dk, dv);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::sparse_detail
