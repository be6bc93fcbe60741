// Grouped expert GEMM mainloop and stage kernels on the bf16 tensor cores (mma.sync m16n8k16,
// fp32 accumulators), device code only: included by experts_mma_cuda.cu (the engine's launchers)
// and by bench/scratch/grouped_gemm_01.cu / _02.cu, so the benchmarks time the engine's kernels.
// Mainloop v1 (round 1); grouped_gemm_v2_cuda.cuh (round 2, the engine's default) reuses this
// file's PTX wrappers, row-tile schedule and the small kernels (schedule, expert order, weighted
// dY rows, dRowWeight sum).
//
// One mainloop (groupedMainloop) for every stage: one 128-row A tile against kNB B tiles of 128
// columns (kNB = 2: gate and up for the forward gate+up; two column halves, i.e. 128 x 256 CTA
// tiles, for the other stages in the engine), BK = 32, 8 warps of 64 x (kNB x 32), a 4-stage
// cp.async (16-byte, zero-filled outside the matrix) pipeline into padded shared memory (row stride
// + 16 bytes, so the 8 row addresses of an ldmatrix phase hit 8 distinct 16-byte bank groups),
// ldmatrix (.trans for operands stored MN-major) into registers. Operand loaders are the variants:
//  - LoadKCols<kRows>: tile [kRows][BK], K along the columns, rows fixed per CTA (row-tile A
//    operands through an optional gather index, weights stored [N, K]);
//  - LoadKRows<kCols>: tile [BK][kCols], K along the rows (weights stored [K, N]; the weight
//    gradients' operands, whose K is the expert's rows, through an optional gather index).
// Both can switch to a second source after kTiles1 K tiles (dx = dg Wg + du Wu in one
// accumulator). Epilogues (the stage kernels below) write bf16x2 / float2 straight from the
// accumulator fragments.
//
// Defines __global__ functions: include from ONE translation unit of a program (the engine's is
// experts_mma_cuda.cu). A translation unit that needs only the device helpers (loaders, tile
// schedule lookup; the sm_90a experts_wgmma_cuda.cu) defines MOEWB_GROUPED_DEVICE_PARTS_ONLY
// before the include and gets no kernel definitions.
//
// Shape rules (checked by the launchers): every contiguous extent (D, F) a multiple of 8 and every
// base pointer 16-byte aligned (a 16-byte chunk is then wholly inside or outside the matrix).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/glu_activation_cuda.cuh"
#include "runtime/cuda/warp_mma.cuh"

namespace moewb::engine::cuda::grouped {

using bf16_t = __nv_bfloat16;

constexpr int kBM = 128;  // output rows per CTA
constexpr int kBN = 128;  // output columns per CTA and B operand
// K step and pipeline depth; overridable at compile time for benchmarking only (the engine builds
// the defaults; bench/scratch/grouped_gemm_01.md lists the variants).
#ifndef MOEWB_GROUPED_BK
#define MOEWB_GROUPED_BK 32
#endif
#ifndef MOEWB_GROUPED_STAGES
#define MOEWB_GROUPED_STAGES 4
#endif
constexpr int kBK = MOEWB_GROUPED_BK;          // reduction step (16 x n)
constexpr int kStages = MOEWB_GROUPED_STAGES;  // cp.async pipeline depth (>= 2)
static_assert(kBK % 16 == 0 && kStages >= 2, "K step and pipeline depth");
constexpr int kThreads = 256;  // 8 warps: 2 (M) x 4 (N) warp tiles of 64 x 32
constexpr int kWarpM = 64, kWarpN = 32;
constexpr int kMi = kWarpM / 16;  // m16 fragments per warp
constexpr int kNi = kWarpN / 8;   // n8 fragments per warp

// ---------------------------------------------------------------------------------------------
// PTX wrappers (cp.async, ldmatrix, mma.sync): runtime/cuda/warp_mma.cuh.

// ---------------------------------------------------------------------------------------------
// Operand loaders.

// Tile [kRows][kBK] (row stride kLd), element (i, c) = src_row(i)[k0 + c], K along the columns.
// Rows are fixed for the CTA: row i is logical row row0 + i (< rowEnd), read at data row
// index[row] (or row), so each thread keeps the pointers of its chunks' rows.
template <int kRows>
struct LoadKCols {
  static constexpr bool kKMajor = false;
  static constexpr int kLd = kBK + 8;
  static constexpr int kTileBytes = kRows * kLd * 2;
  static constexpr int kChunksPerRow = kBK / 8;
  static constexpr int kPer = kRows * kChunksPerRow / kThreads;
  static_assert(kRows * kChunksPerRow % kThreads == 0, "whole chunks per thread");

  const bf16_t* row1[kPer];  // row pointers of the first source (null: row outside)
  const bf16_t* row2[kPer];  // of the second source (after kTiles1 K tiles)
  const bf16_t* anyValid;    // a valid address for the zero-filled copies
  int64_t kEnd;              // K extent of each source
  int kTiles1;               // K tiles of the first source

  // base2 may be null (one source). ld: row stride of both sources.
  __device__ __forceinline__ void init(const bf16_t* base1, const bf16_t* base2, int64_t ld,
                                       const int32_t* index, int64_t row0, int64_t rowEnd,
                                       int64_t kExtent, int kTilesFirst) {
    kEnd = kExtent;
    kTiles1 = kTilesFirst;
    anyValid = base1;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int id = int(threadIdx.x) + p * kThreads;
      const int64_t row = row0 + id / kChunksPerRow;
      const bool ok = row < rowEnd;
      const int64_t src = !ok ? 0 : (index != nullptr ? int64_t(index[row]) : row);
      row1[p] = ok ? base1 + src * ld : nullptr;
      row2[p] = ok && base2 != nullptr ? base2 + src * ld : nullptr;
    }
  }

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    const bool first = kt < kTiles1;
    const int64_t kBase = int64_t(first ? kt : kt - kTiles1) * kBK;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int id = int(threadIdx.x) + p * kThreads;
      const int i = id / kChunksPerRow, c = (id % kChunksPerRow) * 8;
      const bf16_t* base = first ? row1[p] : row2[p];
      const bool ok = base != nullptr && kBase + c < kEnd;
      cpAsync16(tile + i * kLd + c, ok ? base + kBase + c : anyValid, ok);
    }
  }
};

// Tile [kBK][kCols] (row stride kLd), element (r, j) = data row of K index k0 + r, column col0 + j:
// K along the rows. K index k is logical row rowBegin + k (< rowEnd), read at data row index[row]
// (or row). Columns >= colEnd are zero.
template <int kCols>
struct LoadKRows {
  static constexpr bool kKMajor = true;
  static constexpr int kLd = kCols + 8;
  static constexpr int kTileBytes = kBK * kLd * 2;
  static constexpr int kChunksPerRow = kCols / 8;
  static constexpr int kPer = kBK * kChunksPerRow / kThreads;
  static_assert(kBK * kChunksPerRow % kThreads == 0, "whole chunks per thread");

  const bf16_t* base1;
  const bf16_t* base2;
  const int32_t* index;
  int64_t ld;
  int64_t rowBegin, rowEnd;  // K rows of each source: rowBegin .. rowEnd - 1
  int64_t col0, colEnd;
  int kTiles1;

  __device__ __forceinline__ void init(const bf16_t* b1, const bf16_t* b2, int64_t stride,
                                       const int32_t* rowIndex, int64_t begin, int64_t end,
                                       int64_t firstCol, int64_t colExtent, int kTilesFirst) {
    base1 = b1;
    base2 = b2;
    index = rowIndex;
    ld = stride;
    rowBegin = begin;
    rowEnd = end;
    col0 = firstCol;
    colEnd = colExtent;
    kTiles1 = kTilesFirst;
  }

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    const bool first = kt < kTiles1;
    const bf16_t* base = first ? base1 : base2;
    const int64_t kBase = rowBegin + int64_t(first ? kt : kt - kTiles1) * kBK;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int id = int(threadIdx.x) + p * kThreads;
      const int r = id / kChunksPerRow, j = (id % kChunksPerRow) * 8;
      const int64_t row = kBase + r, col = col0 + j;
      const bool ok = row < rowEnd && col < colEnd;
      const int64_t src = !ok ? 0 : (index != nullptr ? int64_t(index[row]) : row);
      cpAsync16(tile + r * kLd + j, ok ? base + src * ld + col : base, ok);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Fragments.

// A fragment (m16 x k16) at tile rows m0.., K offset kk.
template <class LoadA>
__device__ __forceinline__ void loadFragA(uint32_t (&r)[4], const bf16_t* tile, int m0, int kk) {
  const int lane = int(threadIdx.x) % 32;
  if constexpr (!LoadA::kKMajor) {  // tile [M][K]
    const int row = m0 + lane % 16, col = kk + (lane / 16) * 8;
    ldsm4(r, smemAddr(tile + row * LoadA::kLd + col));
  } else {  // tile [K][M]: matrices (m0, k), (m0 + 8, k), (m0, k + 8), (m0 + 8, k + 8)
    const int j = lane / 8, i = lane % 8;
    const int k = kk + i + (j / 2) * 8, m = m0 + (j % 2) * 8;
    ldsm4t(r, smemAddr(tile + k * LoadA::kLd + m));
  }
}

// B fragments of two n8 tiles (n0 .. n0 + 15) x k16: r[0], r[1] tile n0; r[2], r[3] tile n0 + 8.
template <class LoadB>
__device__ __forceinline__ void loadFragB(uint32_t (&r)[4], const bf16_t* tile, int n0, int kk) {
  const int lane = int(threadIdx.x) % 32;
  const int j = lane / 8, i = lane % 8;
  if constexpr (!LoadB::kKMajor) {  // tile [N][K]
    const int n = n0 + i + (j / 2) * 8, k = kk + (j % 2) * 8;
    ldsm4(r, smemAddr(tile + n * LoadB::kLd + k));
  } else {  // tile [K][N]
    const int k = kk + i + (j % 2) * 8, n = n0 + (j / 2) * 8;
    ldsm4t(r, smemAddr(tile + k * LoadB::kLd + n));
  }
}

template <class LoadA, class LoadB, int kNB>
struct MainloopSmem {
  static constexpr int kStageBytes = LoadA::kTileBytes + kNB * LoadB::kTileBytes;
  static constexpr int kBytes = kStages * kStageBytes;
  static_assert(LoadA::kTileBytes % 128 == 0 && LoadB::kTileBytes % 128 == 0, "tile alignment");
};

template <int kNB>
using Accum = float[kNB][kMi][kNi][4];

// Accumulator element (mi, ni, q): tile row accRow(mi, q), column accCol(ni) + (q % 2).
__device__ __forceinline__ int accRow(int mi, int q) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  return (warp / 4) * kWarpM + mi * 16 + lane / 4 + (q / 2) * 8;
}
__device__ __forceinline__ int accCol(int ni) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  return (warp % 4) * kWarpN + ni * 8 + (lane % 4) * 2;
}

// acc[b] = A B[b] over kTiles K tiles (acc zeroed here). smem: MainloopSmem::kBytes, 128-byte
// aligned. Leaves the pipeline drained and the CTA synchronised (smem free for reuse).
template <class LoadA, class LoadB, int kNB>
__device__ __forceinline__ void groupedMainloop(unsigned char* smem, const LoadA& la,
                                                const LoadB (&lb)[kNB], int kTiles,
                                                float (&acc)[kNB][kMi][kNi][4]) {
  using Layout = MainloopSmem<LoadA, LoadB, kNB>;
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[b][mi][ni][q] = 0.0f;

  auto tileA = [&](int stage) {
    return reinterpret_cast<bf16_t*>(smem + stage * Layout::kStageBytes);
  };
  auto tileB = [&](int stage, int b) {
    return reinterpret_cast<bf16_t*>(smem + stage * Layout::kStageBytes + LoadA::kTileBytes +
                                     b * LoadB::kTileBytes);
  };
  auto issue = [&](int kt) {
    if (kt < kTiles) {
      const int stage = kt % kStages;
      la.load(tileA(stage), kt);
#pragma unroll
      for (int b = 0; b < kNB; ++b) lb[b].load(tileB(stage, b), kt);
    }
    cpAsyncCommit();  // empty groups keep the wait count uniform
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  const int warp = int(threadIdx.x) / 32;
  const int wm = (warp / 4) * kWarpM, wn = (warp % 4) * kWarpN;
  for (int kt = 0; kt < kTiles; ++kt) {
    cpAsyncWait<kStages - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();             // ... everyone's; and stage (kt - 1) % kStages is free
    issue(kt + kStages - 1);
    const int stage = kt % kStages;
    const bf16_t* a = tileA(stage);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t fa[kMi][4];
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi) loadFragA<LoadA>(fa[mi], a, wm + mi * 16, kk);
#pragma unroll
      for (int b = 0; b < kNB; ++b) {
        const bf16_t* bt = tileB(stage, b);
#pragma unroll
        for (int np = 0; np < kNi / 2; ++np) {
          uint32_t fb[4];
          loadFragB<LoadB>(fb, bt, wn + np * 16, kk);
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) {
            mma16816(acc[b][mi][2 * np], fa[mi], fb[0], fb[1]);
            mma16816(acc[b][mi][2 * np + 1], fa[mi], fb[2], fb[3]);
          }
        }
      }
    }
  }
  cpAsyncWait<0>();
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Device tile schedule for the row-tile stages.

#ifndef MOEWB_GROUPED_DEVICE_PARTS_ONLY
// tileStart[e] = sum_{e' < e} ceil(count_e' / tileRows); one thread.
__global__ void grouped_schedule_kernel(const int32_t* offsets, int numExperts, int tileRows,
                                        int32_t* tileStart) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t running = 0;
  for (int e = 0; e < numExperts; ++e) {
    tileStart[e] = running;
    running += (offsets[e + 1] - offsets[e] + tileRows - 1) / tileRows;
  }
  tileStart[numExperts] = running;
}
#endif  // MOEWB_GROUPED_DEVICE_PARTS_ONLY

struct RowTile {
  int expert;
  int64_t begin;  // first permuted row
  int64_t end;    // one past the last (<= begin + kBM)
};

// Row tile `slot` from the schedule (kBM rows): false past the last tile.
__device__ __forceinline__ bool findRowTile(const int32_t* offsets, const int32_t* tileStart,
                                            int numExperts, int slot, RowTile& tile) {
  if (slot >= tileStart[numExperts]) return false;
  int lo = 0, hi = numExperts;  // largest e with tileStart[e] <= slot
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tileStart[mid] <= slot) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  tile.expert = lo;
  tile.begin = int64_t(offsets[lo]) + int64_t(slot - tileStart[lo]) * kBM;
  const int64_t end = tile.begin + kBM;
  tile.end = end < offsets[lo + 1] ? end : int64_t(offsets[lo + 1]);
  return true;
}

__device__ __forceinline__ void storeBf16x2(bf16_t* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

// ---------------------------------------------------------------------------------------------
// Stage kernels. Grid (column tiles, row-tile slots) for the row-tile stages: the column tiles of
// one row tile run side by side (the A tile is read from L2 once per row tile).
// Every stage but gate+up takes kNB in {1, 2}: its CTA covers kNB x 128 output columns, as kNB
// B operands of 128 columns each against one A tile (kNB = 2: 128 x 256 CTA tiles, 64 x 64 per
// warp, 1 CTA / SM; kNB = 1: 128 x 128, 2 CTAs / SM). Column tile width kNB * kBN.

using RowsLoader = LoadKCols<kBM>;      // A rows [M][K]
using WeightNKLoader = LoadKCols<kBN>;  // weight [N, K] (y = x W^T)
using WeightKNLoader = LoadKRows<kBN>;  // weight [K, N] (dx = dy W)

using FwdSmem = MainloopSmem<RowsLoader, WeightNKLoader, 2>;
template <int kNB>
using DownSmem = MainloopSmem<RowsLoader, WeightNKLoader, kNB>;
template <int kNB>
using DgradSmem = MainloopSmem<RowsLoader, WeightKNLoader, kNB>;
template <int kNB>
using WgradSmem = MainloopSmem<LoadKRows<kBM>, LoadKRows<kBN>, kNB>;

#ifndef MOEWB_GROUPED_DEVICE_PARTS_ONLY
// CTAs per SM for a kNB kernel (registers: ~64 kNB accumulators per thread).
#define MOEWB_GROUPED_BOUNDS(kNB) __launch_bounds__(kThreads, (kNB) == 1 ? 2 : 1)

// g = x Wg^T, u = x Wu^T, h = glu(g, u): x [N k or N, d] (through gatherIndex), gate / up
// [E, f, d], gatePre / upPre / hidden [N k, f].
__global__ void __launch_bounds__(kThreads, 1)
    grouped_fwd_gate_up_kernel(const bf16_t* x, const int32_t* gatherIndex, const bf16_t* gate,
                               const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                               const int32_t* tileStart, int numExperts, GluDeviceParams glu,
                               bf16_t* gatePre, bf16_t* upPre, bf16_t* hidden) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((d + kBK - 1) / kBK);
  RowsLoader la;
  la.init(x, nullptr, d, gatherIndex, tile.begin, tile.end, d, kTiles);
  WeightNKLoader lb[2];
  const int64_t w0 = int64_t(tile.expert) * f * d;
  lb[0].init(gate + w0, nullptr, d, nullptr, n0, f, d, kTiles);
  lb[1].init(up + w0, nullptr, d, nullptr, n0, f, d, kTiles);
  float acc[2][kMi][kNi][4];
  groupedMainloop<RowsLoader, WeightNKLoader, 2>(smem, la, lb, kTiles, acc);
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = tile.begin + accRow(mi, 2 * h), col = n0 + accCol(ni);
        if (r >= tile.end || col >= f) continue;
        const float g0 = acc[0][mi][ni][2 * h], g1 = acc[0][mi][ni][2 * h + 1];
        const float u0 = acc[1][mi][ni][2 * h], u1 = acc[1][mi][ni][2 * h + 1];
        const int64_t at = r * f + col;
        storeBf16x2(gatePre + at, g0, g1);
        storeBf16x2(upPre + at, u0, u1);
        storeBf16x2(hidden + at, gluForwardDevice(glu, g0, u0), gluForwardDevice(glu, g1, u1));
      }
}

// y = h Wd^T (times rowWeight[r] when set): h [N k, f], down [E, d, f], y [N k, d].
template <int kNB>
__global__ void MOEWB_GROUPED_BOUNDS(kNB)
    grouped_fwd_down_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d, int64_t f,
                            const int32_t* offsets, const int32_t* tileStart, int numExperts,
                            const float* rowWeight, bf16_t* y) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  WeightNKLoader lb[kNB];
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0 + b * kBN, d, f,
               kTiles);
  }
  float acc[kNB][kMi][kNi][4];
  groupedMainloop<RowsLoader, WeightNKLoader, kNB>(smem, la, lb, kTiles, acc);
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = tile.begin + accRow(mi, 2 * h);
      if (r >= tile.end) continue;
      const float w = rowWeight != nullptr ? rowWeight[r] : 1.0f;
#pragma unroll
      for (int b = 0; b < kNB; ++b)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          const int64_t col = n0 + b * kBN + accCol(ni);
          if (col >= d) continue;
          float v0 = acc[b][mi][ni][2 * h], v1 = acc[b][mi][ni][2 * h + 1];
          if (rowWeight != nullptr) {
            v0 *= w;
            v1 *= w;
          }
          storeBf16x2(y + r * d + col, v0, v1);
        }
    }
}

// dh = dY Wd, then (dg, du) = glu backward at the saved (g, u): dY [N k, d] (the weighted
// dYPerm with the folded combine), down [E, d, f], gatePre / upPre / dGate / dUp [N k, f].
template <int kNB>
__global__ void MOEWB_GROUPED_BOUNDS(kNB)
    grouped_bwd_dh_kernel(const bf16_t* dY, const bf16_t* down, int64_t d, int64_t f,
                          const int32_t* offsets, const int32_t* tileStart, int numExperts,
                          GluDeviceParams glu, const bf16_t* gatePre, const bf16_t* upPre,
                          bf16_t* dGate, bf16_t* dUp) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kTiles = int((d + kBK - 1) / kBK);
  RowsLoader la;
  la.init(dY, nullptr, d, nullptr, tile.begin, tile.end, d, kTiles);
  WeightKNLoader lb[kNB];
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, 0, d, n0 + b * kBN, f,
               kTiles);
  }
  float acc[kNB][kMi][kNi][4];
  groupedMainloop<RowsLoader, WeightKNLoader, kNB>(smem, la, lb, kTiles, acc);
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = tile.begin + accRow(mi, 2 * h), col = n0 + b * kBN + accCol(ni);
          if (r >= tile.end || col >= f) continue;
          const int64_t at = r * f + col;
          const __nv_bfloat162 g = *reinterpret_cast<const __nv_bfloat162*>(gatePre + at);
          const __nv_bfloat162 u = *reinterpret_cast<const __nv_bfloat162*>(upPre + at);
          float dg0, du0, dg1, du1;
          gluBackwardDevice(glu, __low2float(g), __low2float(u), acc[b][mi][ni][2 * h], dg0, du0);
          gluBackwardDevice(glu, __high2float(g), __high2float(u), acc[b][mi][ni][2 * h + 1], dg1,
                            du1);
          storeBf16x2(dGate + at, dg0, dg1);
          storeBf16x2(dUp + at, du0, du1);
        }
}

// dx = dg Wg + du Wu (one accumulator, K = 2 f): dGate / dUp [N k, f], gate / up [E, f, d],
// dx [N k, d].
template <int kNB>
__global__ void MOEWB_GROUPED_BOUNDS(kNB)
    grouped_bwd_dx_kernel(const bf16_t* dGate, const bf16_t* dUp, const bf16_t* gate,
                          const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                          const int32_t* tileStart, int numExperts, bf16_t* dx) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kTilesPart = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(dGate, dUp, f, nullptr, tile.begin, tile.end, f, kTilesPart);
  WeightKNLoader lb[kNB];
  const int64_t w0 = int64_t(tile.expert) * f * d;
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].init(gate + w0, up + w0, d, nullptr, 0, f, n0 + b * kBN, d, kTilesPart);
  }
  float acc[kNB][kMi][kNi][4];
  groupedMainloop<RowsLoader, WeightKNLoader, kNB>(smem, la, lb, 2 * kTilesPart, acc);
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = tile.begin + accRow(mi, 2 * h), col = n0 + b * kBN + accCol(ni);
          if (r >= tile.end || col >= d) continue;
          storeBf16x2(dx + r * d + col, acc[b][mi][ni][2 * h], acc[b][mi][ni][2 * h + 1]);
        }
}

// order[z] = the expert of rank z by row count, largest first (ties by index), so the weight-
// gradient CTAs of hot experts (K = their rows) are dispatched first and do not form the tail.
// One block; identity order past 4096 experts (the O(E^2 / threads) ranking stops paying).
__global__ void grouped_expert_order_kernel(const int32_t* offsets, int numExperts,
                                            int32_t* order) {
  for (int e = int(threadIdx.x); e < numExperts; e += int(blockDim.x)) {
    if (numExperts > 4096) {
      order[e] = e;
      continue;
    }
    const int32_t count = offsets[e + 1] - offsets[e];
    int rank = 0;
    for (int o = 0; o < numExperts; ++o) {
      const int32_t other = offsets[o + 1] - offsets[o];
      rank += other > count || (other == count && o < e);
    }
    order[rank] = e;
  }
}

// grad[e] (mSize x nSize, fp32) += A_e^T B_e over expert e's rows: a [N k, mSize], b [N k or N,
// nSize] (through bIndex). Grid (N tiles, M tiles, experts); each CTA owns its output tile
// (deterministic read-add-write); empty experts exit at once. expertOrder (or null: identity)
// maps blockIdx.z to the expert.
template <int kNB>
__global__ void MOEWB_GROUPED_BOUNDS(kNB)
    grouped_wgrad_kernel(const bf16_t* a, const bf16_t* b, const int32_t* bIndex, int64_t mSize,
                         int64_t nSize, const int32_t* offsets, const int32_t* expertOrder,
                         float* grad) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int e = expertOrder != nullptr ? int(expertOrder[blockIdx.z]) : int(blockIdx.z);
  const int64_t rowBegin = offsets[e], rowEnd = offsets[e + 1];
  if (rowEnd <= rowBegin) return;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kTiles = int((rowEnd - rowBegin + kBK - 1) / kBK);
  LoadKRows<kBM> la;
  la.init(a, nullptr, mSize, nullptr, rowBegin, rowEnd, m0, mSize, kTiles);
  LoadKRows<kBN> lb[kNB];
#pragma unroll
  for (int j = 0; j < kNB; ++j) {
    lb[j].init(b, nullptr, nSize, bIndex, rowBegin, rowEnd, n0 + j * kBN, nSize, kTiles);
  }
  float acc[kNB][kMi][kNi][4];
  groupedMainloop<LoadKRows<kBM>, LoadKRows<kBN>, kNB>(smem, la, lb, kTiles, acc);
  float* out = grad + int64_t(e) * mSize * nSize;
#pragma unroll
  for (int j = 0; j < kNB; ++j)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = m0 + accRow(mi, 2 * h), col = n0 + j * kBN + accCol(ni);
          if (row >= mSize || col >= nSize) continue;
          float2* p = reinterpret_cast<float2*>(out + row * nSize + col);
          float2 v = *p;
          v.x += acc[j][mi][ni][2 * h];
          v.y += acc[j][mi][ni][2 * h + 1];
          *p = v;
        }
}

// Folded combine, part 1: partial[blockIdx.x][r] = sum over this CTA's kNB x 128 columns n of
// dy[outputIndex[r]][n] * bf16((h Wd^T)[r][n]) (the unweighted output row, recomputed; the same
// mainloop as grouped_fwd_down_kernel). Fixed reduction order: the 8 kNB columns of a thread in
// order, the quad by xor-shuffles, the 4 column warps in order. partial [ceil(d / (kNB kBN)),
// maxRows].
template <int kNB>
__global__ void MOEWB_GROUPED_BOUNDS(kNB)
    grouped_bwd_rowweight_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d, int64_t f,
                                 const int32_t* offsets, const int32_t* tileStart, int numExperts,
                                 const bf16_t* dy, const int32_t* outputIndex, int64_t maxRows,
                                 float* partial) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float warpSums[kBN / kWarpN][kBM];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  WeightNKLoader lb[kNB];
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0 + b * kBN, d, f,
               kTiles);
  }
  float acc[kNB][kMi][kNi][4];
  groupedMainloop<RowsLoader, WeightNKLoader, kNB>(smem, la, lb, kTiles, acc);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rowInTile = accRow(mi, 2 * h);
      const int64_t r = tile.begin + rowInTile;
      float sum = 0.0f;
      if (r < tile.end) {
        const bf16_t* g = dy + int64_t(outputIndex[r]) * d;
#pragma unroll
        for (int b = 0; b < kNB; ++b)
#pragma unroll
          for (int ni = 0; ni < kNi; ++ni) {
            const int64_t col = n0 + b * kBN + accCol(ni);
            if (col >= d) continue;
            const __nv_bfloat162 gv = *reinterpret_cast<const __nv_bfloat162*>(g + col);
            const __nv_bfloat162 yv =
                __floats2bfloat162_rn(acc[b][mi][ni][2 * h], acc[b][mi][ni][2 * h + 1]);
            sum += __low2float(gv) * __low2float(yv);
            sum += __high2float(gv) * __high2float(yv);
          }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (lane % 4 == 0) warpSums[warp % 4][rowInTile] = sum;
    }
  __syncthreads();
  if (int(threadIdx.x) < kBM) {
    const int64_t r = tile.begin + threadIdx.x;
    if (r < tile.end) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kBN / kWarpN; ++w) total += warpSums[w][threadIdx.x];
      partial[int64_t(blockIdx.x) * maxRows + r] = total;
    }
  }
}

// Folded combine, part 2: dRowWeight[r] = sum_t partial[t][r] in t order, r < R.
__global__ void grouped_rowweight_sum_kernel(const float* partial, int numTiles, int64_t maxRows,
                                             const int32_t* offsets, int numExperts,
                                             float* dRowWeight) {
  const int64_t rows = offsets[numExperts];
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    float total = 0.0f;
    for (int t = 0; t < numTiles; ++t) total += partial[int64_t(t) * maxRows + r];
    dRowWeight[r] = total;
  }
}

// dYPerm[r] = bf16(rowWeight[r] * dy[outputIndex[r]]) for r < R (the unfused combine's
// backward, bitwise): dy [N, d], dYPerm [N k, d]; grid-stride over R * d / 8 chunks.
__global__ void grouped_weighted_rows_kernel(const bf16_t* dy, const float* rowWeight,
                                             const int32_t* outputIndex, const int32_t* offsets,
                                             int numExperts, int64_t d, bf16_t* dYPerm) {
  const int64_t rows = offsets[numExperts];
  const int64_t chunksPerRow = d / 8;
  const int64_t total = rows * chunksPerRow;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunksPerRow, c = (i % chunksPerRow) * 8;
    const float w = rowWeight[r];
    const uint4 raw = *reinterpret_cast<const uint4*>(dy + int64_t(outputIndex[r]) * d + c);
    const bf16_t* v = reinterpret_cast<const bf16_t*>(&raw);
    uint4 outRaw;
    bf16_t* o = reinterpret_cast<bf16_t*>(&outRaw);
#pragma unroll
    for (int q = 0; q < 8; ++q) o[q] = __float2bfloat16(w * __bfloat162float(v[q]));
    *reinterpret_cast<uint4*>(dYPerm + r * d + c) = outRaw;
  }
}

#undef MOEWB_GROUPED_BOUNDS
#endif  // MOEWB_GROUPED_DEVICE_PARTS_ONLY

}  // namespace moewb::engine::cuda::grouped
