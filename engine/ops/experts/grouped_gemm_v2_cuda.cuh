// Grouped expert GEMMs, mainloop v2 (round 2 of bench/scratch/grouped_gemm_*.md): the same stages,
// schedules and numerics contract as grouped_gemm_cuda.cuh (v1, kept selectable by the engine),
// with a different mainloop and epilogue. Device code only: included by experts_mma_cuda.cu and by
// bench/scratch/grouped_gemm_02.cu (which times v1 against v2).
//
// Differences from v1:
//  - 4 warps (128 threads) of 64 x 64 warp tiles on a 128 x 128 CTA tile, 2 CTAs per SM: per
//    16-deep K slice a warp issues 4 A + 4 B ldmatrix.x4 for 32 mma (v1's 128 x 128 tile: 6 for
//    16), i.e. a third less shared-memory read traffic per mma;
//  - K step 64 with a 3-stage cp.async pipeline (v1: 32 x 4 stages): 4 k16 slices per barrier;
//  - XOR-swizzled shared memory instead of padding: 16-byte chunk c of tile row r is stored at
//    chunk c ^ (r % 8) (rows of 128 bytes for K-contiguous tiles, 256 bytes for K-row tiles), so
//    cp.async stores and every ldmatrix phase hit 8 distinct bank groups with no padding;
//  - A / B fragments double-buffered across the k16 slices of a stage;
//  - epilogues through shared memory: the fp32 accumulator tile is staged in the (drained)
//    pipeline buffers, then each thread writes 16-byte chunks (8 bf16 or 4 fp32 columns);
//  - forward gate+up: the B tile stacks 64 gate rows over the 64 up rows of the same columns
//    (CTA tile 128 rows x 64 columns of g, u and h), so gate+up uses the same 64 x 64 warp tiles;
//    the GLU reads g and u of one element from the staged tile.
// Accumulation order per output element: k16 slices in K order (one mma each), as in v1; the
// epilogue arithmetic (GLU, row weight, fp32 read-add-write) is v1's. dRowWeight's per-tile dot
// is reduced in a different (still fixed) order: per warp row, lanes over 4 columns each, then
// xor shuffles 16, 8, 4, 2, 1. Deterministic run to run; no atomics.
//
// Defines __global__ functions: include from ONE translation unit of a program; with
// MOEWB_GROUPED_DEVICE_PARTS_ONLY defined before the include, only the loaders and epilogues
// (the wgmma kernels of grouped_gemm_wgmma_cuda.cuh reuse them in their own translation unit).
// Shape rules as v1 (checked by the launchers): D % 8 == 0, F % 8 == 0, 16-byte aligned bases.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/glu_activation_cuda.cuh"
#include "ops/experts/grouped_gemm_cuda.cuh"

namespace moewb::engine::cuda::grouped::v2 {

using grouped::bf16_t;

constexpr int kBM = 128;       // output rows per CTA (= v1's, so the row-tile schedule is shared)
constexpr int kBN = 128;       // output columns per CTA (gate+up: 64 of g and 64 of u)
constexpr int kBK = 64;        // K step: one 128-byte row of a K-contiguous tile
constexpr int kStages = 3;     // cp.async pipeline depth
constexpr int kThreads = 128;  // 4 warps: 2 (M) x 2 (N) of 64 x 64
constexpr int kWarpM = 64, kWarpN = 64;
constexpr int kMi = kWarpM / 16;           // m16 fragments per warp
constexpr int kNi = kWarpN / 8;            // n8 fragments per warp
constexpr int kTileBytes = kBM * kBK * 2;  // every operand tile: 128 x 64 bf16 = 16 KB
constexpr int kStageBytes = 2 * kTileBytes;
constexpr int kSmemBytes = kStages * kStageBytes;  // 96 KB: 2 CTAs per SM
constexpr int kEpiLd = kBN + 8;                    // staged fp32 tile row stride (floats)
static_assert(kBM * kEpiLd * 4 <= kSmemBytes, "epilogue tile fits the pipeline buffers");
static_assert(kBM == grouped::kBM, "row-tile schedule shared with v1");

using Accum = float[kMi][kNi][4];

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of kRowBytes per row.
template <int kRowBytes>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kRowBytes + ((chunk ^ (row & 7)) << 4);
}

// ---------------------------------------------------------------------------------------------
// Operand loaders (tiles of 16 KB, swizzled).

// Tile [128][kBK] (128-byte rows), element (i, c) = row i's k0 + c: K along the columns. Rows are
// fixed per CTA: tile row i is logical row row0 + i (< rowEnd), read at data row index[row] (or
// row) of base1 (then base2 after kTiles1 K tiles: dx). kStacked (forward gate+up): tile rows
// 0..63 are rows row0 + i of base1 (gate), rows 64..127 rows row0 + i - 64 of base2 (up), one K
// source.
template <bool kStacked>
struct LoadKCols {
  static constexpr bool kKMajor = false;
  static constexpr int kRowBytes = kBK * 2;
  static constexpr int kPer = kBM * (kBK / 8) / kThreads;  // 8 chunks per thread
  static_assert(kPer % 2 == 0, "stacked halves by chunk index");

  const bf16_t* base1;
  const bf16_t* base2;
  int64_t ld;
  int64_t kEnd;       // K extent of each source
  int kTiles1;        // K tiles of the first source
  int32_t row[kPer];  // data row of each chunk (-1: outside)

  __device__ __forceinline__ void init(const bf16_t* b1, const bf16_t* b2, int64_t stride,
                                       const int32_t* index, int64_t row0, int64_t rowEnd,
                                       int64_t kExtent, int kTilesFirst) {
    base1 = b1;
    base2 = b2;
    ld = stride;
    kEnd = kExtent;
    kTiles1 = kTilesFirst;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int i = int(threadIdx.x) / 8 + p * (kThreads / 8);
      const int64_t logical = row0 + (kStacked ? i % (kBM / 2) : i);
      const bool ok = logical < rowEnd;
      row[p] = !ok ? -1 : int32_t(index != nullptr ? int64_t(index[logical]) : logical);
    }
  }

  __device__ __forceinline__ void load(unsigned char* tile, int kt) const {
    const bool first = kStacked || kt < kTiles1;
    const int c = int(threadIdx.x) % 8;
    const int64_t k = int64_t(first ? kt : kt - kTiles1) * kBK + c * 8;
    const bool kOk = k < kEnd;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int i = int(threadIdx.x) / 8 + p * (kThreads / 8);
      const bf16_t* base = kStacked ? (p < kPer / 2 ? base1 : base2) : (first ? base1 : base2);
      const bool ok = kOk && row[p] >= 0;
      cpAsync16(tile + swizzled<kRowBytes>(i, c), ok ? base + int64_t(row[p]) * ld + k : base1, ok);
    }
  }
};

// Tile [kBK][128] (256-byte rows), element (r, j) = data row of K index k0 + r, column col0 + j:
// K along the rows. K index k is logical row rowBegin + k (< rowEnd), read at data row index[row]
// (or row) of base1 (base2 after kTiles1 K tiles). Columns >= colEnd are zero.
struct LoadKRows {
  static constexpr bool kKMajor = true;
  static constexpr int kRowBytes = kBN * 2;
  static constexpr int kPer = kBK * (kBN / 8) / kThreads;  // 8 chunks per thread

  const bf16_t* base1;
  const bf16_t* base2;
  const int32_t* index;
  int64_t ld;
  int64_t rowBegin, rowEnd;
  int64_t col;  // this thread's column
  bool colOk;
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
    col = firstCol + (int(threadIdx.x) % 16) * 8;
    colOk = col < colExtent;
    kTiles1 = kTilesFirst;
  }

  __device__ __forceinline__ void load(unsigned char* tile, int kt) const {
    const bool first = kt < kTiles1;
    const bf16_t* base = first ? base1 : base2;
    const int64_t kBase = rowBegin + int64_t(first ? kt : kt - kTiles1) * kBK;
    const int j = int(threadIdx.x) % 16;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int r = int(threadIdx.x) / 16 + p * (kThreads / 16);
      const int64_t row = kBase + r;
      const bool ok = colOk && row < rowEnd;
      const int64_t src = !ok ? 0 : (index != nullptr ? int64_t(index[row]) : row);
      cpAsync16(tile + swizzled<kRowBytes>(r, j), ok ? base + src * ld + col : base1, ok);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Fragments (the lane -> matrix mapping of v1; swizzled addresses).

// A fragment (m16 x k16) at tile rows m0.., K offset kk.
template <class LoadA>
__device__ __forceinline__ void loadFragA(uint32_t (&r)[4], uint32_t tile, int m0, int kk) {
  const int lane = int(threadIdx.x) % 32;
  if constexpr (!LoadA::kKMajor) {  // tile [M][K]
    const int row = m0 + lane % 16, chunk = kk / 8 + lane / 16;
    ldsm4(r, tile + swizzled<LoadA::kRowBytes>(row, chunk));
  } else {  // tile [K][M]: matrices (m0, k), (m0 + 8, k), (m0, k + 8), (m0 + 8, k + 8)
    const int j = lane / 8, i = lane % 8;
    const int k = kk + i + (j / 2) * 8, m = m0 + (j % 2) * 8;
    ldsm4t(r, tile + swizzled<LoadA::kRowBytes>(k, m / 8));
  }
}

// B fragments of two n8 tiles (n0 .. n0 + 15) x k16: r[0], r[1] tile n0; r[2], r[3] tile n0 + 8.
template <class LoadB>
__device__ __forceinline__ void loadFragB(uint32_t (&r)[4], uint32_t tile, int n0, int kk) {
  const int lane = int(threadIdx.x) % 32;
  const int j = lane / 8, i = lane % 8;
  if constexpr (!LoadB::kKMajor) {  // tile [N][K]
    const int n = n0 + i + (j / 2) * 8, k = kk + (j % 2) * 8;
    ldsm4(r, tile + swizzled<LoadB::kRowBytes>(n, k / 8));
  } else {  // tile [K][N]
    const int k = kk + i + (j % 2) * 8, n = n0 + (j / 2) * 8;
    ldsm4t(r, tile + swizzled<LoadB::kRowBytes>(k, n / 8));
  }
}

__device__ __forceinline__ int warpRow0() {
  return (int(threadIdx.x) / 32 / 2) * kWarpM;
}
__device__ __forceinline__ int warpCol0() {
  return (int(threadIdx.x) / 32 % 2) * kWarpN;
}

// acc = A B over kTiles K tiles (acc zeroed here). smem: kSmemBytes, 128-byte aligned. Leaves the
// pipeline drained and the CTA synchronised (smem free for reuse).
template <class LoadA, class LoadB>
__device__ __forceinline__ void mainloop(unsigned char* smem, const LoadA& la, const LoadB& lb,
                                         int kTiles, Accum& acc) {
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;

  auto issue = [&](int kt) {
    if (kt < kTiles) {
      unsigned char* stage = smem + (kt % kStages) * kStageBytes;
      la.load(stage, kt);
      lb.load(stage + kTileBytes, kt);
    }
    cpAsyncCommit();  // empty groups keep the wait count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  const int wm = warpRow0(), wn = warpCol0();
  const uint32_t smemBase = smemAddr(smem);
  for (int kt = 0; kt < kTiles; ++kt) {
    cpAsyncWait<kStages - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();             // ... everyone's; and stage (kt - 1) % kStages is free
    issue(kt + kStages - 1);
    const uint32_t a = smemBase + uint32_t((kt % kStages) * kStageBytes);
    const uint32_t b = a + uint32_t(kTileBytes);
    uint32_t fa[2][kMi][4], fb[2][kNi / 2][4];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) loadFragA<LoadA>(fa[0][mi], a, wm + mi * 16, 0);
#pragma unroll
    for (int np = 0; np < kNi / 2; ++np) loadFragB<LoadB>(fb[0][np], b, wn + np * 16, 0);
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) {
      const int cur = s % 2;
      if (s + 1 < kBK / 16) {
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi)
          loadFragA<LoadA>(fa[cur ^ 1][mi], a, wm + mi * 16, (s + 1) * 16);
#pragma unroll
        for (int np = 0; np < kNi / 2; ++np)
          loadFragB<LoadB>(fb[cur ^ 1][np], b, wn + np * 16, (s + 1) * 16);
      }
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int np = 0; np < kNi / 2; ++np) {
          mma16816(acc[mi][2 * np], fa[cur][mi], fb[cur][np][0], fb[cur][np][1]);
          mma16816(acc[mi][2 * np + 1], fa[cur][mi], fb[cur][np][2], fb[cur][np][3]);
        }
    }
  }
  cpAsyncWait<0>();
  __syncthreads();
}

// Writes the accumulators to the staged fp32 tile [kBM][kEpiLd] (smem) and synchronises.
__device__ __forceinline__ void stageAccum(unsigned char* smem, const Accum& acc) {
  float* s = reinterpret_cast<float*>(smem);
  const int lane = int(threadIdx.x) % 32;
  const int wm = warpRow0(), wn = warpCol0();
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wm + mi * 16 + lane / 4 + h * 8, col = wn + ni * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(s + row * kEpiLd + col) =
            make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
      }
  __syncthreads();
}

// 8 staged fp32 values of row `row`, columns col .. col + 7.
__device__ __forceinline__ void readStaged8(const unsigned char* smem, int row, int col,
                                            float (&v)[8]) {
  const float* s = reinterpret_cast<const float*>(smem) + row * kEpiLd + col;
  const float4 lo = *reinterpret_cast<const float4*>(s);
  const float4 hi = *reinterpret_cast<const float4*>(s + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

__device__ __forceinline__ uint4 packBf16x8(const float (&v)[8]) {
  uint4 out;
  uint32_t* w = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * q], v[2 * q + 1]);
    w[q] = *reinterpret_cast<const uint32_t*>(&p);
  }
  return out;
}

__device__ __forceinline__ void unpackBf16x8(const uint4& raw, float (&v)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    v[2 * q] = __low2float(p[q]);
    v[2 * q + 1] = __high2float(p[q]);
  }
}

// ---------------------------------------------------------------------------------------------
// Stage kernels: grids as v1's kNB = 1 kernels (column tiles of 128, row-tile slots from
// grouped_schedule_kernel with 128-row tiles), except gate+up (column tiles of 64).

using RowsLoader = LoadKCols<false>;      // A rows [M][K]
using WeightNKLoader = LoadKCols<false>;  // weight [N, K] (y = x W^T)
using GateUpLoader = LoadKCols<true>;     // gate rows over up rows [2 x 64][K]
using WeightKNLoader = LoadKRows;         // weight [K, N] (dx = dy W)

constexpr int kGateUpCols = kBN / 2;  // f columns per gate+up CTA

// Gate+up epilogue from the staged tile (columns 0..63: g, 64..127: u of f columns n0..n0+63):
// gatePre / upPre / hidden [N k, f] = bf16(g), bf16(u), bf16(glu(g, u)) in 16-byte chunks.
__device__ __forceinline__ void gateUpEpilogue(const unsigned char* smem, const RowTile& tile,
                                               int64_t n0, int64_t f, const GluDeviceParams& glu,
                                               bf16_t* gatePre, bf16_t* upPre, bf16_t* hidden) {
  constexpr int kChunks = kGateUpCols / 8;
  for (int q = int(threadIdx.x); q < kBM * kChunks; q += kThreads) {
    const int i = q / kChunks, c = (q % kChunks) * 8;
    const int64_t r = tile.begin + i, col = n0 + c;
    if (r >= tile.end || col >= f) continue;
    float g[8], u[8], h[8];
    readStaged8(smem, i, c, g);
    readStaged8(smem, i, kGateUpCols + c, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = gluForwardDevice(glu, g[e], u[e]);
    const int64_t at = r * f + col;
    *reinterpret_cast<uint4*>(gatePre + at) = packBf16x8(g);
    *reinterpret_cast<uint4*>(upPre + at) = packBf16x8(u);
    *reinterpret_cast<uint4*>(hidden + at) = packBf16x8(h);
  }
}

// Down epilogue from the staged tile (d columns n0..n0+127): y [N k, d] = bf16(acc * rowWeight[r]
// or acc) in 16-byte chunks.
__device__ __forceinline__ void downEpilogue(const unsigned char* smem, const RowTile& tile,
                                             int64_t n0, int64_t d, const float* rowWeight,
                                             bf16_t* y) {
  constexpr int kChunks = kBN / 8;
  for (int q = int(threadIdx.x); q < kBM * kChunks; q += kThreads) {
    const int i = q / kChunks, c = (q % kChunks) * 8;
    const int64_t r = tile.begin + i, col = n0 + c;
    if (r >= tile.end || col >= d) continue;
    float v[8];
    readStaged8(smem, i, c, v);
    if (rowWeight != nullptr) {
      const float w = rowWeight[r];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] *= w;
    }
    *reinterpret_cast<uint4*>(y + r * d + col) = packBf16x8(v);
  }
}

// dh epilogue from the staged tile (f columns n0..n0+127 of dh = dY Wd): (dg, du) = GLU backward
// at the saved (g, u) into dGate / dUp [N k, f], 16-byte chunks.
__device__ __forceinline__ void dhEpilogue(const unsigned char* smem, const RowTile& tile,
                                           int64_t n0, int64_t f, const GluDeviceParams& glu,
                                           const bf16_t* gatePre, const bf16_t* upPre,
                                           bf16_t* dGate, bf16_t* dUp) {
  constexpr int kChunks = kBN / 8;
  for (int q = int(threadIdx.x); q < kBM * kChunks; q += kThreads) {
    const int i = q / kChunks, c = (q % kChunks) * 8;
    const int64_t r = tile.begin + i, col = n0 + c;
    if (r >= tile.end || col >= f) continue;
    const int64_t at = r * f + col;
    float dh[8], g[8], u[8], dg[8], du[8];
    readStaged8(smem, i, c, dh);
    unpackBf16x8(*reinterpret_cast<const uint4*>(gatePre + at), g);
    unpackBf16x8(*reinterpret_cast<const uint4*>(upPre + at), u);
#pragma unroll
    for (int e = 0; e < 8; ++e) gluBackwardDevice(glu, g[e], u[e], dh[e], dg[e], du[e]);
    *reinterpret_cast<uint4*>(dGate + at) = packBf16x8(dg);
    *reinterpret_cast<uint4*>(dUp + at) = packBf16x8(du);
  }
}

// dx epilogue from the staged tile (d columns n0..n0+127): dx [N k, d] = bf16(acc).
__device__ __forceinline__ void dxEpilogue(const unsigned char* smem, const RowTile& tile,
                                           int64_t n0, int64_t d, bf16_t* dx) {
  constexpr int kChunks = kBN / 8;
  for (int q = int(threadIdx.x); q < kBM * kChunks; q += kThreads) {
    const int i = q / kChunks, c = (q % kChunks) * 8;
    const int64_t r = tile.begin + i, col = n0 + c;
    if (r >= tile.end || col >= d) continue;
    float v[8];
    readStaged8(smem, i, c, v);
    *reinterpret_cast<uint4*>(dx + r * d + col) = packBf16x8(v);
  }
}

// Weight-gradient epilogue from the staged tile (rows m0.., columns n0.. of one expert's
// [mSize, nSize] fp32 gradient `out`): out += acc, float4 read-add-write (the CTA owns the tile).
__device__ __forceinline__ void wgradEpilogue(const unsigned char* smem, int64_t m0, int64_t n0,
                                              int64_t mSize, int64_t nSize, float* out) {
  const float* s = reinterpret_cast<const float*>(smem);
  constexpr int kChunks = kBN / 4;
  for (int q = int(threadIdx.x); q < kBM * kChunks; q += kThreads) {
    const int i = q / kChunks, c = (q % kChunks) * 4;
    const int64_t row = m0 + i, col = n0 + c;
    if (row >= mSize || col >= nSize) continue;
    const float4 add = *reinterpret_cast<const float4*>(s + i * kEpiLd + c);
    float4* p = reinterpret_cast<float4*>(out + row * nSize + col);
    float4 v = *p;
    v.x += add.x;
    v.y += add.y;
    v.z += add.z;
    v.w += add.w;
    *p = v;
  }
}

// dRowWeight epilogue from the staged tile (d columns n0..n0+127): partialTile[r] = sum over the
// tile's columns n of dy[outputIndex[r]][n] * bf16(acc[r][n]). Fixed order: lane sums its 4
// columns in order, then xor shuffles 16, 8, 4, 2, 1.
__device__ __forceinline__ void rowWeightEpilogue(const unsigned char* smem, const RowTile& tile,
                                                  int64_t n0, int64_t d, const bf16_t* dy,
                                                  const int32_t* outputIndex, float* partialTile) {
  const float* s = reinterpret_cast<const float*>(smem);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t col = n0 + lane * 4;
  for (int i = warp; i < kBM; i += kThreads / 32) {
    const int64_t r = tile.begin + i;
    if (r >= tile.end) break;  // warp-uniform
    float sum = 0.0f;
    if (col < d) {
      const float4 v = *reinterpret_cast<const float4*>(s + i * kEpiLd + lane * 4);
      const uint2 raw = *reinterpret_cast<const uint2*>(dy + int64_t(outputIndex[r]) * d + col);
      const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const __nv_bfloat162 y01 = __floats2bfloat162_rn(v.x, v.y);
      const __nv_bfloat162 y23 = __floats2bfloat162_rn(v.z, v.w);
      sum += __low2float(g[0]) * __low2float(y01);
      sum += __high2float(g[0]) * __high2float(y01);
      sum += __low2float(g[1]) * __low2float(y23);
      sum += __high2float(g[1]) * __high2float(y23);
    }
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane == 0) partialTile[r] = sum;
  }
}

#ifndef MOEWB_GROUPED_DEVICE_PARTS_ONLY
// g = x Wg^T, u = x Wu^T, h = glu(g, u): x [N k or N, d] (through gatherIndex), gate / up
// [E, f, d], gatePre / upPre / hidden [N k, f]. Grid (ceil(f / 64), row-tile slots).
__global__ void __launch_bounds__(kThreads, 2)
    grouped_fwd_gate_up_kernel(const bf16_t* x, const int32_t* gatherIndex, const bf16_t* gate,
                               const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                               const int32_t* tileStart, int numExperts, GluDeviceParams glu,
                               bf16_t* gatePre, bf16_t* upPre, bf16_t* hidden) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kGateUpCols;
  const int kTiles = int((d + kBK - 1) / kBK);
  RowsLoader la;
  la.init(x, nullptr, d, gatherIndex, tile.begin, tile.end, d, kTiles);
  GateUpLoader lb;
  const int64_t w0 = int64_t(tile.expert) * f * d;
  lb.init(gate + w0, up + w0, d, nullptr, n0, f, d, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  gateUpEpilogue(smem, tile, n0, f, glu, gatePre, upPre, hidden);
}

// y = h Wd^T (times rowWeight[r] when set): h [N k, f], down [E, d, f], y [N k, d].
__global__ void __launch_bounds__(kThreads, 2)
    grouped_fwd_down_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d, int64_t f,
                            const int32_t* offsets, const int32_t* tileStart, int numExperts,
                            const float* rowWeight, bf16_t* y) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  WeightNKLoader lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0, d, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  downEpilogue(smem, tile, n0, d, rowWeight, y);
}

// dh = dY Wd, then (dg, du) = glu backward at the saved (g, u): dY [N k, d] (the weighted
// dYPerm with the folded combine), down [E, d, f], gatePre / upPre / dGate / dUp [N k, f].
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_dh_kernel(const bf16_t* dY, const bf16_t* down, int64_t d, int64_t f,
                          const int32_t* offsets, const int32_t* tileStart, int numExperts,
                          GluDeviceParams glu, const bf16_t* gatePre, const bf16_t* upPre,
                          bf16_t* dGate, bf16_t* dUp) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((d + kBK - 1) / kBK);
  RowsLoader la;
  la.init(dY, nullptr, d, nullptr, tile.begin, tile.end, d, kTiles);
  WeightKNLoader lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, 0, d, n0, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  dhEpilogue(smem, tile, n0, f, glu, gatePre, upPre, dGate, dUp);
}

// dx = dg Wg + du Wu (one accumulator, K = 2 f): dGate / dUp [N k, f], gate / up [E, f, d],
// dx [N k, d].
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_dx_kernel(const bf16_t* dGate, const bf16_t* dUp, const bf16_t* gate,
                          const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                          const int32_t* tileStart, int numExperts, bf16_t* dx) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTilesPart = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(dGate, dUp, f, nullptr, tile.begin, tile.end, f, kTilesPart);
  WeightKNLoader lb;
  const int64_t w0 = int64_t(tile.expert) * f * d;
  lb.init(gate + w0, up + w0, d, nullptr, 0, f, n0, d, kTilesPart);
  Accum acc;
  mainloop(smem, la, lb, 2 * kTilesPart, acc);
  stageAccum(smem, acc);
  dxEpilogue(smem, tile, n0, d, dx);
}

// grad[e] (mSize x nSize, fp32) += A_e^T B_e over expert e's rows: a [N k, mSize], b [N k or N,
// nSize] (through bIndex). Grid (ceil(nSize / 128), ceil(mSize / 128), experts); each CTA owns
// its output tile (deterministic float4 read-add-write); empty experts exit at once. expertOrder
// (or null: identity) maps blockIdx.z to the expert (grouped_expert_order_kernel).
__global__ void __launch_bounds__(kThreads, 2)
    grouped_wgrad_kernel(const bf16_t* a, const bf16_t* b, const int32_t* bIndex, int64_t mSize,
                         int64_t nSize, const int32_t* offsets, const int32_t* expertOrder,
                         float* grad) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int e = expertOrder != nullptr ? int(expertOrder[blockIdx.z]) : int(blockIdx.z);
  const int64_t rowBegin = offsets[e], rowEnd = offsets[e + 1];
  if (rowEnd <= rowBegin) return;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((rowEnd - rowBegin + kBK - 1) / kBK);
  LoadKRows la, lb;
  la.init(a, nullptr, mSize, nullptr, rowBegin, rowEnd, m0, mSize, kTiles);
  lb.init(b, nullptr, nSize, bIndex, rowBegin, rowEnd, n0, nSize, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  wgradEpilogue(smem, m0, n0, mSize, nSize, grad + int64_t(e) * mSize * nSize);
}

// Folded combine, part 1: partial[blockIdx.x][r] = sum over this CTA's 128 columns n of
// dy[outputIndex[r]][n] * bf16((h Wd^T)[r][n]) (the unweighted output row, recomputed with the
// mainloop of grouped_fwd_down_kernel). Fixed order: lane sums its 4 columns in order, then xor
// shuffles 16, 8, 4, 2, 1. partial [ceil(d / 128), maxRows]; reduce with
// grouped::grouped_rowweight_sum_kernel.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_rowweight_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d, int64_t f,
                                 const int32_t* offsets, const int32_t* tileStart, int numExperts,
                                 const bf16_t* dy, const int32_t* outputIndex, int64_t maxRows,
                                 float* partial) {
  extern __shared__ __align__(128) unsigned char smem[];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  WeightNKLoader lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0, d, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  rowWeightEpilogue(smem, tile, n0, d, dy, outputIndex,
                    partial + int64_t(blockIdx.x) * maxRows);
}

#endif  // MOEWB_GROUPED_DEVICE_PARTS_ONLY

}  // namespace moewb::engine::cuda::grouped::v2
