// The KDA chunk recurrences on tensor cores (ENGINE-MATH §2.3 step 5 and the dS recurrence of
// §2.5): drop-in replacements of kda_fwd_kernel / kda_bwd_dh_kernel (kda_chunk_kernels.cuh), with
// the same arguments, outputs and workspace layouts. Shared by the engine (kda_chunk_cuda.cu) and
// bench/scratch/kda_chunk_01.cu, which checks both variants.
//
// One CTA (8 warps) per (b * HV + hv, value tile of 32) walks the chunks in order. The state slice
// is kept TRANSPOSED in fp32 shared memory, S^T [32 values, 128 keys], and every product runs on
// mma.sync m16n8k16 with fp32 operands split into bf16 hi + lo (hi·hi + hi·lo + lo·hi, fp32
// accumulation; ~1e-5 relative, see kda_chunk_kernels.cuh). The state update itself is an fp32
// FMA per element: S^T <- e^{G_C} ⊙ S^T + (MMA result), so the state never passes through bf16.
// Per chunk (forward), with warp w owning value rows 16 (w & 1) .. +15:
//   Vn^T = U^T - S^T W^T           (token columns 16 (w >> 1) .. +15)
//   O^T  = S^T (q ⊙ e^G)^T + Vn^T Aqk^T   (same columns; causal: only key blocks <= the query's)
//   S^T  = e^{G_C} ⊙ S^T + Vn^T (k ⊙ e^{G_C - G})   (key columns 32 (w >> 1) .. +31)
// The chunk's W, q ⊙ e^G, k ⊙ e^{G_C - G}, Aqk, e^{G_C} are streamed into shared memory with
// cp.async one stage ahead (each buffer is refilled for chunk n + 1 as soon as chunk n is done with
// it); U / dO are prefetched into registers. Shapes are padded to K = 128, C = 64 with zeros (the
// padded workspace rows of a partial last chunk are zeros already).
#pragma once

#include "ops/kda/kda_chunk_kernels.cuh"

namespace moewb::engine::cuda::kda_detail {

// When true the engine runs the recurrences below, else the fp32-FMA kernels.
inline constexpr bool kKdaRecurrentOnTensorCores = true;

constexpr int kRecVT = 32;        // value columns per CTA
constexpr int kRecThreads = 256;  // 8 warps
constexpr int kRecK = 128;        // key dim padded
constexpr int kRecC = 64;         // chunk padded
// Row strides (floats): kLdRow for [rows, K] buffers read as B fragments along K (float2 loads,
// conflict-free since 136 = 8 mod 32), kLdCol for [C, K] buffers read down a column (scalar loads,
// 132 = 4 mod 32), kLdC / kLdCCol the same for [C, C] buffers, kLdV for [32, C] value-row buffers.
constexpr int kLdRow = kRecK + 8, kLdCol = kRecK + 4, kLdC = kRecC + 8, kLdCCol = kRecC + 4;
constexpr int kLdV = kRecC + 8;

__device__ __forceinline__ void cpAsync4(float* sdst, const float* gsrc) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(sdst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gsrc));
}
__device__ __forceinline__ void cpAsync16(float* sdst, const float* gsrc) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(sdst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Queues the copy of a row-major global block [rows, cols] (contiguous) into shared rows of
// stride ld (a multiple of 4 floats, 16-byte aligned rows): 16-byte copies when cols % 4 == 0 and
// the source is 16-byte aligned, else 4-byte copies. One warp per row.
__device__ inline void cpAsyncRows(float* dst, int ld, const float* src, int rows, int cols) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  if ((cols & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    for (int r = warp; r < rows; r += warps) {
      for (int c = 4 * lane; c < cols; c += 128) cpAsync16(dst + r * ld + c, src + r * cols + c);
    }
  } else {
    for (int r = warp; r < rows; r += warps) {
      for (int c = lane; c < cols; c += 32) cpAsync4(dst + r * ld + c, src + r * cols + c);
    }
  }
}

__device__ __forceinline__ float2 lds2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}

// A fragment (16 x 16) of a row-major fp32 shared matrix at `base` (its row 0, column k0), split.
__device__ __forceinline__ void loadASplit(const float* base, int ld, int lane, bool negate,
                                           uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  const int g = lane >> 2, t = lane & 3;
  const float* p0 = base + g * ld + 2 * t;
  const float* p1 = p0 + 8 * ld;
  float2 v[4] = {lds2(p0), lds2(p1), lds2(p0 + 8), lds2(p1 + 8)};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (negate) v[r] = make_float2(-v[r].x, -v[r].y);
    splitBf16(v[r], hi[r], lo[r]);
  }
}

// B fragment (k16 x n8) with B[k][n] = M[n][k], M row-major at `base` = &M[n0][k0] (float2 loads).
__device__ __forceinline__ void loadBRowsSplit(const float* base, int ld, int lane,
                                               uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const float* p = base + (lane >> 2) * ld + 2 * (lane & 3);
  splitBf16(lds2(p), hi[0], lo[0]);
  splitBf16(lds2(p + 8), hi[1], lo[1]);
}

// B fragment (k16 x n8) with B[k][n] = M[k][n], M row-major at `base` = &M[k0][n0] (scalar loads).
__device__ __forceinline__ void loadBColsSplit(const float* base, int ld, int lane,
                                               uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const float* p = base + 2 * (lane & 3) * ld + (lane >> 2);
  splitBf16(make_float2(p[0], p[ld]), hi[0], lo[0]);
  splitBf16(make_float2(p[8 * ld], p[9 * ld]), hi[1], lo[1]);
}

// d += a b in split precision (hi·hi + hi·lo + lo·hi; the small terms first).
__device__ __forceinline__ void mma3(float (&d)[4], const uint32_t (&ah)[4],
                                     const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                     const uint32_t (&bl)[2]) {
  mmaBf16(d, al, bh);
  mmaBf16(d, ah, bl);
  mmaBf16(d, ah, bh);
}

// Shared floats of the two tensor-core recurrences (buffers listed in the kernels): 149 KB and
// 156 KB, one CTA per SM.
constexpr int kFwdMmaSharedFloats = 2 * kRecC * kLdRow + kRecC * kLdCol + kRecC * kLdC +
                                    kRecVT * kLdRow + kRecVT * kLdV + kRecK;
constexpr int kDhMmaSharedFloats = kRecC * kLdRow + 2 * kRecC * kLdCol + kRecC * kLdCCol +
                                   kRecVT * kLdRow + 2 * kRecVT * kLdV + kRecK;

// Forward recurrence on tensor cores (contract of kda_fwd_kernel).
__global__ void __launch_bounds__(kRecThreads, 1)
    kda_fwd_mma_kernel(CoreArgs a, const float* w, const float* u, const float* qg,
                       const float* kDec, const float* eGC, const float* aqk,
                       const float* initialState, float* statesOut, float* vnOut, bf16* o,
                       float* finalState) {
  extern __shared__ float smem[];
  float* ws = smem;                  // [64, kLdRow] W
  float* qs = ws + kRecC * kLdRow;   // [64, kLdRow] q ⊙ e^G
  float* ks = qs + kRecC * kLdRow;   // [64, kLdCol] k ⊙ e^{G_C - G}
  float* as = ks + kRecC * kLdCol;   // [64, kLdC] Aqk
  float* st = as + kRecC * kLdC;     // [32, kLdRow] S^T (fp32 state)
  float* vt = st + kRecVT * kLdRow;  // [32, kLdV] Vn^T
  float* eg = vt + kRecVT * kLdV;    // [128] e^{G_C}
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int64_t bh = blockIdx.x, nc = a.numChunks, kv = a.keyDim * a.valueDim;
  const int v0 = int(blockIdx.y) * kRecVT, vw = min(kRecVT, vd - v0);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int e0 = 16 * (warp & 1), i0 = 16 * (warp >> 1), d0 = 32 * (warp >> 1);
  const bool wantO = o != nullptr;
  const int64_t oStride = a.valueHeads * a.valueDim;
  for (int idx = threadIdx.x; idx < kFwdMmaSharedFloats; idx += blockDim.x) smem[idx] = 0.f;
  __syncthreads();
  for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
    const int d = idx / vw, e = idx % vw;
    if (initialState != nullptr) st[e * kLdRow + d] = initialState[bh * kv + d * vd + v0 + e];
  }
  auto slotOf = [&](int64_t n) { return bh * nc + n; };
  auto issueW = [&](int64_t n) {
    if (n < nc) cpAsyncRows(ws, kLdRow, w + slotOf(n) * cMax * kd, cMax, kd);
    cpAsyncCommit();
  };
  auto issueQA = [&](int64_t n) {
    if (wantO && n < nc) {
      cpAsyncRows(qs, kLdRow, qg + slotOf(n) * cMax * kd, cMax, kd);
      cpAsyncRows(as, kLdC, aqk + slotOf(n) * cMax * cMax, cMax, cMax);
    }
    cpAsyncCommit();
  };
  auto issueK = [&](int64_t n) {
    if (n < nc) {
      cpAsyncRows(ks, kLdCol, kDec + slotOf(n) * cMax * kd, cMax, kd);
      cpAsyncRows(eg, kRecK, eGC + slotOf(n) * kd, 1, kd);
    }
    cpAsyncCommit();
  };
  // U^T elements of this thread's Vn^T fragment: (e0 + g + 8 (r >> 1 & 1), i0 + 8 (r >> 2) + 2t
  // + (r & 1)), r < 8; zero outside the valid rows / value columns.
  float ur[8];
  auto loadU = [&](int64_t n) {
    const int64_t base = slotOf(n) * cMax * vd + v0;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int e = e0 + g + 8 * ((r >> 1) & 1), i = i0 + 8 * (r >> 2) + 2 * t + (r & 1);
      ur[r] = (e < vw && i < cMax) ? u[base + int64_t(i) * vd + e] : 0.f;
    }
  };
  loadU(0);
  issueW(0);
  issueQA(0);
  issueK(0);
  for (int64_t n = 0; n < nc; ++n) {
    const ChunkAt at = chunkAt(a, bh, n);
    const int c = at.c;
    cpAsyncWait<2>();  // W(n)
    __syncthreads();
    if (statesOut != nullptr) {
      for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
        const int d = idx / vw, e = idx % vw;
        statesOut[at.slot * kv + d * vd + v0 + e] = st[e * kLdRow + d];
      }
    }
    // Vn^T = U^T - S^T W^T: rows e0.., token columns i0 .. i0 + 15.
    float acc[2][4] = {};
#pragma unroll 2
    for (int k0 = 0; k0 < kRecK; k0 += 16) {
      uint32_t ah[4], al[4];
      loadASplit(st + e0 * kLdRow + k0, kLdRow, lane, false, ah, al);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t bh2[2], bl2[2];
        loadBRowsSplit(ws + (i0 + 8 * j) * kLdRow + k0, kLdRow, lane, bh2, bl2);
        mma3(acc[j], ah, al, bh2, bl2);
      }
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int e = e0 + g + 8 * ((r >> 1) & 1), i = i0 + 8 * (r >> 2) + 2 * t + (r & 1);
      const float value = ur[r] - acc[r >> 2][r & 3];
      vt[e * kLdV + i] = value;
      if (vnOut != nullptr && e < vw && i < c) {
        vnOut[(at.slot * cMax + i) * vd + v0 + e] = value;
      }
    }
    if (n + 1 < nc) loadU(n + 1);
    cpAsyncWait<1>();  // q ⊙ e^G, Aqk (n)
    __syncthreads();
    issueW(n + 1);
    if (wantO) {  // O^T = S^T (q ⊙ e^G)^T + Vn^T Aqk^T
      float oc[2][4] = {};
#pragma unroll 2
      for (int k0 = 0; k0 < kRecK; k0 += 16) {
        uint32_t ah[4], al[4];
        loadASplit(st + e0 * kLdRow + k0, kLdRow, lane, false, ah, al);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBRowsSplit(qs + (i0 + 8 * j) * kLdRow + k0, kLdRow, lane, bh2, bl2);
          mma3(oc[j], ah, al, bh2, bl2);
        }
      }
      for (int k0 = 0; k0 <= i0; k0 += 16) {  // Aqk[i, j] = 0 for j > i
        uint32_t ah[4], al[4];
        loadASplit(vt + e0 * kLdV + k0, kLdV, lane, false, ah, al);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBRowsSplit(as + (i0 + 8 * j) * kLdC + k0, kLdC, lane, bh2, bl2);
          mma3(oc[j], ah, al, bh2, bl2);
        }
      }
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int e = e0 + g + 8 * ((r >> 1) & 1), i = i0 + 8 * (r >> 2) + 2 * t + (r & 1);
        if (e < vw && i < c) {
          o[(at.row0 + i) * oStride + at.vCol + v0 + e] = __float2bfloat16(oc[r >> 2][r & 3]);
        }
      }
    }
    cpAsyncWait<1>();  // k ⊙ e^{G_C - G}, e^{G_C} (n)
    __syncthreads();   // every read of S^T above is done
    issueQA(n + 1);
    {  // S^T = e^{G_C} ⊙ S^T + Vn^T (k ⊙ e^{G_C - G}): key columns d0 .. d0 + 31
      float sc[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kRecC; k0 += 16) {
        uint32_t ah[4], al[4];
        loadASplit(vt + e0 * kLdV + k0, kLdV, lane, false, ah, al);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBColsSplit(ks + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], ah, al, bh2, bl2);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = d0 + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* p = st + (e0 + g + 8 * h) * kLdRow + d;
          p[0] = eg[d] * p[0] + sc[j][2 * h];
          p[1] = eg[d + 1] * p[1] + sc[j][2 * h + 1];
        }
      }
    }
    __syncthreads();
    issueK(n + 1);
  }
  cpAsyncWait<0>();
  __syncthreads();
  if (finalState != nullptr) {
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      finalState[bh * kv + d * vd + v0 + e] = st[e * kLdRow + d];
    }
  }
}

// State-gradient recurrence on tensor cores (contract of kda_bwd_dh_kernel). dS^T [32, 128] in
// fp32 shared memory; per chunk (last first), warp w as in the forward:
//   dVn^T = dO^T Aqk + dS^T (k ⊙ e^{G_C - G})^T                (token columns i0 .. i0 + 15)
//   dS^T  = e^{G_C} ⊙ dS^T + dO^T (q ⊙ e^G) - dVn^T W         (key columns d0 .. d0 + 31)
__global__ void __launch_bounds__(kRecThreads, 1)
    kda_bwd_dh_mma_kernel(CoreArgs a, const bf16* dO, const float* dFinalState, const float* w,
                          const float* qg, const float* kDec, const float* eGC, const float* aqk,
                          float* dStatesOut, float* dvnOut, float* dInitialState) {
  extern __shared__ float smem[];
  float* ks = smem;                   // [64, kLdRow] k ⊙ e^{G_C - G} (rows read along K)
  float* qs = ks + kRecC * kLdRow;    // [64, kLdCol] q ⊙ e^G (read down columns)
  float* ws = qs + kRecC * kLdCol;    // [64, kLdCol] W (read down columns)
  float* as = ws + kRecC * kLdCol;    // [64, kLdCCol] Aqk (read down columns)
  float* st = as + kRecC * kLdCCol;   // [32, kLdRow] dS^T
  float* dt = st + kRecVT * kLdRow;   // [32, kLdV] dO^T
  float* vt = dt + kRecVT * kLdV;     // [32, kLdV] dVn^T
  float* eg = vt + kRecVT * kLdV;     // [128]
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int64_t bh = blockIdx.x, nc = a.numChunks, kv = a.keyDim * a.valueDim;
  const int v0 = int(blockIdx.y) * kRecVT, vw = min(kRecVT, vd - v0);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int e0 = 16 * (warp & 1), i0 = 16 * (warp >> 1), d0 = 32 * (warp >> 1);
  const int64_t oStride = a.valueHeads * a.valueDim;
  for (int idx = threadIdx.x; idx < kDhMmaSharedFloats; idx += blockDim.x) smem[idx] = 0.f;
  __syncthreads();
  for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
    const int d = idx / vw, e = idx % vw;
    if (dFinalState != nullptr) st[e * kLdRow + d] = dFinalState[bh * kv + d * vd + v0 + e];
  }
  auto slotOf = [&](int64_t n) { return bh * nc + n; };
  auto issueKA = [&](int64_t n) {
    if (n >= 0) {
      cpAsyncRows(ks, kLdRow, kDec + slotOf(n) * cMax * kd, cMax, kd);
      cpAsyncRows(as, kLdCCol, aqk + slotOf(n) * cMax * cMax, cMax, cMax);
    }
    cpAsyncCommit();
  };
  auto issueQW = [&](int64_t n) {
    if (n >= 0) {
      cpAsyncRows(qs, kLdCol, qg + slotOf(n) * cMax * kd, cMax, kd);
      cpAsyncRows(ws, kLdCol, w + slotOf(n) * cMax * kd, cMax, kd);
      cpAsyncRows(eg, kRecK, eGC + slotOf(n) * kd, 1, kd);
    }
    cpAsyncCommit();
  };
  // dO of chunk n: element r of this thread is (token i = idx >> 5, value e = idx & 31) with
  // idx = threadIdx.x + 256 r (coalesced); zero outside the chunk / the value tile.
  float dor[8];
  auto loadDO = [&](int64_t n) {
    const ChunkAt at = chunkAt(a, bh, n);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int idx = int(threadIdx.x) + kRecThreads * r, i = idx >> 5, e = idx & 31;
      dor[r] = (i < at.c && e < vw)
                   ? __bfloat162float(dO[(at.row0 + i) * oStride + at.vCol + v0 + e])
                   : 0.f;
    }
  };
  loadDO(nc - 1);
  issueKA(nc - 1);
  issueQW(nc - 1);
  for (int64_t n = nc - 1; n >= 0; --n) {
    const ChunkAt at = chunkAt(a, bh, n);
    const int c = at.c;
#pragma unroll
    for (int r = 0; r < 8; ++r) {  // dt is free: the last reader was before the previous barrier
      const int idx = int(threadIdx.x) + kRecThreads * r;
      dt[(idx & 31) * kLdV + (idx >> 5)] = dor[r];
    }
    if (n > 0) loadDO(n - 1);
    cpAsyncWait<1>();  // k ⊙ e^{G_C - G}, Aqk (n)
    __syncthreads();
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      dStatesOut[at.slot * kv + d * vd + v0 + e] = st[e * kLdRow + d];
    }
    // dVn^T = dO^T Aqk + dS^T (k ⊙ e^{G_C - G})^T: rows e0.., token columns i0 .. i0 + 15.
    float acc[2][4] = {};
#pragma unroll 2
    for (int k0 = 0; k0 < kRecK; k0 += 16) {
      uint32_t ah[4], al[4];
      loadASplit(st + e0 * kLdRow + k0, kLdRow, lane, false, ah, al);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t bh2[2], bl2[2];
        loadBRowsSplit(ks + (i0 + 8 * j) * kLdRow + k0, kLdRow, lane, bh2, bl2);
        mma3(acc[j], ah, al, bh2, bl2);
      }
    }
    for (int k0 = i0; k0 < kRecC; k0 += 16) {  // Aqk[j, i] = 0 for j < i
      uint32_t ah[4], al[4];
      loadASplit(dt + e0 * kLdV + k0, kLdV, lane, false, ah, al);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t bh2[2], bl2[2];
        loadBColsSplit(as + k0 * kLdCCol + i0 + 8 * j, kLdCCol, lane, bh2, bl2);
        mma3(acc[j], ah, al, bh2, bl2);
      }
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int e = e0 + g + 8 * ((r >> 1) & 1), i = i0 + 8 * (r >> 2) + 2 * t + (r & 1);
      const float value = acc[r >> 2][r & 3];
      vt[e * kLdV + i] = value;
      if (e < vw && i < c) dvnOut[(at.slot * cMax + i) * vd + v0 + e] = value;
    }
    cpAsyncWait<0>();  // q ⊙ e^G, W, e^{G_C} (n)
    __syncthreads();   // dVn^T complete; every read of dS^T, k-rows and Aqk is done
    issueKA(n - 1);
    {  // dS^T = e^{G_C} ⊙ dS^T + dO^T (q ⊙ e^G) - dVn^T W: key columns d0 .. d0 + 31
      float sc[4][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kRecC; k0 += 16) {
        uint32_t ah[4], al[4], nh[4], nl[4];
        loadASplit(dt + e0 * kLdV + k0, kLdV, lane, false, ah, al);
        loadASplit(vt + e0 * kLdV + k0, kLdV, lane, true, nh, nl);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBColsSplit(qs + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], ah, al, bh2, bl2);
          loadBColsSplit(ws + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], nh, nl, bh2, bl2);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = d0 + 8 * j + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* p = st + (e0 + g + 8 * h) * kLdRow + d;
          p[0] = eg[d] * p[0] + sc[j][2 * h];
          p[1] = eg[d + 1] * p[1] + sc[j][2 * h + 1];
        }
      }
    }
    __syncthreads();
    issueQW(n - 1);
  }
  cpAsyncWait<0>();
  __syncthreads();
  if (dInitialState != nullptr) {
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      dInitialState[bh * kv + d * vd + v0 + e] = st[e * kLdRow + d];
    }
  }
}

inline dim3 recurrentMmaGrid(const CoreArgs& args) {
  return dim3(unsigned(args.batch * args.valueHeads),
              unsigned((args.valueDim + kRecVT - 1) / kRecVT));
}

// Launchers with the arguments of launchRecurrentForward / launchStateBackward.
inline cudaError_t launchRecurrentForwardMma(cudaStream_t stream, const CoreArgs& args,
                                             const float* w, const float* u, const float* qg,
                                             const float* kDec, const float* eGC,
                                             const float* aqk, const float* initialState,
                                             float* statesOut, float* vnOut, bf16* o,
                                             float* finalState) {
  const int64_t bytes = kFwdMmaSharedFloats * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_fwd_mma_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_fwd_mma_kernel<<<recurrentMmaGrid(args), kRecThreads, size_t(bytes), stream>>>(
      args, w, u, qg, kDec, eGC, aqk, initialState, statesOut, vnOut, o, finalState);
  return cudaGetLastError();
}

inline cudaError_t launchStateBackwardMma(cudaStream_t stream, const CoreArgs& args,
                                          const bf16* dO, const float* dFinalState,
                                          const float* w, const float* qg, const float* kDec,
                                          const float* eGC, const float* aqk, float* dStatesOut,
                                          float* dvnOut, float* dInitialState) {
  const int64_t bytes = kDhMmaSharedFloats * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_dh_mma_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_dh_mma_kernel<<<recurrentMmaGrid(args), kRecThreads, size_t(bytes), stream>>>(
      args, dO, dFinalState, w, qg, kDec, eGC, aqk, dStatesOut, dvnOut, dInitialState);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
