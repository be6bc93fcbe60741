// Dense lightning-indexer scores on tensor cores, round 1's kernel: kept for the record and the
// benchmarks (bench/scratch/sparse_attention_01.cu, _02.cu). The engine runs indexer_mma.cuh,
// which reuses splitBf16 / kIdxTile / kIdxThreads from here and shares one pre-activation
// arithmetic between scores, logits and backward (its epilogue uses explicit roundings, so this
// kernel's scores may differ from it in the last bit).
// I[t, s] = c sum_h w[t, h] ReLU(qI[t, h, :] . kI[s, :]) for s <= t, 0 above the
// diagonal, c = dI^-1/2; scores [N, T] fp32 as indexerScoresCuda.
// Tiling: one CTA of 4 warps per (64 queries, 64 keys) tile of one sequence; keys on M (warp w
// owns 16 keys), the query's HI = 8 heads on N, dI on K. Operands are fp32: each is split into
// bf16 hi + lo and three MMAs accumulate lo*hi + hi*lo + hi*hi in fp32 per k-step (products of
// the 16-bit-mantissa operands; the dropped lo*lo term is ~2^-16 relative), i.e. ~1e-5 relative
// to fp64 against fp32 FMA's ~1e-7.
// Tiles above the diagonal only write zeros. Deterministic (fixed orders, no atomics).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"

namespace moewb::engine::cuda::sparse_detail {

constexpr int kIdxTile = 64;     // queries and keys per CTA tile
constexpr int kIdxThreads = 128;

__device__ __forceinline__ void splitBf16(float x, float y, unsigned& hi, unsigned& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float hx = __low2float(h), hy = __high2float(h);
  hi = *reinterpret_cast<const unsigned*>(&h);
  lo = packBf16(x - hx, y - hy);
}

// Grid (tiles^2, batch) with tiles = ceil(T / 64), kIdxThreads threads. q [N, 8*DI], k [N, DI],
// w [N, 8] fp32.
template <int DI>
__global__ void __launch_bounds__(kIdxThreads)
    indexer_scores_mma_kernel(const float* q, const float* k, const float* w, int seqLen,
                              float c, float* scores) {
  constexpr int kHeads = 8;
  constexpr int kSteps = DI / 16;
  constexpr int kPitch = kIdxTile + 4;
  static_assert(DI % 16 == 0 && DI <= 128, "dI must be a multiple of 16, <= 128");
  __shared__ float sOut[kIdxTile][kPitch];  // [query][key]
  const int tiles = (seqLen + kIdxTile - 1) / kIdxTile;
  const int qt = int(blockIdx.x) / tiles, kt = int(blockIdx.x) % tiles;
  const int64_t base = int64_t(blockIdx.y) * seqLen;
  const int t0 = qt * kIdxTile, s0 = kt * kIdxTile;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q4 = lane % 4;
  if (kt <= qt) {
    unsigned aHi[kSteps][4], aLo[kSteps][4];
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // a0: (g, 2q), a1: (g+8, 2q), a2: (g, 2q+8), a3: (g+8, 2q+8)
        const int key = s0 + warp * 16 + g + (i & 1) * 8;
        const int col = ks * 16 + 2 * q4 + (i >> 1) * 8;
        float2 x = make_float2(0.0f, 0.0f);
        if (key < seqLen) x = *reinterpret_cast<const float2*>(k + (base + key) * DI + col);
        splitBf16(x.x, x.y, aHi[ks][i], aLo[ks][i]);
      }
    }
    for (int qi = 0; qi < kIdxTile; ++qi) {
      const int t = t0 + qi;
      if (t >= seqLen) break;
      const float* qRow = q + (base + t) * (kHeads * DI);
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {  // b0: k 2q..2q+1 of head g; b1: k + 8
        const float2 x0 = __ldg(reinterpret_cast<const float2*>(qRow + g * DI + ks * 16 + 2 * q4));
        const float2 x1 =
            __ldg(reinterpret_cast<const float2*>(qRow + g * DI + ks * 16 + 8 + 2 * q4));
        unsigned bHi0, bLo0, bHi1, bLo1;
        splitBf16(x0.x, x0.y, bHi0, bLo0);
        splitBf16(x1.x, x1.y, bHi1, bLo1);
        mma16816(acc, aLo[ks], bHi0, bHi1);
        mma16816(acc, aHi[ks], bLo0, bLo1);
        mma16816(acc, aHi[ks], bHi0, bHi1);
      }
      const float2 wv = __ldg(reinterpret_cast<const float2*>(w + (base + t) * kHeads + 2 * q4));
      float r0 = wv.x * fmaxf(acc[0], 0.0f) + wv.y * fmaxf(acc[1], 0.0f);  // key row g
      float r1 = wv.x * fmaxf(acc[2], 0.0f) + wv.y * fmaxf(acc[3], 0.0f);  // key row g + 8
      r0 += __shfl_xor_sync(kFullMask, r0, 1);
      r1 += __shfl_xor_sync(kFullMask, r1, 1);
      r0 += __shfl_xor_sync(kFullMask, r0, 2);
      r1 += __shfl_xor_sync(kFullMask, r1, 2);
      if (q4 == 0) {
        const int k0 = warp * 16 + g;
        sOut[qi][k0] = s0 + k0 <= t ? __fadd_rn(__fmul_rn(r0, c), 0.0f) : 0.0f;
        sOut[qi][k0 + 8] = s0 + k0 + 8 <= t ? __fadd_rn(__fmul_rn(r1, c), 0.0f) : 0.0f;
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

// Scores for HI = 8 indexer heads of width dI in {64, 128}; returns the launch error.
inline cudaError_t launchIndexerScoresMma(cudaStream_t stream, const float* q, const float* k,
                                          const float* w, int batch, int seqLen, int di,
                                          float* scores) {
  const int tiles = (seqLen + kIdxTile - 1) / kIdxTile;
  const dim3 grid(unsigned(tiles * tiles), unsigned(batch));
  const float c = float(1.0 / std::sqrt(double(di)));
  if (di == 64) {
    indexer_scores_mma_kernel<64><<<grid, kIdxThreads, 0, stream>>>(q, k, w, seqLen, c, scores);
  } else if (di == 128) {
    indexer_scores_mma_kernel<128><<<grid, kIdxThreads, 0, stream>>>(q, k, w, seqLen, c, scores);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::sparse_detail
