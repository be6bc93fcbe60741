// Lightning indexer on tensor cores (the engine's path for HI = 8 heads of width dI in {64, 128};
// indexer_cuda.cu keeps the scalar kernels for other shapes and as the selectable old path).
// I[t, s] = c sum_j w[t, j] ReLU(a[t, j, s]),  a[t, j, s] = qI[t, j, :] . kI[s, :],  c = dI^-1/2.
//
// One arithmetic for every pre-activation a. The scores (top-k input), the logits of a
// selection and the backward's ReLU test all build a with idxLoadKeys / idxLoadQuery /
// idxPreact on the same operands (fp32 split into bf16 hi + lo; per 16-wide k-step three
// mma.sync m16n8k16 into one fp32 accumulator, lo*hi, hi*lo, hi*hi in that order; keys on M,
// the 8 heads on N) and combine the heads with idxCombine (explicit __fmul_rn / __fmaf_rn /
// __fadd_rn, a fixed quad-shuffle order). An mma's result element depends only on its own row
// of A, column of B and accumulator, not on where in the tile it sits, so a key gathered into
// any row of a warp tile gets bitwise the pre-activation and score of the dense tile: logits ==
// scores and the backward's ReLU pattern == the forward's, bitwise.
// Precision: operands carried to 16 mantissa bits (lo*lo dropped, ~2^-16 relative): ~4e-6
// relative to fp64 measured (round 1), against ~1e-7 for the scalar fp32 kernel.
//
// Kernels (all deterministic: fixed orders, no atomics):
//   indexer_scores_tc_kernel   dense causal scores [N, T], one CTA per (64 queries, 64 keys) tile.
//   indexer_logits_tc_kernel   logits [N, W] of a selection, one CTA (4 warps) per query token,
//                              warp w takes slot groups w, w + 4, ... of 16 gathered keys.
//   indexer_query_bwd_tc_kernel  per query token (one CTA): recomputes a for its selection
//                              (same arithmetic), coef[n, j, slot] = dI w c where a > 0 (for the
//                              scalar key-side kernel), dwPre[n, j] = c HI^-1/2 sum_slot dI ReLU(a)
//                              (fp32, fixed order), and dq[n, j, :] = sum_slot coef kI[key] as
//                              dq^T [dI x 8] = kI^T [dI x 16 slots] coef^T [16 slots x 8] per
//                              group on tensor cores, also 3xbf16: dq leaves as bf16, but the
//                              split keeps the sum at ~1e-5 so the only visible rounding is the
//                              output's (plain bf16 operands would add ~3e-3 on top, a third of
//                              the tests' 1e-2 budget for the weight gradients). Its cost is
//                              small either way (3 x 2 W dI 8 flop per token).
// The key side (dkI = sum over the queries that chose a key of coef qI) stays the scalar
// indexer_key_bwd_kernel over the transposed selection (indexer_cuda.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/sparse_attention/indexer_scores_mma.cuh"
#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"

namespace moewb::engine::cuda::sparse_detail {

using bf16 = __nv_bfloat16;
constexpr int kIdxTcHeads = 8;  // HI of the tensor-core path (the heads are the mma's N = 8)

inline bool indexerTcSupported(int64_t heads, int64_t di) {
  return heads == kIdxTcHeads && (di == 64 || di == 128);
}

// A fragments of a warp's 16 keys (row g from rowG, row g + 8 from rowG8; nullptr -> zeros),
// dI on K, split into bf16 hi / lo. a0: (g, 2q), a1: (g+8, 2q), a2: (g, 2q+8), a3: (g+8, 2q+8).
template <int DI>
__device__ __forceinline__ void idxLoadKeys(const float* rowG, const float* rowG8, int q4,
                                            unsigned (&aHi)[DI / 16][4],
                                            unsigned (&aLo)[DI / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < DI / 16; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float* row = (i & 1) ? rowG8 : rowG;
      const int col = ks * 16 + 2 * q4 + (i >> 1) * 8;
      float2 x = make_float2(0.0f, 0.0f);
      if (row != nullptr) x = __ldg(reinterpret_cast<const float2*>(row + col));
      splitBf16(x.x, x.y, aHi[ks][i], aLo[ks][i]);
    }
  }
}

// B fragments of one query's 8 heads (qRow [8 * DI]): b0 = k 2q..2q+1 of head g, b1 = k + 8.
template <int DI>
__device__ __forceinline__ void idxLoadQuery(const float* qRow, int g, int q4,
                                             unsigned (&bHi)[DI / 16][2],
                                             unsigned (&bLo)[DI / 16][2]) {
#pragma unroll
  for (int ks = 0; ks < DI / 16; ++ks) {
    const float* p = qRow + g * DI + ks * 16 + 2 * q4;
    const float2 x0 = __ldg(reinterpret_cast<const float2*>(p));
    const float2 x1 = __ldg(reinterpret_cast<const float2*>(p + 8));
    splitBf16(x0.x, x0.y, bHi[ks][0], bLo[ks][0]);
    splitBf16(x1.x, x1.y, bHi[ks][1], bLo[ks][1]);
  }
}

// acc = pre-activations [16 keys x 8 heads]: acc[0] (key g, head 2q), acc[1] (g, 2q+1),
// acc[2] (g+8, 2q), acc[3] (g+8, 2q+1).
template <int DI>
__device__ __forceinline__ void idxPreact(const unsigned (&aHi)[DI / 16][4],
                                          const unsigned (&aLo)[DI / 16][4],
                                          const unsigned (&bHi)[DI / 16][2],
                                          const unsigned (&bLo)[DI / 16][2], float (&acc)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < DI / 16; ++ks) {
    mma16816(acc, aLo[ks], bHi[ks][0], bHi[ks][1]);
    mma16816(acc, aHi[ks], bLo[ks][0], bLo[ks][1]);
    mma16816(acc, aHi[ks], bHi[ks][0], bHi[ks][1]);
  }
}

__device__ __forceinline__ float idxRelu(float a) { return a > 0.0f ? a : 0.0f; }

// Scores of key rows g (s0) and g + 8 (s1): c sum_j w_j ReLU(a_j) with w0, w1 the weights of
// heads 2q, 2q+1; the quad's four partials are added ((q0 + q1) + (q2 + q3)). Warp-collective.
__device__ __forceinline__ void idxCombine(const float (&acc)[4], float w0, float w1, float c,
                                           float& s0, float& s1) {
  float r0 = __fmaf_rn(w1, idxRelu(acc[1]), __fmul_rn(w0, idxRelu(acc[0])));
  float r1 = __fmaf_rn(w1, idxRelu(acc[3]), __fmul_rn(w0, idxRelu(acc[2])));
  r0 = __fadd_rn(r0, __shfl_xor_sync(kFullMask, r0, 1));
  r1 = __fadd_rn(r1, __shfl_xor_sync(kFullMask, r1, 1));
  r0 = __fadd_rn(r0, __shfl_xor_sync(kFullMask, r0, 2));
  r1 = __fadd_rn(r1, __shfl_xor_sync(kFullMask, r1, 2));
  s0 = __fadd_rn(__fmul_rn(r0, c), 0.0f);  // +0 for an exact zero, as the scalar kernel
  s1 = __fadd_rn(__fmul_rn(r1, c), 0.0f);
}

// Dense causal scores. Grid (tiles^2, batch), tiles = ceil(T / 64), kIdxThreads threads.
// q [N, 8 DI], k [N, DI], w [N, 8] fp32; scores [N, T] (0 above the diagonal).
template <int DI>
__global__ void __launch_bounds__(kIdxThreads)
    indexer_scores_tc_kernel(const float* q, const float* k, const float* w, int seqLen, float c,
                             float* scores) {
  static_assert(DI % 16 == 0 && DI <= 128, "dI must be a multiple of 16, <= 128");
  constexpr int kPitch = kIdxTile + 4;
  __shared__ float sOut[kIdxTile][kPitch];  // [query][key]
  const int tiles = (seqLen + kIdxTile - 1) / kIdxTile;
  const int qt = int(blockIdx.x) / tiles, kt = int(blockIdx.x) % tiles;
  const int64_t base = int64_t(blockIdx.y) * seqLen;
  const int t0 = qt * kIdxTile, s0 = kt * kIdxTile;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q4 = lane % 4;
  if (kt <= qt) {
    const int keyG = s0 + warp * 16 + g, keyG8 = keyG + 8;
    unsigned aHi[DI / 16][4], aLo[DI / 16][4];
    idxLoadKeys<DI>(keyG < seqLen ? k + (base + keyG) * DI : nullptr,
                    keyG8 < seqLen ? k + (base + keyG8) * DI : nullptr, q4, aHi, aLo);
    for (int qi = 0; qi < kIdxTile; ++qi) {
      const int t = t0 + qi;
      if (t >= seqLen) break;
      unsigned bHi[DI / 16][2], bLo[DI / 16][2];
      idxLoadQuery<DI>(q + (base + t) * (kIdxTcHeads * DI), g, q4, bHi, bLo);
      float acc[4];
      idxPreact<DI>(aHi, aLo, bHi, bLo, acc);
      const float2 wv =
          __ldg(reinterpret_cast<const float2*>(w + (base + t) * kIdxTcHeads + 2 * q4));
      float v0, v1;
      idxCombine(acc, wv.x, wv.y, c, v0, v1);
      if (q4 == 0) {
        const int k0 = warp * 16 + g;
        sOut[qi][k0] = s0 + k0 <= t ? v0 : 0.0f;
        sOut[qi][k0 + 8] = s0 + k0 + 8 <= t ? v1 : 0.0f;
      }
    }
  } else {
    for (int i = tid; i < kIdxTile * kIdxTile; i += kIdxThreads) {
      sOut[i / kIdxTile][i % kIdxTile] = 0.0f;
    }
  }
  __syncthreads();
  for (int i = tid; i < kIdxTile * kIdxTile; i += kIdxThreads) {
    const int qi = i / kIdxTile, kj = i % kIdxTile;
    if (t0 + qi < seqLen && s0 + kj < seqLen) {
      scores[(base + t0 + qi) * seqLen + s0 + kj] = sOut[qi][kj];
    }
  }
}

// logits[n, slot] = I[t, selected[n, slot]] (0 on padding). Grid (N), kIdxThreads threads.
// selected [N, W]: ascending keys then -1 padding (selection.h).
template <int DI>
__global__ void __launch_bounds__(kIdxThreads)
    indexer_logits_tc_kernel(const float* q, const float* k, const float* w,
                             const int32_t* selected, int seqLen, int width, float c,
                             float* logits) {
  const int64_t r = blockIdx.x, base = r - r % seqLen;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q4 = lane % 4;
  const int32_t* sel = selected + r * width;
  unsigned bHi[DI / 16][2], bLo[DI / 16][2];
  idxLoadQuery<DI>(q + r * (kIdxTcHeads * DI), g, q4, bHi, bLo);
  const float2 wv = __ldg(reinterpret_cast<const float2*>(w + r * kIdxTcHeads + 2 * q4));
  for (int s0 = warp * 16; s0 < width; s0 += 4 * 16) {
    const int slotG = s0 + g, slotG8 = slotG + 8;
    const int32_t keyG = slotG < width ? sel[slotG] : -1;
    const int32_t keyG8 = slotG8 < width ? sel[slotG8] : -1;
    float v0 = 0.0f, v1 = 0.0f;
    if (__any_sync(kFullMask, keyG >= 0 || keyG8 >= 0)) {  // warp-uniform
      unsigned aHi[DI / 16][4], aLo[DI / 16][4];
      idxLoadKeys<DI>(keyG >= 0 ? k + (base + keyG) * DI : nullptr,
                      keyG8 >= 0 ? k + (base + keyG8) * DI : nullptr, q4, aHi, aLo);
      float acc[4];
      idxPreact<DI>(aHi, aLo, bHi, bLo, acc);
      idxCombine(acc, wv.x, wv.y, c, v0, v1);
    }
    if (q4 == 0) {
      if (slotG < width) logits[r * width + slotG] = keyG >= 0 ? v0 : 0.0f;
      if (slotG8 < width) logits[r * width + slotG8] = keyG8 >= 0 ? v1 : 0.0f;
    }
  }
}

// Per query token r (one CTA of kIdxThreads): for its valid slots, coef[r, j, slot] = dL w_j c
// where a > 0 else 0 (padding slots untouched), dwPre[r, j] = bf16(c headScale sum_slot dL
// ReLU(a)), dq[r, j, :] = bf16(sum_slot coef[r, j, slot] kI[key]). dLogits [N, W] fp32.
template <int DI>
__global__ void __launch_bounds__(kIdxThreads)
    indexer_query_bwd_tc_kernel(const float* q, const float* k, const float* w,
                                const int32_t* selected, const float* dLogits, int seqLen,
                                int width, float c, float headScale, float* coef, bf16* dwPre,
                                bf16* dq) {
  constexpr int kH = kIdxTcHeads;
  constexpr int kMt = DI / 16;     // m16 tiles of dq^T
  constexpr int kKp = DI + 4;      // sK pitch (floats): conflict-free column reads
  constexpr int kCp = 16 + 8;      // sC pitch (floats): conflict-free float2 row reads
  __shared__ __align__(16) float sK[kIdxThreads / 32][16][kKp];  // gathered keys; later sRed
  __shared__ __align__(16) float sC[kIdxThreads / 32][kH][kCp];  // coef^T [head][slot]
  __shared__ float sDw[kIdxThreads / 32][kH];
  static_assert(kIdxThreads / 32 * kH * DI <= kIdxThreads / 32 * 16 * kKp, "sRed fits in sK");

  const int64_t r = blockIdx.x, base = r - r % seqLen;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q4 = lane % 4;
  const int32_t* sel = selected + r * width;
  unsigned bHi[DI / 16][2], bLo[DI / 16][2];
  idxLoadQuery<DI>(q + r * (kH * DI), g, q4, bHi, bLo);
  const float2 wv = __ldg(reinterpret_cast<const float2*>(w + r * kH + 2 * q4));
  float dqAcc[kMt][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dqAcc[mt][i] = 0.0f;
  }
  float dw0 = 0.0f, dw1 = 0.0f;  // heads 2q, 2q+1 over this lane's rows

  for (int s0 = warp * 16; s0 < width; s0 += 4 * 16) {
    const int32_t keyG = s0 + g < width ? sel[s0 + g] : -1;
    const int32_t keyG8 = s0 + g + 8 < width ? sel[s0 + g + 8] : -1;
    // Rows are a valid prefix: once a group is all padding, so are this warp's later groups.
    if (!__any_sync(kFullMask, keyG >= 0 || keyG8 >= 0)) break;
    // Gathered key rows into sK (fp32, zero rows for padding) for the dq product.
    for (int i = lane; i < 16 * (DI / 4); i += 32) {
      const int row = i / (DI / 4), c4 = i % (DI / 4);
      const int32_t key = s0 + row < width ? sel[s0 + row] : -1;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (key >= 0) v = __ldg(reinterpret_cast<const float4*>(k + (base + key) * DI) + c4);
      *reinterpret_cast<float4*>(&sK[warp][row][4 * c4]) = v;
    }
    unsigned aHi[DI / 16][4], aLo[DI / 16][4];
    idxLoadKeys<DI>(keyG >= 0 ? k + (base + keyG) * DI : nullptr,
                    keyG8 >= 0 ? k + (base + keyG8) * DI : nullptr, q4, aHi, aLo);
    float acc[4];
    idxPreact<DI>(aHi, aLo, bHi, bLo, acc);
    const float gG = keyG >= 0 ? dLogits[r * width + s0 + g] : 0.0f;
    const float gG8 = keyG8 >= 0 ? dLogits[r * width + s0 + g + 8] : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool valid = (i < 2 ? keyG : keyG8) >= 0;
      const float gl = i < 2 ? gG : gG8, wj = (i & 1) ? wv.y : wv.x;
      const int j = 2 * q4 + (i & 1), slotLocal = g + (i >> 1) * 8;
      float cf = 0.0f;
      if (valid && acc[i] > 0.0f) {
        if (i & 1) {
          dw1 = __fmaf_rn(gl, acc[i], dw1);
        } else {
          dw0 = __fmaf_rn(gl, acc[i], dw0);
        }
        cf = __fmul_rn(__fmul_rn(gl, wj), c);
      }
      if (valid) coef[(r * kH + j) * width + s0 + slotLocal] = cf;
      sC[warp][j][slotLocal] = cf;
    }
    __syncwarp();
    // dq^T [DI x 8] += kI^T [DI x 16 slots] coef^T [16 slots x 8 heads], 3xbf16.
    unsigned cHi[2], cLo[2];
    {
      const float2 c0 = *reinterpret_cast<const float2*>(&sC[warp][g][2 * q4]);
      const float2 c1 = *reinterpret_cast<const float2*>(&sC[warp][g][2 * q4 + 8]);
      splitBf16(c0.x, c0.y, cHi[0], cLo[0]);
      splitBf16(c1.x, c1.y, cHi[1], cLo[1]);
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      unsigned kHi[4], kLo[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // a_i: d = mt 16 + g (+8 for i odd), slots 2q (+8 for i>=2)
        const int d = mt * 16 + g + (i & 1) * 8, sl = 2 * q4 + (i >> 1) * 8;
        splitBf16(sK[warp][sl][d], sK[warp][sl + 1][d], kHi[i], kLo[i]);
      }
      mma16816(dqAcc[mt], kLo, cHi[0], cHi[1]);
      mma16816(dqAcc[mt], kHi, cLo[0], cLo[1]);
      mma16816(dqAcc[mt], kHi, cHi[0], cHi[1]);
    }
    __syncwarp();  // sK, sC are refilled by the next group
  }
  // dw: sum over the 8 row groups of the quad column (butterfly: every lane gets the same bits).
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    dw0 = __fadd_rn(dw0, __shfl_xor_sync(kFullMask, dw0, off));
    dw1 = __fadd_rn(dw1, __shfl_xor_sync(kFullMask, dw1, off));
  }
  if (g == 0) {
    sDw[warp][2 * q4] = dw0;
    sDw[warp][2 * q4 + 1] = dw1;
  }
  __syncthreads();  // every warp is done with sK: reuse it for the dq partials
  float* sRed = &sK[0][0][0];  // [4 warps][8 heads][DI]
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // c_i: d = mt 16 + g (+8 for i >= 2), head 2q (+1 for i odd)
      const int d = mt * 16 + g + (i >> 1) * 8, j = 2 * q4 + (i & 1);
      sRed[(warp * kH + j) * DI + d] = dqAcc[mt][i];
    }
  }
  __syncthreads();
  for (int i = tid; i < kH * DI; i += kIdxThreads) {
    const float sum = __fadd_rn(
        __fadd_rn(__fadd_rn(sRed[i], sRed[kH * DI + i]), sRed[2 * kH * DI + i]),
        sRed[3 * kH * DI + i]);
    dq[r * (kH * DI) + i] = __float2bfloat16(sum);
  }
  if (tid < kH) {
    const float sum =
        __fadd_rn(__fadd_rn(__fadd_rn(sDw[0][tid], sDw[1][tid]), sDw[2][tid]), sDw[3][tid]);
    dwPre[r * kH + tid] = __float2bfloat16(sum * c * headScale);
  }
}

// Launchers (HI = 8, dI in {64, 128}: indexerTcSupported). They return the launch error.
inline cudaError_t launchIndexerScoresTc(cudaStream_t stream, const float* q, const float* k,
                                         const float* w, int batch, int seqLen, int di,
                                         float* scores) {
  const int tiles = (seqLen + kIdxTile - 1) / kIdxTile;
  const dim3 grid(unsigned(tiles * tiles), unsigned(batch));
  const float c = float(1.0 / std::sqrt(double(di)));
  if (di == 64) {
    indexer_scores_tc_kernel<64><<<grid, kIdxThreads, 0, stream>>>(q, k, w, seqLen, c, scores);
  } else if (di == 128) {
    indexer_scores_tc_kernel<128><<<grid, kIdxThreads, 0, stream>>>(q, k, w, seqLen, c, scores);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

inline cudaError_t launchIndexerLogitsTc(cudaStream_t stream, const float* q, const float* k,
                                         const float* w, const int32_t* selected, int64_t n,
                                         int seqLen, int width, int di, float* logits) {
  const float c = float(1.0 / std::sqrt(double(di)));
  if (di == 64) {
    indexer_logits_tc_kernel<64><<<unsigned(n), kIdxThreads, 0, stream>>>(
        q, k, w, selected, seqLen, width, c, logits);
  } else if (di == 128) {
    indexer_logits_tc_kernel<128><<<unsigned(n), kIdxThreads, 0, stream>>>(
        q, k, w, selected, seqLen, width, c, logits);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

inline cudaError_t launchIndexerQueryBwdTc(cudaStream_t stream, const float* q, const float* k,
                                           const float* w, const int32_t* selected,
                                           const float* dLogits, int64_t n, int seqLen,
                                           int width, int di, float* coef, bf16* dwPre,
                                           bf16* dq) {
  const float c = float(1.0 / std::sqrt(double(di)));
  const float headScale = float(1.0 / std::sqrt(double(kIdxTcHeads)));
  if (di == 64) {
    indexer_query_bwd_tc_kernel<64><<<unsigned(n), kIdxThreads, 0, stream>>>(
        q, k, w, selected, dLogits, seqLen, width, c, headScale, coef, dwPre, dq);
  } else if (di == 128) {
    indexer_query_bwd_tc_kernel<128><<<unsigned(n), kIdxThreads, 0, stream>>>(
        q, k, w, selected, dLogits, seqLen, width, c, headScale, coef, dwPre, dq);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::sparse_detail
