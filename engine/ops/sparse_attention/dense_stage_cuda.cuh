// Device code of the gated sparse attention layer's dense warm-up stage on flash kernels
// (dense_stage_cuda.h), included only by .cu files: dense_stage_cuda.cu and the scratch benchmark
// bench/scratch/dense_stage_01.cu (one source of truth). Needs nothing beyond CUDA and the PTX
// helpers / tile layout of ops/attention/flash_attention_cuda.cuh, whose FA2 kernels these adapt.
//
// Differences from flash_attention_cuda.cuh: query heads h read kv head g = h / (H / Hkv) (MQA
// when Hkv = 1; q, o, dq have row stride H*K, k, v, dk, dv Hkv*K); a per-head sink logit kappa_h
// joins the softmax denominator (running max starts at kappa_h / scale in raw-score units, the sum
// at 1), so lse_th = ln(exp(kappa_h) + sum_{s<=t} exp(scale q_th.k_s)) and the sink probability is
// exp(kappa_h - lse); the backward is the plain FA2 backward with that lse (the sink has no value
// row, so delta = rowsum(dO * O) = sum_s p dp_s), plus dkappa_h = -sum_t p_sink[t,h] delta[t,h].
// Layouts: q, o, dO, dq bf16 [N, H*K]; k, v, dk, dv bf16 [N, Hkv*K]; lse, delta fp32 [B, H, T];
// sinkProbs, sinkTerms fp32 [N, H]; dkPart, dvPart fp32 [S, N, Hkv*K] (S head splits); target
// fp32 [N, T] (row n = b T + t, column s = key position, 0 for s > t).
//
// Kernels (K = 64 or 128; 8 warps of 16 rows; cp.async double buffers; mma.sync m16n8k16):
//   dense_stage_fwd_kernel      one CTA per 128 queries of one (b, h), key tiles of 64 from the
//                               diagonal down (flash_attention_fwd_kernel plus the sink, MQA and
//                               sinkProbs).
//   dense_stage_delta_kernel    delta = rowsum(dO * O) and sinkTerms = -p_sink delta.
//   dense_stage_sink_kernel     dSink[h] += sum over tokens of sinkTerms (fixed tree order).
//   dense_stage_dkdv_kernel     one CTA per 128 keys of one kv head and one split of its query
//                               heads: walks (head, query tile) pairs in order with dK, dV in
//                               registers, writes fp32 partials of its split.
//   dense_stage_dkdv_reduce_kernel  dk, dv = sum over splits in split order, rounded to bf16.
//   dense_stage_dq_kernel       one CTA per 128 queries of one (b, h), recomputes S and dP.
//   dense_stage_target_kernel   p*: one CTA per floor(128 / H) tokens x H heads (rows t-major),
//                               S = Q K^T per 64-key tile on tensor cores (each kv head in turn),
//                               P = exp(S scale - lse) into shared memory, summed over the heads of
//                               each token in head order, written unnormalised, then the CTA
//                               rescales its rows by 1 / (row sum) (fixed order) and zero-fills
//                               keys past its last tile.
// Everything is deterministic: one owner per output element, fixed summation orders, no atomics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention/flash_attention_cuda.cuh"

namespace moewb::engine::cuda::dense_stage {

using namespace ::moewb::engine::cuda::flash;  // fbf16, tiles, PTX helpers, kFwdM/kFwdN/kBwdN

constexpr int kTargetRows = 128;   // (token, head) rows per target CTA
constexpr int kTargetKeys = 64;    // keys per target tile
constexpr int kReduceThreads = 256;

struct DenseStageParams {
  const fbf16* q;      // [N, H*K]
  const fbf16* k;      // [N, Hkv*K]
  const fbf16* v;      // [N, Hkv*K]
  const fbf16* sink;   // [H] sink logits kappa_h
  fbf16* o;            // [N, H*K] forward output (context)
  float* lse;          // [B, H, T] natural log, sink included
  float* sinkProbs;    // [N, H]
  const fbf16* dO;     // [N, H*K] (backward)
  float* delta;        // [B, H, T] workspace
  float* sinkTerms;    // [N, H] workspace, -p_sink delta
  fbf16* dq;           // [N, H*K]
  float* dkPart;       // [splits, N, Hkv*K] workspace (dK scale included)
  float* dvPart;       // [splits, N, Hkv*K] workspace
  fbf16* dk;           // [N, Hkv*K]
  fbf16* dv;           // [N, Hkv*K]
  float* dSink;        // [H] added into
  float* target;       // [N, T] p*
  int seqLen;          // T
  int heads;           // H
  int kvHeads;         // Hkv, divides H
  int splits;          // head splits of the dK/dV pass, divides H / Hkv
  int64_t tokens;      // N = B*T
  float scale;         // 1/sqrt(K)
};

// ---- Forward ----------------------------------------------------------------------------------

template <int K>
__global__ void __launch_bounds__(kThreads, 1) dense_stage_fwd_kernel(DenseStageParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileN = kFwdN * K * 2;
  const int T = p.seqLen, H = p.heads, group = p.heads / p.kvHeads;
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int qStart = (gridDim.y - 1 - blockIdx.y) * kFwdM;  // longest first
  const int64_t ldq = int64_t(H) * K, ldkv = int64_t(p.kvHeads) * K;
  const int64_t qBase = int64_t(b) * T * ldq + int64_t(h) * K;
  const int64_t kvBase = int64_t(b) * T * ldkv + int64_t(h / group) * K;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sQ = smemAddr(smem), sK = sQ + kFwdM * K * 2, sV = sK + 2 * kTileN;
  const int kvEnd = min(qStart + kFwdM, T);
  const int nTiles = (kvEnd + kFwdN - 1) / kFwdN;

  loadTile<kFwdM, K>(sQ, p.q + qBase, ldq, qStart, T, tid);
  loadTile<kFwdN, K>(sK + ((nTiles - 1) & 1) * kTileN, p.k + kvBase, ldkv, (nTiles - 1) * kFwdN,
                     T, tid);
  cpAsyncCommit();
  loadTile<kFwdN, K>(sV + ((nTiles - 1) & 1) * kTileN, p.v + kvBase, ldkv, (nTiles - 1) * kFwdN,
                     T, tid);
  cpAsyncCommit();

  const float sl2 = p.scale * kLog2e;
  const float sinkLogit = __bfloat162float(p.sink[h]);
  const int wRow0 = qStart + warp * 16;
  const int row0 = wRow0 + (lane >> 2), row1 = row0 + 8;
  uint32_t qf[K / 16][4];
  float o[K / 8][4];
#pragma unroll
  for (int dt = 0; dt < K / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  // The sink as a key of raw score kappa / scale whose exp(. - m) = 1 is counted once per row
  // (quad lane 0; the quad's partial sums are added at the end).
  float m0 = sinkLogit / p.scale, m1 = m0;
  float l0 = (lane & 3) == 0 ? 1.0f : 0.0f, l1 = l0;

  for (int j = nTiles - 1; j >= 0; --j) {
    const int st = j & 1;
    cpAsyncWait<1>();
    __syncthreads();
    if (j > 0) {
      loadTile<kFwdN, K>(sK + (st ^ 1) * kTileN, p.k + kvBase, ldkv, (j - 1) * kFwdN, T, tid);
    }
    cpAsyncCommit();
    if (j == nTiles - 1) {
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) ldsm4(qf[kk], addrA<K>(sQ, warp * 16, kk * 2, lane));
    }
    const int kv0 = j * kFwdN;
    const bool active = kv0 <= wRow0 + 15;
    float s[kFwdN / 8][4];
    uint32_t pa[kFwdN / 16][4];
    if (active) {
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const uint32_t tK = sK + st * kTileN;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < kFwdN / 16; ++nn) {
          uint32_t bf[4];
          ldsm4(bf, addrB<K>(tK, nn * 16, kk * 2, lane));
          mma16816(s[2 * nn], qf[kk], bf[0], bf[1]);
          mma16816(s[2 * nn + 1], qf[kk], bf[2], bf[3]);
        }
      }
      if (kv0 + kFwdN - 1 > wRow0) {
#pragma unroll
        for (int nt = 0; nt < kFwdN / 8; ++nt) {
          const int c = kv0 + nt * 8 + (lane & 3) * 2;
          if (c > row0) s[nt][0] = -INFINITY;
          if (c + 1 > row0) s[nt][1] = -INFINITY;
          if (c > row1) s[nt][2] = -INFINITY;
          if (c + 1 > row1) s[nt][3] = -INFINITY;
        }
      }
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) {
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float ms0 = mx0 * sl2, ms1 = mx1 * sl2;  // finite: the max starts at the sink
      const float alpha0 = fastExp2(m0 * sl2 - ms0), alpha1 = fastExp2(m1 * sl2 - ms1);
      m0 = mx0;
      m1 = mx1;
      l0 *= alpha0;
      l1 *= alpha1;
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) {
        s[nt][0] = fastExp2(fmaf(s[nt][0], sl2, -ms0));
        s[nt][1] = fastExp2(fmaf(s[nt][1], sl2, -ms0));
        s[nt][2] = fastExp2(fmaf(s[nt][2], sl2, -ms1));
        s[nt][3] = fastExp2(fmaf(s[nt][3], sl2, -ms1));
        l0 += s[nt][0] + s[nt][1];
        l1 += s[nt][2] + s[nt][3];
      }
#pragma unroll
      for (int dt = 0; dt < K / 8; ++dt) {
        o[dt][0] *= alpha0;
        o[dt][1] *= alpha0;
        o[dt][2] *= alpha1;
        o[dt][3] *= alpha1;
      }
#pragma unroll
      for (int kk = 0; kk < kFwdN / 16; ++kk) {
        pa[kk][0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    }
    cpAsyncWait<1>();
    __syncthreads();
    if (j > 0) {
      loadTile<kFwdN, K>(sV + (st ^ 1) * kTileN, p.v + kvBase, ldkv, (j - 1) * kFwdN, T, tid);
    }
    cpAsyncCommit();
    if (active) {
      const uint32_t tV = sV + st * kTileN;
#pragma unroll
      for (int kk = 0; kk < kFwdN / 16; ++kk) {
#pragma unroll
        for (int dn = 0; dn < K / 16; ++dn) {
          uint32_t bf[4];
          ldsm4t(bf, addrA<K>(tV, kk * 16, dn * 2, lane));
          mma16816(o[2 * dn], pa[kk], bf[0], bf[1]);
          mma16816(o[2 * dn + 1], pa[kk], bf[2], bf[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;  // l >= 1 (the sink term)
  if ((lane & 3) == 0) {
    float* lseRow = p.lse + (int64_t(b) * H + h) * T;
    const int64_t tok = int64_t(b) * T;
    if (row0 < T) {
      const float lse = m0 * p.scale + logf(l0);
      lseRow[row0] = lse;
      p.sinkProbs[(tok + row0) * H + h] = expf(sinkLogit - lse);
    }
    if (row1 < T) {
      const float lse = m1 * p.scale + logf(l1);
      lseRow[row1] = lse;
      p.sinkProbs[(tok + row1) * H + h] = expf(sinkLogit - lse);
    }
  }
  storeWarpRows<K>(smem, 0, o, inv0, inv1, p.o + qBase, ldq, qStart, T, warp * 16, lane);
}

// ---- Backward: delta, sink terms, sink gradient -----------------------------------------------

// One group of K/8 threads per (token, head); fixed-order tree sum.
template <int K>
__global__ void __launch_bounds__(256) dense_stage_delta_kernel(DenseStageParams p) {
  constexpr int kGroup = K / 8;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t pair = idx / kGroup;
  const int part = int(idx % kGroup);
  const int H = p.heads, T = p.seqLen;
  float acc = 0.0f;
  const bool valid = pair < p.tokens * H;
  const int64_t n = valid ? pair / H : 0;
  const int h = valid ? int(pair % H) : 0;
  if (valid) {
    const int64_t off = n * H * K + int64_t(h) * K + part * 8;
    const uint4 ov = *reinterpret_cast<const uint4*>(p.o + off);
    const uint4 dv = *reinterpret_cast<const uint4*>(p.dO + off);
    const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&ov);
    const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&dv);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 of = __bfloat1622float2(o2[i]), df = __bfloat1622float2(d2[i]);
      acc = fmaf(of.x, df.x, acc);
      acc = fmaf(of.y, df.y, acc);
    }
  }
#pragma unroll
  for (int off = kGroup / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (valid && part == 0) {
    const int64_t b = n / T, t = n % T;
    p.delta[(b * H + h) * T + t] = acc;
    p.sinkTerms[pair] = -p.sinkProbs[pair] * acc;
  }
}

// One CTA per head: dSink[h] += sum_n sinkTerms[n, h]; thread i sums rows i, i + 256, ... in
// order, then a fixed shared-memory tree.
__global__ void __launch_bounds__(kReduceThreads) dense_stage_sink_kernel(DenseStageParams p) {
  __shared__ float part[kReduceThreads];
  const int h = blockIdx.x, H = p.heads;
  float acc = 0.0f;
  for (int64_t n = threadIdx.x; n < p.tokens; n += kReduceThreads) acc += p.sinkTerms[n * H + h];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.dSink[h] += part[0];
}

// ---- Backward: dK, dV partials (one CTA per 128 keys, one kv head, one split of its heads) ----

template <int K>
__host__ __device__ constexpr int denseDkdvSmemBytes() {
  return (2 * kBwdN + 4 * kBwdM<K>) * K * 2 + 4 * kBwdM<K> * 4;
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1) dense_stage_dkdv_kernel(DenseStageParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kM = kBwdM<K>;
  constexpr int kTileM = kM * K * 2;
  const int T = p.seqLen, H = p.heads, Hkv = p.kvHeads, group = H / Hkv;
  const int perSplit = group / p.splits;
  const int b = blockIdx.x / (Hkv * p.splits);
  const int g = (blockIdx.x / p.splits) % Hkv, split = blockIdx.x % p.splits;
  const int hFirst = g * group + split * perSplit;
  const int kvStart = blockIdx.y * kBwdN;
  const int64_t ldq = int64_t(H) * K, ldkv = int64_t(Hkv) * K;
  const int64_t kvBase = int64_t(b) * T * ldkv + int64_t(g) * K;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sK = smemAddr(smem), sV = sK + kBwdN * K * 2, sQ = sV + kBwdN * K * 2;
  const uint32_t sD = sQ + 2 * kTileM;
  float* sLse = reinterpret_cast<float*>(smem + (sD - sK) + 2 * kTileM);  // [2][kM] log2 units
  float* sDelta = sLse + 2 * kM;                                          // [2][kM]
  const int iFirst = kvStart / kM, nQ = (T + kM - 1) / kM;
  const int perHead = nQ - iFirst, nIt = perSplit * perHead;

  // Iteration it: head hFirst + it / perHead, query tile iFirst + it % perHead.
  auto loadIt = [&](int it, int stage) {
    const int h = hFirst + it / perHead, i = iFirst + it % perHead;
    const int64_t qBase = int64_t(b) * T * ldq + int64_t(h) * K;
    loadTile<kM, K>(sQ + stage * kTileM, p.q + qBase, ldq, i * kM, T, tid);
    loadTile<kM, K>(sD + stage * kTileM, p.dO + qBase, ldq, i * kM, T, tid);
    if (tid < kM) {
      const int t = i * kM + tid;
      const int64_t rowBase = (int64_t(b) * H + h) * T;
      sLse[stage * kM + tid] = t < T ? p.lse[rowBase + t] * kLog2e : INFINITY;
      sDelta[stage * kM + tid] = t < T ? p.delta[rowBase + t] : 0.0f;
    }
  };
  loadTile<kBwdN, K>(sK, p.k + kvBase, ldkv, kvStart, T, tid);
  loadTile<kBwdN, K>(sV, p.v + kvBase, ldkv, kvStart, T, tid);
  loadIt(0, 0);
  cpAsyncCommit();

  const float sl2 = p.scale * kLog2e;
  const int wKey0 = kvStart + warp * 16;
  const int key0 = wKey0 + (lane >> 2), key1 = key0 + 8;
  float dk[K / 8][4], dv[K / 8][4];
#pragma unroll
  for (int dt = 0; dt < K / 8; ++dt) {
    dk[dt][0] = dk[dt][1] = dk[dt][2] = dk[dt][3] = 0.0f;
    dv[dt][0] = dv[dt][1] = dv[dt][2] = dv[dt][3] = 0.0f;
  }

  for (int it = 0; it < nIt; ++it) {
    const int st = it & 1;
    cpAsyncWait<0>();
    __syncthreads();
    if (it + 1 < nIt) loadIt(it + 1, st ^ 1);
    cpAsyncCommit();
    const int q0 = (iFirst + it % perHead) * kM;
    if (q0 + kM - 1 < wKey0) continue;
    const uint32_t tQ = sQ + st * kTileM, tD = sD + st * kTileM;
    const float* lse2 = sLse + st * kM;
    const float* dlt = sDelta + st * kM;
    float s[kM / 8][4];
#pragma unroll
    for (int nt = 0; nt < kM / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      uint32_t af[4];
      ldsm4(af, addrA<K>(sK, warp * 16, kk * 2, lane));
#pragma unroll
      for (int nn = 0; nn < kM / 16; ++nn) {
        uint32_t bf[4];
        ldsm4(bf, addrB<K>(tQ, nn * 16, kk * 2, lane));
        mma16816(s[2 * nn], af, bf[0], bf[1]);
        mma16816(s[2 * nn + 1], af, bf[2], bf[3]);
      }
    }
    const bool diag = q0 < wKey0 + 15;
#pragma unroll
    for (int nt = 0; nt < kM / 8; ++nt) {
      const int c = nt * 8 + (lane & 3) * 2;
      const float la = lse2[c], lb = lse2[c + 1];
      s[nt][0] = fastExp2(fmaf(s[nt][0], sl2, -la));
      s[nt][1] = fastExp2(fmaf(s[nt][1], sl2, -lb));
      s[nt][2] = fastExp2(fmaf(s[nt][2], sl2, -la));
      s[nt][3] = fastExp2(fmaf(s[nt][3], sl2, -lb));
      if (diag) {
        if (key0 > q0 + c) s[nt][0] = 0.0f;
        if (key0 > q0 + c + 1) s[nt][1] = 0.0f;
        if (key1 > q0 + c) s[nt][2] = 0.0f;
        if (key1 > q0 + c + 1) s[nt][3] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dn = 0; dn < K / 16; ++dn) {
        uint32_t bf[4];
        ldsm4t(bf, addrA<K>(tD, kk * 16, dn * 2, lane));
        mma16816(dv[2 * dn], pa, bf[0], bf[1]);
        mma16816(dv[2 * dn + 1], pa, bf[2], bf[3]);
      }
    }
    float dp[kM / 8][4];
#pragma unroll
    for (int nt = 0; nt < kM / 8; ++nt) dp[nt][0] = dp[nt][1] = dp[nt][2] = dp[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      uint32_t af[4];
      ldsm4(af, addrA<K>(sV, warp * 16, kk * 2, lane));
#pragma unroll
      for (int nn = 0; nn < kM / 16; ++nn) {
        uint32_t bf[4];
        ldsm4(bf, addrB<K>(tD, nn * 16, kk * 2, lane));
        mma16816(dp[2 * nn], af, bf[0], bf[1]);
        mma16816(dp[2 * nn + 1], af, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      uint32_t da[4];
      const int c0 = kk * 16 + (lane & 3) * 2, c1 = c0 + 8;
      const float d00 = dlt[c0], d01 = dlt[c0 + 1], d10 = dlt[c1], d11 = dlt[c1 + 1];
      da[0] = packBf16(s[2 * kk][0] * (dp[2 * kk][0] - d00), s[2 * kk][1] * (dp[2 * kk][1] - d01));
      da[1] = packBf16(s[2 * kk][2] * (dp[2 * kk][2] - d00), s[2 * kk][3] * (dp[2 * kk][3] - d01));
      da[2] = packBf16(s[2 * kk + 1][0] * (dp[2 * kk + 1][0] - d10),
                       s[2 * kk + 1][1] * (dp[2 * kk + 1][1] - d11));
      da[3] = packBf16(s[2 * kk + 1][2] * (dp[2 * kk + 1][2] - d10),
                       s[2 * kk + 1][3] * (dp[2 * kk + 1][3] - d11));
#pragma unroll
      for (int dn = 0; dn < K / 16; ++dn) {
        uint32_t bf[4];
        ldsm4t(bf, addrA<K>(tQ, kk * 16, dn * 2, lane));
        mma16816(dk[2 * dn], da, bf[0], bf[1]);
        mma16816(dk[2 * dn + 1], da, bf[2], bf[3]);
      }
    }
  }
  cpAsyncWait<0>();
  // fp32 partials of this split straight from the accumulators (rows key0, key1).
  const int64_t part = int64_t(split) * p.tokens * ldkv + int64_t(b) * T * ldkv + int64_t(g) * K;
#pragma unroll
  for (int dt = 0; dt < K / 8; ++dt) {
    const int c = dt * 8 + (lane & 3) * 2;
    if (key0 < T) {
      const int64_t off = part + int64_t(key0) * ldkv + c;
      *reinterpret_cast<float2*>(p.dkPart + off) =
          make_float2(dk[dt][0] * p.scale, dk[dt][1] * p.scale);
      *reinterpret_cast<float2*>(p.dvPart + off) = make_float2(dv[dt][0], dv[dt][1]);
    }
    if (key1 < T) {
      const int64_t off = part + int64_t(key1) * ldkv + c;
      *reinterpret_cast<float2*>(p.dkPart + off) =
          make_float2(dk[dt][2] * p.scale, dk[dt][3] * p.scale);
      *reinterpret_cast<float2*>(p.dvPart + off) = make_float2(dv[dt][2], dv[dt][3]);
    }
  }
}

// dk, dv [N, Hkv*K] = sum over splits (split order) of the partials, rounded to bf16.
__global__ void __launch_bounds__(256) dense_stage_dkdv_reduce_kernel(DenseStageParams p,
                                                                      int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float sk = 0.0f, sv = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    sk += p.dkPart[int64_t(s) * count + i];
    sv += p.dvPart[int64_t(s) * count + i];
  }
  p.dk[i] = __float2bfloat16(sk);
  p.dv[i] = __float2bfloat16(sv);
}

// ---- Backward: dQ (one CTA per 128 queries of one (b, h)) --------------------------------------

template <int K>
__host__ __device__ constexpr int denseDqSmemBytes() {
  return (2 * kFwdM + 4 * kFwdN) * K * 2;
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1) dense_stage_dq_kernel(DenseStageParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileN = kFwdN * K * 2;
  const int T = p.seqLen, H = p.heads, group = p.heads / p.kvHeads;
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int qStart = (gridDim.y - 1 - blockIdx.y) * kFwdM;
  const int64_t ldq = int64_t(H) * K, ldkv = int64_t(p.kvHeads) * K;
  const int64_t qBase = int64_t(b) * T * ldq + int64_t(h) * K;
  const int64_t kvBase = int64_t(b) * T * ldkv + int64_t(h / group) * K;
  const int64_t rowBase = (int64_t(b) * H + h) * T;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sQ = smemAddr(smem), sD = sQ + kFwdM * K * 2, sK = sD + kFwdM * K * 2;
  const uint32_t sV = sK + 2 * kTileN;
  const int kvEnd = min(qStart + kFwdM, T);
  const int nTiles = (kvEnd + kFwdN - 1) / kFwdN;

  loadTile<kFwdM, K>(sQ, p.q + qBase, ldq, qStart, T, tid);
  loadTile<kFwdM, K>(sD, p.dO + qBase, ldq, qStart, T, tid);
  loadTile<kFwdN, K>(sK + ((nTiles - 1) & 1) * kTileN, p.k + kvBase, ldkv, (nTiles - 1) * kFwdN,
                     T, tid);
  cpAsyncCommit();
  loadTile<kFwdN, K>(sV + ((nTiles - 1) & 1) * kTileN, p.v + kvBase, ldkv, (nTiles - 1) * kFwdN,
                     T, tid);
  cpAsyncCommit();

  const float sl2 = p.scale * kLog2e;
  const int wRow0 = qStart + warp * 16;
  const int row0 = wRow0 + (lane >> 2), row1 = row0 + 8;
  const float lse20 = row0 < T ? p.lse[rowBase + row0] * kLog2e : INFINITY;
  const float lse21 = row1 < T ? p.lse[rowBase + row1] * kLog2e : INFINITY;
  const float dl0 = row0 < T ? p.delta[rowBase + row0] : 0.0f;
  const float dl1 = row1 < T ? p.delta[rowBase + row1] : 0.0f;
  uint32_t qf[K / 16][4];
  float dq[K / 8][4];
#pragma unroll
  for (int dt = 0; dt < K / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;

  for (int j = nTiles - 1; j >= 0; --j) {
    const int st = j & 1;
    cpAsyncWait<1>();
    __syncthreads();
    if (j > 0) {
      loadTile<kFwdN, K>(sK + (st ^ 1) * kTileN, p.k + kvBase, ldkv, (j - 1) * kFwdN, T, tid);
    }
    cpAsyncCommit();
    if (j == nTiles - 1) {
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) ldsm4(qf[kk], addrA<K>(sQ, warp * 16, kk * 2, lane));
    }
    const int kv0 = j * kFwdN;
    const bool active = kv0 <= wRow0 + 15;
    const uint32_t tK = sK + st * kTileN, tV = sV + st * kTileN;
    float s[kFwdN / 8][4];
    if (active) {
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < kFwdN / 16; ++nn) {
          uint32_t bf[4];
          ldsm4(bf, addrB<K>(tK, nn * 16, kk * 2, lane));
          mma16816(s[2 * nn], qf[kk], bf[0], bf[1]);
          mma16816(s[2 * nn + 1], qf[kk], bf[2], bf[3]);
        }
      }
      const bool diag = kv0 + kFwdN - 1 > wRow0;
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) {
        const int c = kv0 + nt * 8 + (lane & 3) * 2;
        s[nt][0] = fastExp2(fmaf(s[nt][0], sl2, -lse20));
        s[nt][1] = fastExp2(fmaf(s[nt][1], sl2, -lse20));
        s[nt][2] = fastExp2(fmaf(s[nt][2], sl2, -lse21));
        s[nt][3] = fastExp2(fmaf(s[nt][3], sl2, -lse21));
        if (diag) {
          if (c > row0) s[nt][0] = 0.0f;
          if (c + 1 > row0) s[nt][1] = 0.0f;
          if (c > row1) s[nt][2] = 0.0f;
          if (c + 1 > row1) s[nt][3] = 0.0f;
        }
      }
    }
    cpAsyncWait<1>();
    __syncthreads();
    if (j > 0) {
      loadTile<kFwdN, K>(sV + (st ^ 1) * kTileN, p.v + kvBase, ldkv, (j - 1) * kFwdN, T, tid);
    }
    cpAsyncCommit();
    if (active) {
      float dp[kFwdN / 8][4];
#pragma unroll
      for (int nt = 0; nt < kFwdN / 8; ++nt) dp[nt][0] = dp[nt][1] = dp[nt][2] = dp[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        uint32_t af[4];
        ldsm4(af, addrA<K>(sD, warp * 16, kk * 2, lane));
#pragma unroll
        for (int nn = 0; nn < kFwdN / 16; ++nn) {
          uint32_t bf[4];
          ldsm4(bf, addrB<K>(tV, nn * 16, kk * 2, lane));
          mma16816(dp[2 * nn], af, bf[0], bf[1]);
          mma16816(dp[2 * nn + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < kFwdN / 16; ++kk) {
        uint32_t da[4];
        da[0] = packBf16(s[2 * kk][0] * (dp[2 * kk][0] - dl0),
                         s[2 * kk][1] * (dp[2 * kk][1] - dl0));
        da[1] = packBf16(s[2 * kk][2] * (dp[2 * kk][2] - dl1),
                         s[2 * kk][3] * (dp[2 * kk][3] - dl1));
        da[2] = packBf16(s[2 * kk + 1][0] * (dp[2 * kk + 1][0] - dl0),
                         s[2 * kk + 1][1] * (dp[2 * kk + 1][1] - dl0));
        da[3] = packBf16(s[2 * kk + 1][2] * (dp[2 * kk + 1][2] - dl1),
                         s[2 * kk + 1][3] * (dp[2 * kk + 1][3] - dl1));
#pragma unroll
        for (int dn = 0; dn < K / 16; ++dn) {
          uint32_t bf[4];
          ldsm4t(bf, addrA<K>(tK, kk * 16, dn * 2, lane));
          mma16816(dq[2 * dn], da, bf[0], bf[1]);
          mma16816(dq[2 * dn + 1], da, bf[2], bf[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();
  storeWarpRows<K>(smem, 0, dq, p.scale, p.scale, p.dq + qBase, ldq, qStart, T, warp * 16, lane);
}

// ---- Indexer target p* ------------------------------------------------------------------------

template <int K>
__host__ __device__ constexpr int denseTargetSmemBytes() {
  // Q rows, 2 stages of a K tile, P [128][64] fp32, column sums [128][64] fp32, row scales.
  return (kTargetRows + 2 * kTargetKeys) * K * 2 + 2 * kTargetRows * kTargetKeys * 4 +
         kTargetRows * 4;
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1) dense_stage_target_kernel(DenseStageParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileN = kTargetKeys * K * 2, kChunks = K / 8;
  const int T = p.seqLen, H = p.heads, Hkv = p.kvHeads, group = H / Hkv;
  const int nt = kTargetRows / H;  // tokens per CTA
  const int b = blockIdx.y;
  const int t0 = (gridDim.x - 1 - blockIdx.x) * nt;  // longest first
  const int tEnd = min(t0 + nt, T);
  const int64_t ldq = int64_t(H) * K, ldkv = int64_t(Hkv) * K;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t sQ = smemAddr(smem), sK = sQ + kTargetRows * K * 2;
  float* sP = reinterpret_cast<float*>(smem + (kTargetRows + 2 * kTargetKeys) * K * 2);
  float* sCol = sP + kTargetRows * kTargetKeys;  // [nt][64] per-column running sums
  float* sInv = sCol + kTargetRows * kTargetKeys;
  const int nTiles = (tEnd + kTargetKeys - 1) / kTargetKeys;
  const int nIt = nTiles * Hkv;  // (tile j, kv head g), g fastest

  // Q rows r = tl * H + h of this CTA (zero rows beyond nt * H or T).
#pragma unroll 4
  for (int i = 0; i < kTargetRows * kChunks / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const int t = t0 + r / H;
    const bool valid = r < nt * H && t < T;
    const fbf16* src = valid ? p.q + (int64_t(b) * T + t) * ldq + (r % H) * K + c * 8 : p.q;
    cpAsync16(sQ + swz<K>(r, c), src, valid);
  }
  const int64_t kBase = int64_t(b) * T * ldkv;
  loadTile<kTargetKeys, K>(sK, p.k + kBase, ldkv, 0, T, tid);
  cpAsyncCommit();
  for (int i = tid; i < nt * kTargetKeys; i += kThreads) sCol[i] = 0.0f;

  // This lane's two rows: token, head, kv head, lse in log2 units (+inf: row absent).
  int rowT[2], rowG[2];
  float rowL[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = warp * 16 + (lane >> 2) + 8 * e;
    const int t = t0 + r / H, h = r % H;
    const bool valid = r < nt * H && t < T;
    rowT[e] = valid ? t : -1;
    rowG[e] = valid ? h / group : -1;
    rowL[e] = valid ? p.lse[(int64_t(b) * H + h) * T + t] * kLog2e : INFINITY;
  }
  const float sl2 = p.scale * kLog2e;
  uint32_t qf[K / 16][4];

  for (int it = 0; it < nIt; ++it) {
    const int st = it & 1, j = it / Hkv, g = it % Hkv;
    cpAsyncWait<0>();
    __syncthreads();  // K tile `it` landed; the previous tile's sP / sCol pass is done
    if (it + 1 < nIt) {
      const int j1 = (it + 1) / Hkv, g1 = (it + 1) % Hkv;
      loadTile<kTargetKeys, K>(sK + (st ^ 1) * kTileN, p.k + kBase + int64_t(g1) * K, ldkv,
                               j1 * kTargetKeys, T, tid);
    }
    cpAsyncCommit();
    if (it == 0) {
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) ldsm4(qf[kk], addrA<K>(sQ, warp * 16, kk * 2, lane));
    }
    const int kv0 = j * kTargetKeys;
    const bool mine0 = rowG[0] == g, mine1 = rowG[1] == g;
    const bool need =
        __any_sync(0xffffffffu, (mine0 && kv0 <= rowT[0]) || (mine1 && kv0 <= rowT[1]));
    float s[kTargetKeys / 8][4];
#pragma unroll
    for (int n8 = 0; n8 < kTargetKeys / 8; ++n8) s[n8][0] = s[n8][1] = s[n8][2] = s[n8][3] = 0.0f;
    if (need) {
      const uint32_t tK = sK + st * kTileN;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < kTargetKeys / 16; ++nn) {
          uint32_t bf[4];
          ldsm4(bf, addrB<K>(tK, nn * 16, kk * 2, lane));
          mma16816(s[2 * nn], qf[kk], bf[0], bf[1]);
          mma16816(s[2 * nn + 1], qf[kk], bf[2], bf[3]);
        }
      }
    }
    // P = exp2(S scale log2e - lse2) where the row reads kv head g and key <= token, else 0;
    // rows of another kv head are left for their own iteration.
    float* p0 = sP + (warp * 16 + (lane >> 2)) * kTargetKeys;
    float* p1 = p0 + 8 * kTargetKeys;
#pragma unroll
    for (int n8 = 0; n8 < kTargetKeys / 8; ++n8) {
      const int c = n8 * 8 + (lane & 3) * 2;
      if (mine0 || (rowG[0] < 0 && g == 0)) {
        const float a = kv0 + c <= rowT[0] ? fastExp2(fmaf(s[n8][0], sl2, -rowL[0])) : 0.0f;
        const float bb = kv0 + c + 1 <= rowT[0] ? fastExp2(fmaf(s[n8][1], sl2, -rowL[0])) : 0.0f;
        *reinterpret_cast<float2*>(p0 + c) = make_float2(a, bb);
      }
      if (mine1 || (rowG[1] < 0 && g == 0)) {
        const float a = kv0 + c <= rowT[1] ? fastExp2(fmaf(s[n8][2], sl2, -rowL[1])) : 0.0f;
        const float bb = kv0 + c + 1 <= rowT[1] ? fastExp2(fmaf(s[n8][3], sl2, -rowL[1])) : 0.0f;
        *reinterpret_cast<float2*>(p1 + c) = make_float2(a, bb);
      }
    }
    if (g != Hkv - 1) continue;
    __syncthreads();  // every row of tile j is in sP
    // Sum over the heads of each token (head order), store unnormalised, keep column sums.
    for (int i = tid; i < nt * kTargetKeys; i += kThreads) {
      const int tl = i / kTargetKeys, c = i % kTargetKeys;
      const int t = t0 + tl, s_ = kv0 + c;
      float sum = 0.0f;
      for (int h = 0; h < H; ++h) sum += sP[(tl * H + h) * kTargetKeys + c];
      if (t < T && s_ < T) {
        p.target[(int64_t(b) * T + t) * T + s_] = sum;
        sCol[i] += sum;
      }
    }
  }
  cpAsyncWait<0>();
  __syncthreads();
  if (tid < nt) {
    float sum = 0.0f;
    for (int c = 0; c < kTargetKeys; ++c) sum += sCol[tid * kTargetKeys + c];
    sInv[tid] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();  // also makes this CTA's target stores visible to all its threads
  const int written = nTiles * kTargetKeys;
  for (int tl = 0; tl < tEnd - t0; ++tl) {
    float* row = p.target + (int64_t(b) * T + t0 + tl) * T;
    const float inv = sInv[tl];
    for (int s_ = tid; s_ < T; s_ += kThreads) row[s_] = s_ < written ? row[s_] * inv : 0.0f;
  }
}

// ---- Host launchers (shared by the engine and the scratch benchmark) --------------------------

// Heads per kv head split so that the dK/dV pass has >= ~4 CTAs per SM of 132 (a divisor of
// the group size).
inline int denseStageSplits(int batch, int seqLen, int heads, int kvHeads) {
  const int group = heads / kvHeads;
  const int64_t blocks = int64_t(batch) * kvHeads * ((seqLen + kBwdN - 1) / kBwdN);
  for (int s = 1; s < group; ++s) {
    if (group % s == 0 && blocks * s >= 4 * 132) return s;
  }
  return group;
}

// Forward: o, lse, sinkProbs from q, k, v, sink. T >= 1, B*H < 2^31.
template <int K>
cudaError_t launchDenseStageForward(const DenseStageParams& p, int batch, cudaStream_t stream) {
  constexpr int smem = fwdSmemBytes<K>();
  cudaError_t err = cudaFuncSetAttribute(dense_stage_fwd_kernel<K>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(batch * p.heads), unsigned((p.seqLen + kFwdM - 1) / kFwdM));
  dense_stage_fwd_kernel<K><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// Target p* [N, T] from q, k and the forward's lse. H <= kTargetRows.
template <int K>
cudaError_t launchDenseStageTarget(const DenseStageParams& p, int batch, cudaStream_t stream) {
  constexpr int smem = denseTargetSmemBytes<K>();
  cudaError_t err = cudaFuncSetAttribute(dense_stage_target_kernel<K>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const int nt = kTargetRows / p.heads;
  const dim3 grid(unsigned((p.seqLen + nt - 1) / nt), unsigned(batch));
  dense_stage_target_kernel<K><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// Backward: delta and sink terms (workspace), dSink (added), dK/dV partials and their sum, dQ.
// Five launches; dq, dk, dv overwritten.
template <int K>
cudaError_t launchDenseStageBackward(const DenseStageParams& p, int batch, cudaStream_t stream) {
  const int64_t threads = p.tokens * p.heads * (K / 8);
  dense_stage_delta_kernel<K><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  dense_stage_sink_kernel<<<unsigned(p.heads), kReduceThreads, 0, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  constexpr int smemKv = denseDkdvSmemBytes<K>();
  err = cudaFuncSetAttribute(dense_stage_dkdv_kernel<K>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smemKv);
  if (err != cudaSuccess) return err;
  const dim3 gridKv(unsigned(batch * p.kvHeads * p.splits),
                    unsigned((p.seqLen + kBwdN - 1) / kBwdN));
  dense_stage_dkdv_kernel<K><<<gridKv, kThreads, smemKv, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t count = p.tokens * p.kvHeads * K;
  dense_stage_dkdv_reduce_kernel<<<unsigned((count + 255) / 256), 256, 0, stream>>>(p, count);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  constexpr int smemQ = denseDqSmemBytes<K>();
  err = cudaFuncSetAttribute(dense_stage_dq_kernel<K>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smemQ);
  if (err != cudaSuccess) return err;
  const dim3 gridQ(unsigned(batch * p.heads), unsigned((p.seqLen + kFwdM - 1) / kFwdM));
  dense_stage_dq_kernel<K><<<gridQ, kThreads, smemQ, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::dense_stage
