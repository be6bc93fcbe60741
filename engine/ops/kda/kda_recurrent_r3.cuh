// The KDA chunk recurrences on tensor cores, round 3 (bench/scratch/kda_chunk_03.md; the engine's
// only recurrences: rounds 1 and 2 are gone, see kda_recurrent_mma.cuh). One CTA per (b * HV + hv,
// value tile of VT) walks the chunks in order with the state slice transposed in shared memory;
// every product runs on mma.sync m16n8k16 with split bf16 hi + lo operands (mma3) and the state
// update is an fp32 FMA per element, so the state never passes through bf16. The chunk's W,
// q ⊙ e^G, k ⊙ e^{G_C - G}, Aqk, e^{G_C} stream into shared memory with cp.async one stage
// ahead. Round 3 gave round 2's bits (same sums in the same order, element by element); its two
// changes against round 2:
//  1. The fp32 state S^T (dS^T) is also kept SPLIT in shared memory: packed bf16 hi / lo pairs
//     along the key dim, written once by the thread that updates the element. The A fragments of
//     the state products are then 8 32-bit shared loads, instead of 4 float2 loads + 4 splits
//     repeated by every warp that reads the same 16 state rows. Likewise Vn^T (forward), dO^T and
//     -dVn^T (state backward) are stored only as split token pairs, written by their producer.
//  2. The warp tile is halved: warp w owns value rows e0 = 16 (w % (VT / 16)) .. +15 and token
//     columns i0 = 8 cg .. +7 (Vn / O / dVn) or key columns d0 = 16 cg .. +15 (state update),
//     cg = w / (VT / 16) in 0..7. A CTA of VT = 32 value columns runs 16 warps (twice round 2's,
//     more latency hiding); VT = 16 runs 8 warps and is chosen when the VT = 32 grid
//     (B * HV * ceil(V / 32) CTAs, one per SM) fills at most half the SMs (B=1 T=32768: 64 ->
//     128 CTAs); recurrentR3ValueTile holds the rule and its measurements.
// Shapes as in round 2: K <= 128 and C <= 64, padded with zeros.
#pragma once

#include "ops/kda/kda_recurrent_mma.cuh"

namespace moewb::engine::cuda::kda_detail {

constexpr int kLdSplit = kRecK / 2 + 4;   // uint32 per row of the split state (68 = 4 mod 32)
constexpr int kLdVSplit = kRecC / 2 + 4;  // uint32 per row of a split [VT, C] buffer (36)

template <int VT>
__host__ __device__ constexpr int r3Threads() {
  return 32 * 8 * (VT / 16);
}

template <int VT>
__host__ __device__ constexpr int r3FwdSharedFloats() {
  return 2 * kRecC * kLdRow + kRecC * kLdCol + kRecC * kLdC + VT * kLdRow + 2 * VT * kLdSplit +
         2 * VT * kLdVSplit + kRecK;
}
template <int VT>
__host__ __device__ constexpr int r3DhSharedFloats() {
  return kRecC * kLdRow + 2 * kRecC * kLdCol + kRecC * kLdCCol + VT * kLdRow +
         2 * VT * kLdSplit + 4 * VT * kLdVSplit + kRecK;
}

// A fragment (16 x 16) at row e0, column k0 (even) of a matrix kept split as packed bf16 hi / lo
// pairs along its columns (ld uint32 per row): 8 shared loads, no conversion.
__device__ __forceinline__ void loadAPairs(const uint32_t* sh, const uint32_t* sl, int ld, int e0,
                                           int k0, int lane, uint32_t (&hi)[4],
                                           uint32_t (&lo)[4]) {
  const int g = lane >> 2, t = lane & 3;
  const int i0 = (e0 + g) * ld + (k0 >> 1) + t, i1 = i0 + 8 * ld;
  hi[0] = sh[i0];
  hi[1] = sh[i1];
  hi[2] = sh[i0 + 4];
  hi[3] = sh[i1 + 4];
  lo[0] = sl[i0];
  lo[1] = sl[i1];
  lo[2] = sl[i0 + 4];
  lo[3] = sl[i1 + 4];
}
__device__ __forceinline__ void loadASplitState(const uint32_t* sh, const uint32_t* sl, int e0,
                                                int k0, int lane, uint32_t (&hi)[4],
                                                uint32_t (&lo)[4]) {
  loadAPairs(sh, sl, kLdSplit, e0, k0, lane, hi, lo);
}

// Writes the split copy of the fp32 state rows [0, VT) (all key pairs); callers barrier after.
template <int VT>
__device__ inline void splitStateAll(const float* st, uint32_t* sh, uint32_t* sl) {
  for (int idx = threadIdx.x; idx < VT * (kRecK / 2); idx += blockDim.x) {
    const int e = idx / (kRecK / 2), p = idx % (kRecK / 2);
    splitBf16(lds2(st + e * kLdRow + 2 * p), sh[e * kLdSplit + p], sl[e * kLdSplit + p]);
  }
}

// st <- eg ⊙ st + sc for this thread's elements of key columns d0 .. d0 + 15 (rows e0 + g,
// e0 + g + 8), and the split copy of the new values.
__device__ __forceinline__ void updateStateTile(float* st, uint32_t* sh, uint32_t* sl,
                                                const float* eg, int e0, int d0, int lane,
                                                const float (&sc)[2][4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int d = d0 + 8 * j + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = e0 + g + 8 * h;
      float* p = st + row * kLdRow + d;
      const float x0 = eg[d] * p[0] + sc[j][2 * h];
      const float x1 = eg[d + 1] * p[1] + sc[j][2 * h + 1];
      p[0] = x0;
      p[1] = x1;
      splitBf16(make_float2(x0, x1), sh[row * kLdSplit + (d >> 1)], sl[row * kLdSplit + (d >> 1)]);
    }
  }
}

// Forward recurrence (contract of launchKdaRecurrentForward, kda_cuda_kernels.h): per chunk,
//   Vn^T = U^T - S^T W^T,   O^T = S^T (q ⊙ e^G)^T + Vn^T Aqk^T (causal),
//   S^T  = e^{G_C} ⊙ S^T + Vn^T (k ⊙ e^{G_C - G});
// writes (each optional) the chunk-entry states, Vn, o and the final state.
template <int VT>
__global__ void __launch_bounds__(r3Threads<VT>(), 1)
    kda_fwd_r3_kernel(CoreArgs a, const float* w, const float* u, const float* qg,
                      const float* kDec, const float* eGC, const float* aqk,
                      const float* initialState, float* statesOut, float* vnOut, bf16* o,
                      float* finalState) {
  extern __shared__ float smem[];
  float* ws = smem;                  // [64, kLdRow] W
  float* qs = ws + kRecC * kLdRow;   // [64, kLdRow] q ⊙ e^G
  float* ks = qs + kRecC * kLdRow;   // [64, kLdCol] k ⊙ e^{G_C - G}
  float* as = ks + kRecC * kLdCol;   // [64, kLdC] Aqk
  float* st = as + kRecC * kLdC;     // [VT, kLdRow] S^T (fp32 state)
  uint32_t* sh = reinterpret_cast<uint32_t*>(st + VT * kLdRow);  // [VT, kLdSplit] bf16 hi pairs
  uint32_t* sl = sh + VT * kLdSplit;                               // [VT, kLdSplit] bf16 lo pairs
  uint32_t* vh = sl + VT * kLdSplit;       // [VT, kLdVSplit] Vn^T, bf16 hi pairs along tokens
  uint32_t* vl = vh + VT * kLdVSplit;      // [VT, kLdVSplit] Vn^T lo pairs
  float* eg = reinterpret_cast<float*>(vl + VT * kLdVSplit);  // [128] e^{G_C}
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int64_t bh = blockIdx.x, nc = a.numChunks, kv = a.keyDim * a.valueDim;
  const int v0 = int(blockIdx.y) * VT, vw = min(VT, vd - v0);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int e0 = 16 * (warp % (VT / 16)), cg = warp / (VT / 16);
  const int i0 = 8 * cg, d0 = 16 * cg;
  const bool wantO = o != nullptr;
  const int64_t oStride = a.valueHeads * a.valueDim;
  for (int idx = threadIdx.x; idx < r3FwdSharedFloats<VT>(); idx += blockDim.x) smem[idx] = 0.f;
  __syncthreads();
  for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
    const int d = idx / vw, e = idx % vw;
    if (initialState != nullptr) st[e * kLdRow + d] = initialState[bh * kv + d * vd + v0 + e];
  }
  __syncthreads();
  splitStateAll<VT>(st, sh, sl);
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
  // U^T elements of this thread's Vn^T fragment: (e0 + g + 8 (r >> 1), i0 + 2t + (r & 1)).
  float ur[4];
  auto loadU = [&](int64_t n) {
    const int64_t base = slotOf(n) * cMax * vd + v0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = e0 + g + 8 * (r >> 1), i = i0 + 2 * t + (r & 1);
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
    // Vn^T = U^T - S^T W^T: rows e0.., token columns i0 .. i0 + 7.
    float acc[4] = {};
#pragma unroll 4
    for (int k0 = 0; k0 < kRecK; k0 += 16) {
      uint32_t ah[4], al[4], bh2[2], bl2[2];
      loadASplitState(sh, sl, e0, k0, lane, ah, al);
      loadBRowsSplit(ws + i0 * kLdRow + k0, kLdRow, lane, bh2, bl2);
      mma3(acc, ah, al, bh2, bl2);
    }
    float value[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = e0 + g + 8 * (r >> 1), i = i0 + 2 * t + (r & 1);
      value[r] = ur[r] - acc[r];
      if (vnOut != nullptr && e < vw && i < c) {
        vnOut[(at.slot * cMax + i) * vd + v0 + e] = value[r];
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // Vn^T split once: token pair (i0 + 2t, +1) of row e
      const int at2 = (e0 + g + 8 * h) * kLdVSplit + (i0 >> 1) + t;
      splitBf16(make_float2(value[2 * h], value[2 * h + 1]), vh[at2], vl[at2]);
    }
    if (n + 1 < nc) loadU(n + 1);
    cpAsyncWait<1>();  // q ⊙ e^G, Aqk (n)
    __syncthreads();
    issueW(n + 1);
    if (wantO) {  // O^T = S^T (q ⊙ e^G)^T + Vn^T Aqk^T
      float oc[4] = {};
#pragma unroll 4
      for (int k0 = 0; k0 < kRecK; k0 += 16) {
        uint32_t ah[4], al[4], bh2[2], bl2[2];
        loadASplitState(sh, sl, e0, k0, lane, ah, al);
        loadBRowsSplit(qs + i0 * kLdRow + k0, kLdRow, lane, bh2, bl2);
        mma3(oc, ah, al, bh2, bl2);
      }
      for (int k0 = 0; k0 <= i0; k0 += 16) {  // Aqk[i, j] = 0 for j > i
        uint32_t ah[4], al[4], bh2[2], bl2[2];
        loadAPairs(vh, vl, kLdVSplit, e0, k0, lane, ah, al);
        loadBRowsSplit(as + i0 * kLdC + k0, kLdC, lane, bh2, bl2);
        mma3(oc, ah, al, bh2, bl2);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int e = e0 + g + 8 * (r >> 1), i = i0 + 2 * t + (r & 1);
        if (e < vw && i < c) {
          o[(at.row0 + i) * oStride + at.vCol + v0 + e] = __float2bfloat16(oc[r]);
        }
      }
    }
    cpAsyncWait<1>();  // k ⊙ e^{G_C - G}, e^{G_C} (n)
    __syncthreads();   // every read of S^T above is done
    issueQA(n + 1);
    {  // S^T = e^{G_C} ⊙ S^T + Vn^T (k ⊙ e^{G_C - G}): key columns d0 .. d0 + 15
      float sc[2][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kRecC; k0 += 16) {
        uint32_t ah[4], al[4];
        loadAPairs(vh, vl, kLdVSplit, e0, k0, lane, ah, al);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBColsSplit(ks + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], ah, al, bh2, bl2);
        }
      }
      updateStateTile(st, sh, sl, eg, e0, d0, lane, sc);
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

// State-gradient recurrence (contract of launchKdaStateBackward, kda_cuda_kernels.h): stores dS
// leaving each chunk, dVn, and dInitialState when not null. Per chunk (last first):
//   dVn^T = dO^T Aqk + dS^T (k ⊙ e^{G_C - G})^T                (token columns i0 .. i0 + 7)
//   dS^T  = e^{G_C} ⊙ dS^T + dO^T (q ⊙ e^G) - dVn^T W         (key columns d0 .. d0 + 15)
template <int VT>
__global__ void __launch_bounds__(r3Threads<VT>(), 1)
    kda_bwd_dh_r3_kernel(CoreArgs a, const bf16* dO, const float* dFinalState, const float* w,
                         const float* qg, const float* kDec, const float* eGC, const float* aqk,
                         float* dStatesOut, float* dvnOut, float* dInitialState) {
  constexpr int kThreadsR3 = r3Threads<VT>();
  constexpr int kPairs = VT * kRecC / 2 / kThreadsR3;  // dO token pairs per thread (2)
  extern __shared__ float smem[];
  float* ks = smem;                   // [64, kLdRow] k ⊙ e^{G_C - G} (rows read along K)
  float* qs = ks + kRecC * kLdRow;    // [64, kLdCol] q ⊙ e^G (read down columns)
  float* ws = qs + kRecC * kLdCol;    // [64, kLdCol] W (read down columns)
  float* as = ws + kRecC * kLdCol;    // [64, kLdCCol] Aqk (read down columns)
  float* st = as + kRecC * kLdCCol;   // [VT, kLdRow] dS^T
  uint32_t* sh = reinterpret_cast<uint32_t*>(st + VT * kLdRow);  // [VT, kLdSplit] hi pairs
  uint32_t* sl = sh + VT * kLdSplit;                               // [VT, kLdSplit] lo pairs
  uint32_t* dh = sl + VT * kLdSplit;       // [VT, kLdVSplit] dO^T, bf16 hi pairs along tokens
  uint32_t* dl = dh + VT * kLdVSplit;      // [VT, kLdVSplit] dO^T lo pairs
  uint32_t* nh = dl + VT * kLdVSplit;      // [VT, kLdVSplit] -dVn^T hi pairs
  uint32_t* nl = nh + VT * kLdVSplit;      // [VT, kLdVSplit] -dVn^T lo pairs
  float* eg = reinterpret_cast<float*>(nl + VT * kLdVSplit);  // [128]
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int64_t bh = blockIdx.x, nc = a.numChunks, kv = a.keyDim * a.valueDim;
  const int v0 = int(blockIdx.y) * VT, vw = min(VT, vd - v0);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int e0 = 16 * (warp % (VT / 16)), cg = warp / (VT / 16);
  const int i0 = 8 * cg, d0 = 16 * cg;
  const int64_t oStride = a.valueHeads * a.valueDim;
  for (int idx = threadIdx.x; idx < r3DhSharedFloats<VT>(); idx += blockDim.x) smem[idx] = 0.f;
  __syncthreads();
  for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
    const int d = idx / vw, e = idx % vw;
    if (dFinalState != nullptr) st[e * kLdRow + d] = dFinalState[bh * kv + d * vd + v0 + e];
  }
  __syncthreads();
  splitStateAll<VT>(st, sh, sl);
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
  // dO of chunk n: pair q of this thread is tokens (2m, 2m + 1) of value e, with
  // idx = threadIdx.x + threads * q, m = idx / VT, e = idx % VT (coalesced along e); zero outside
  // the chunk / the value tile.
  float dor[2 * kPairs];
  auto loadDO = [&](int64_t n) {
    const ChunkAt at = chunkAt(a, bh, n);
#pragma unroll
    for (int r = 0; r < 2 * kPairs; ++r) {
      const int idx = int(threadIdx.x) + kThreadsR3 * (r >> 1), e = idx % VT;
      const int i = 2 * (idx / VT) + (r & 1);
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
    for (int q = 0; q < kPairs; ++q) {  // dO^T split once; free: last read before the barrier
      const int idx = int(threadIdx.x) + kThreadsR3 * q, at2 = (idx % VT) * kLdVSplit + idx / VT;
      splitBf16(make_float2(dor[2 * q], dor[2 * q + 1]), dh[at2], dl[at2]);
    }
    if (n > 0) loadDO(n - 1);
    cpAsyncWait<1>();  // k ⊙ e^{G_C - G}, Aqk (n)
    __syncthreads();
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      dStatesOut[at.slot * kv + d * vd + v0 + e] = st[e * kLdRow + d];
    }
    // dVn^T = dS^T (k ⊙ e^{G_C - G})^T + dO^T Aqk: rows e0.., token columns i0 .. i0 + 7.
    float acc[4] = {};
#pragma unroll 4
    for (int k0 = 0; k0 < kRecK; k0 += 16) {
      uint32_t ah[4], al[4], bh2[2], bl2[2];
      loadASplitState(sh, sl, e0, k0, lane, ah, al);
      loadBRowsSplit(ks + i0 * kLdRow + k0, kLdRow, lane, bh2, bl2);
      mma3(acc, ah, al, bh2, bl2);
    }
    for (int k0 = i0 & ~15; k0 < kRecC; k0 += 16) {  // Aqk[j, i] = 0 for j < i
      uint32_t ah[4], al[4], bh2[2], bl2[2];
      loadAPairs(dh, dl, kLdVSplit, e0, k0, lane, ah, al);
      loadBColsSplit(as + k0 * kLdCCol + i0, kLdCCol, lane, bh2, bl2);
      mma3(acc, ah, al, bh2, bl2);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = e0 + g + 8 * (r >> 1), i = i0 + 2 * t + (r & 1);
      if (e < vw && i < c) dvnOut[(at.slot * cMax + i) * vd + v0 + e] = acc[r];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // -dVn^T split once (the same bits as splitting -x)
      const int at2 = (e0 + g + 8 * h) * kLdVSplit + (i0 >> 1) + t;
      splitBf16(make_float2(-acc[2 * h], -acc[2 * h + 1]), nh[at2], nl[at2]);
    }
    cpAsyncWait<0>();  // q ⊙ e^G, W, e^{G_C} (n)
    __syncthreads();   // dVn^T complete; every read of dS^T, k-rows and Aqk is done
    issueKA(n - 1);
    {  // dS^T = e^{G_C} ⊙ dS^T + dO^T (q ⊙ e^G) - dVn^T W: key columns d0 .. d0 + 15
      float sc[2][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kRecC; k0 += 16) {
        uint32_t ah[4], al[4], mh[4], ml[4];
        loadAPairs(dh, dl, kLdVSplit, e0, k0, lane, ah, al);
        loadAPairs(nh, nl, kLdVSplit, e0, k0, lane, mh, ml);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bh2[2], bl2[2];
          loadBColsSplit(qs + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], ah, al, bh2, bl2);
          loadBColsSplit(ws + k0 * kLdCol + d0 + 8 * j, kLdCol, lane, bh2, bl2);
          mma3(sc[j], mh, ml, bh2, bl2);
        }
      }
      updateStateTile(st, sh, sl, eg, e0, d0, lane, sc);
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

// The value tile of the round-3 recurrences: 16 (8 warps, twice the CTAs) only when the tile-32
// grid of B * HV * ceil(V / 32) CTAs (one per SM) fills at most half the SMs of the current
// device, else 32 (16 warps per CTA). Measured on the H200 (132 SMs, kda_chunk_03.md §6): at 128
// CTAs tile 32 is 1.9x faster over the three recurrences (2.63 vs 4.94 ms); at 64 CTAs tile 16
// is slightly faster (9.76 vs 10.09 ms). Sets *tile and returns the error of the device query.
inline cudaError_t recurrentR3ValueTile(const CoreArgs& args, int* tile) {
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  const int64_t wideCtas = args.batch * args.valueHeads * ((args.valueDim + 31) / 32);
  *tile = 2 * wideCtas <= sms ? 16 : 32;
  return err;
}

template <int VT>
inline cudaError_t launchRecurrentForwardR3Tile(cudaStream_t stream, const CoreArgs& args,
                                                const float* w, const float* u, const float* qg,
                                                const float* kDec, const float* eGC,
                                                const float* aqk, const float* initialState,
                                                float* statesOut, float* vnOut, bf16* o,
                                                float* finalState) {
  const int64_t bytes = r3FwdSharedFloats<VT>() * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_fwd_r3_kernel<VT>, bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(args.batch * args.valueHeads), unsigned((args.valueDim + VT - 1) / VT));
  kda_fwd_r3_kernel<VT><<<grid, r3Threads<VT>(), size_t(bytes), stream>>>(
      args, w, u, qg, kDec, eGC, aqk, initialState, statesOut, vnOut, o, finalState);
  return cudaGetLastError();
}

template <int VT>
inline cudaError_t launchStateBackwardR3Tile(cudaStream_t stream, const CoreArgs& args,
                                             const bf16* dO, const float* dFinalState,
                                             const float* w, const float* qg, const float* kDec,
                                             const float* eGC, const float* aqk,
                                             float* dStatesOut, float* dvnOut,
                                             float* dInitialState) {
  const int64_t bytes = r3DhSharedFloats<VT>() * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_dh_r3_kernel<VT>, bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(args.batch * args.valueHeads), unsigned((args.valueDim + VT - 1) / VT));
  kda_bwd_dh_r3_kernel<VT><<<grid, r3Threads<VT>(), size_t(bytes), stream>>>(
      args, dO, dFinalState, w, qg, kDec, eGC, aqk, dStatesOut, dvnOut, dInitialState);
  return cudaGetLastError();
}

// Launchers with the arguments of launchKdaRecurrentForward / launchKdaStateBackward (raw
// pointers; each queues one kernel on `stream` and returns the attribute or launch error; the
// caller wraps it into Status). valueTile 0 picks by recurrentR3ValueTile; 16 or 32 forces that
// tile (benchmark).
inline cudaError_t launchRecurrentForwardR3(cudaStream_t stream, const CoreArgs& args,
                                            const float* w, const float* u, const float* qg,
                                            const float* kDec, const float* eGC,
                                            const float* aqk, const float* initialState,
                                            float* statesOut, float* vnOut, bf16* o,
                                            float* finalState, int valueTile = 0) {
  int tile = valueTile;
  if (tile == 0) {
    const cudaError_t err = recurrentR3ValueTile(args, &tile);
    if (err != cudaSuccess) return err;
  }
  const auto launch =
      tile == 32 ? launchRecurrentForwardR3Tile<32> : launchRecurrentForwardR3Tile<16>;
  return launch(stream, args, w, u, qg, kDec, eGC, aqk, initialState, statesOut, vnOut, o,
                finalState);
}

inline cudaError_t launchStateBackwardR3(cudaStream_t stream, const CoreArgs& args,
                                         const bf16* dO, const float* dFinalState,
                                         const float* w, const float* qg, const float* kDec,
                                         const float* eGC, const float* aqk, float* dStatesOut,
                                         float* dvnOut, float* dInitialState,
                                         int valueTile = 0) {
  int tile = valueTile;
  if (tile == 0) {
    const cudaError_t err = recurrentR3ValueTile(args, &tile);
    if (err != cudaSuccess) return err;
  }
  const auto launch = tile == 32 ? launchStateBackwardR3Tile<32> : launchStateBackwardR3Tile<16>;
  return launch(stream, args, dO, dFinalState, w, qg, kDec, eGC, aqk, dStatesOut, dvnOut,
                dInitialState);
}

}  // namespace moewb::engine::cuda::kda_detail
