// Grouped expert GEMMs, wgmma mainloop (sm_90a only): forward gate+up, forward down (plain and
// row-weighted), the dRowWeight recompute (the down product with the per-tile dot epilogue), the
// dgrad stages dh (+ GLU backward) and dx, and the weight gradients. Wired into the engine by
// experts_wgmma_cuda.cu (its own sm_90a object, engine/ops/experts/cuda_sources.cmake) and used by
// experts_mma_cuda.cu on compute capability 9.0 unless MOEWB_GROUPED_WGMMA says otherwise
// (docs/GPU.md). Design (bench/scratch/grouped_gemm_01.md, "Experimental: wgmma";
// grouped_gemm_03.md): the v2 loaders (grouped_gemm_v2_cuda.cuh) already write each 128 x 64 bf16
// K-contiguous tile as rows of 128 bytes with 16-byte chunk c of row r at chunk c ^ (r % 8), which
// is the wgmma 128-byte-swizzle K-major layout when the tile starts on a 1024-byte boundary. Tiles
// read [K, M or N] (the dgrad weights, both weight-gradient operands) use LoadKRowsMn: the
// 128-byte-swizzle MN-major layout (two 64-wide atoms) and wgmma's bf16 transpose bits. One
// warpgroup (128 threads) per 128 x 128 CTA tile issues, per 16-deep K slice, two
// wgmma.m64n128k16 (rows 0..63 and 64..127) reading A and B from shared memory; fp32 accumulators
// in registers (2 x 64 per thread). Pipeline: v2's 3-stage cp.async (all threads load),
// fence.proxy.async + barrier before the wgmma batch of a stage, wgmma.wait_group 0 at the end of
// each stage (the second CTA on the SM covers the wait). Epilogues, grids, tile schedule and
// workspaces: v2's. Accumulation order per element: k16 slices in K order, as v1 / v2; the wgmma
// hardware's internal order within a slice may differ from mma.sync's, so results may differ
// from v1 / v2 in the last bits (deterministic run to run: fixed order, no atomics). Checked
// against the fp32 reference and v2 by bench/scratch/grouped_gemm_03.cu and ExpertsWgmmaCudaTest.
//
// Defines __global__ functions: include from ONE translation unit compiled for sm_90a
// (-gencode=arch=compute_90a,code=sm_90a); elsewhere the kernels trap. A translation unit that
// also defines the v1 / v2 kernels includes those headers first (bench/scratch/grouped_gemm_02.cu,
// grouped_gemm_03.cu); the engine's experts_wgmma_cuda.cu defines MOEWB_GROUPED_DEVICE_PARTS_ONLY
// so that only these kernels are defined there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/grouped_gemm_v2_cuda.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOEWB_GROUPED_HAS_WGMMA 1
#else
#define MOEWB_GROUPED_HAS_WGMMA 0
#endif

namespace moewb::engine::cuda::grouped::wg {

using grouped::bf16_t;
using v2::kBK;
using v2::kBM;
using v2::kBN;
using v2::kStageBytes;
using v2::kStages;
using v2::kThreads;
using v2::kTileBytes;
static_assert(kThreads == 128, "one warpgroup per CTA");

constexpr int kAlign = 1024;                         // 128-byte swizzle atom: 8 rows x 128 B
constexpr int kSmemBytes = v2::kSmemBytes + kAlign;  // dynamic smem, aligned up in the kernel

using Accum = float[2][64];  // [m64 half][wgmma m64n128 fragment]

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t descSw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// MN-major B tile (dgrad: weights read [K, N], N contiguous) in the wgmma 128-byte-swizzle
// MN-major layout: two column halves of 64 (8 KB apart), each kBK rows of 128 bytes (row = one K
// index, 64 N values), 16-byte chunk c of row k at chunk c ^ (k % 8). Byte offset of chunk j
// (0..15, 8 N values each) of K row k.
constexpr int kMnHalfBytes = kBK * 128;
static_assert(2 * kMnHalfBytes == kTileBytes, "MN-major B tile fills one operand tile");
__device__ __forceinline__ int mnSwizzled(int k, int j) {
  return (j / 8) * kMnHalfBytes + k * 128 + (((j % 8) ^ (k % 8)) << 4);
}
// Descriptor of the MN-major tile at a 16-deep K slice: 128-byte swizzle, the two 64-wide N atoms
// kMnHalfBytes apart (leading byte offset), 8-row K groups 1024 bytes apart (stride byte offset).
__device__ __forceinline__ uint64_t descMn128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(kMnHalfBytes >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// v2::LoadKRows (tile [kBK][128], K along the rows; same sources, bounds and zero fill) writing
// the MN-major layout above instead of v2's 256-byte swizzled rows.
struct LoadKRowsMn : v2::LoadKRows {
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
      cpAsync16(tile + mnSwizzled(r, j), ok ? base + src * ld + col : base1, ok);
    }
  }
};

// LoadKRowsMn for a gathered K dimension (the gate / up weight gradients read x rows through the
// gather index): the source row of each chunk this thread copies is read one K tile ahead into
// registers, so that the cp.async of tile kt no longer waits for a dependent index load issued
// right before it (one L2 round trip per K tile on the critical path of LoadKRowsMn; round 2 in
// grouped_gemm_03.md). Same sources, bounds, zero fill and layout as LoadKRowsMn, so the same
// tile bytes. Tiles must be loaded in order 0, 1, 2, ... (mainloop does); call prefetch(0) after
// init.
struct LoadKRowsMnPrefetch : LoadKRowsMn {
  mutable int32_t next[kPer];  // source rows of the next tile's chunks (index mode only)

  __device__ __forceinline__ void prefetch(int kt) const {
    if (index == nullptr) return;
    const bool first = kt < kTiles1;
    const int64_t kBase = rowBegin + int64_t(first ? kt : kt - kTiles1) * kBK;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int64_t row = kBase + int(threadIdx.x) / 16 + p * (kThreads / 16);
      next[p] = row < rowEnd ? index[row] : 0;
    }
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
      const int64_t src = !ok ? 0 : (index != nullptr ? int64_t(next[p]) : row);
      cpAsync16(tile + mnSwizzled(r, j), ok ? base + src * ld + col : base1, ok);
    }
    prefetch(kt + 1);
  }
};

// Operand layout of a loader: K-contiguous rows (v2::LoadKCols) or LoadKRowsMn (MN-major); v2's
// own K-row layout (v2::LoadKRows) is not a wgmma layout.
template <class L>
struct IsMn {
  static constexpr bool value = false;
};
template <>
struct IsMn<LoadKRowsMn> {
  static constexpr bool value = true;
};
template <>
struct IsMn<LoadKRowsMnPrefetch> {
  static constexpr bool value = true;
};

__device__ __forceinline__ void fenceOperand(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if MOEWB_GROUPED_HAS_WGMMA
__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaWaitAll() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// d (m64 x n128, fp32) += A (64 x 16 at descA) B (16 x 128 at descB), each K-major (kTrans 0)
// or MN-major (kTrans 1, the bf16-only transpose of wgmma).
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma128(float (&d)[64], uint64_t descA, uint64_t descB) {
  const int scaleD = 1;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(descA), "l"(descB), "r"(scaleD), "n"(kTransA), "n"(kTransB));
}
#endif

// acc = A B over kTiles K tiles; smem 1024-byte aligned, v2::kSmemBytes. Leaves the pipeline
// drained and the CTA synchronised.
template <class LoadA, class LoadB>
__device__ __forceinline__ void mainloop(unsigned char* smem, const LoadA& la, const LoadB& lb,
                                         int kTiles, Accum& acc) {
  constexpr bool kMnA = IsMn<LoadA>::value, kMnB = IsMn<LoadB>::value;
  static_assert(kMnA || !LoadA::kKMajor, "A: K-contiguous rows or LoadKRowsMn");
  static_assert(kMnB || !LoadB::kKMajor, "B: K-contiguous rows or LoadKRowsMn");
  constexpr int kTa = kMnA ? 1 : 0, kTb = kMnB ? 1 : 0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
#if MOEWB_GROUPED_HAS_WGMMA
  auto issue = [&](int kt) {
    if (kt < kTiles) {
      unsigned char* stage = smem + (kt % kStages) * kStageBytes;
      la.load(stage, kt);
      lb.load(stage + kTileBytes, kt);
    }
    cpAsyncCommit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  const uint32_t base = smemAddr(smem);
  for (int kt = 0; kt < kTiles; ++kt) {
    cpAsyncWait<kStages - 2>();  // tile kt has landed (this thread's copies)
    fenceProxyAsync();           // ... visible to the async proxy (wgmma operand reads)
    __syncthreads();             // everyone's; stage (kt - 1) % kStages is free (waited below)
    issue(kt + kStages - 1);
    const uint32_t a = base + uint32_t((kt % kStages) * kStageBytes);
    const uint32_t b = a + uint32_t(kTileBytes);
    fenceOperand(acc[0]);
    fenceOperand(acc[1]);
    wgmmaFence();
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) {
      // K-major tiles: rows of 128 bytes, K slice s at byte 32 s, M rows 64.. at 64 x 128 bytes.
      // MN-major tiles: K slice s at K row 16 s (128 bytes each), M 64.. in the second atom.
      const uint64_t db =
          kMnB ? descMn128(b + uint32_t(s * 16 * 128)) : descSw128(b + uint32_t(s * 32));
      const uint64_t da0 =
          kMnA ? descMn128(a + uint32_t(s * 16 * 128)) : descSw128(a + uint32_t(s * 32));
      const uint64_t da1 = kMnA ? descMn128(a + uint32_t(kMnHalfBytes + s * 16 * 128))
                                : descSw128(a + uint32_t(64 * 128 + s * 32));
      wgmma128<kTa, kTb>(acc[0], da0, db);
      wgmma128<kTa, kTb>(acc[1], da1, db);
    }
    wgmmaCommit();
    wgmmaWaitAll();
    fenceOperand(acc[0]);
    fenceOperand(acc[1]);
  }
  cpAsyncWait<0>();
  __syncthreads();
#else
  __trap();
#endif
}

// Writes the accumulators to v2's staged fp32 tile [kBM][v2::kEpiLd] and synchronises.
// Fragment i of half h: row h * 64 + 16 warp + lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) +
// 2 (lane % 4) + i % 2.
__device__ __forceinline__ void stageAccum(unsigned char* smem, const Accum& acc) {
  float* s = reinterpret_cast<float*>(smem);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int row = h * 64 + warp * 16 + lane / 4 + q * 8, col = j * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(s + row * v2::kEpiLd + col) =
            make_float2(acc[h][4 * j + 2 * q], acc[h][4 * j + 2 * q + 1]);
      }
  __syncthreads();
}

__device__ __forceinline__ unsigned char* alignedSmem(unsigned char* raw) {
  const uint32_t a = smemAddr(raw);
  return raw + ((kAlign - a % kAlign) % kAlign);
}

// As v2::grouped_fwd_gate_up_kernel (grid (ceil(f / 64), row-tile slots)); smem kSmemBytes.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_fwd_gate_up_kernel(const bf16_t* x, const int32_t* gatherIndex, const bf16_t* gate,
                               const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                               const int32_t* tileStart, int numExperts, GluDeviceParams glu,
                               bf16_t* gatePre, bf16_t* upPre, bf16_t* hidden) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  unsigned char* smem = alignedSmem(smemRaw);
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * v2::kGateUpCols;
  const int kTiles = int((d + kBK - 1) / kBK);
  v2::RowsLoader la;
  la.init(x, nullptr, d, gatherIndex, tile.begin, tile.end, d, kTiles);
  v2::GateUpLoader lb;
  const int64_t w0 = int64_t(tile.expert) * f * d;
  lb.init(gate + w0, up + w0, d, nullptr, n0, f, d, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  v2::gateUpEpilogue(smem, tile, n0, f, glu, gatePre, upPre, hidden);
}

// As v2::grouped_fwd_down_kernel (grid (ceil(d / 128), row-tile slots)); smem kSmemBytes.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_fwd_down_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d, int64_t f,
                            const int32_t* offsets, const int32_t* tileStart, int numExperts,
                            const float* rowWeight, bf16_t* y) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  unsigned char* smem = alignedSmem(smemRaw);
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  v2::RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  v2::WeightNKLoader lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0, d, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  v2::downEpilogue(smem, tile, n0, d, rowWeight, y);
}

// v2::rowWeightEpilogue with its global loads batched (round 2, grouped_gemm_03.md): v2's loop
// runs each warp's 32 rows one after another, each row a dependent outputIndex load, then the dy
// load, then the reduction: 64 serial global round trips per warp after the mainloop. Here lane l
// reads the output index of the warp's l-th row once, and the dy loads of kBatch rows are issued
// before any is used. Per row the same products, the same order and the same shuffle tree as v2,
// so bitwise the same partial sums.
__device__ __forceinline__ void rowWeightEpilogueBatched(const unsigned char* smem,
                                                         const RowTile& tile, int64_t n0,
                                                         int64_t d, const bf16_t* dy,
                                                         const int32_t* outputIndex,
                                                         float* partialTile) {
  constexpr int kWarps = kThreads / 32, kRowsPerWarp = kBM / kWarps, kBatch = 8;
  static_assert(kRowsPerWarp == 32, "one output index per lane");
  const float* s = reinterpret_cast<const float*>(smem);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t col = n0 + lane * 4;
  const int64_t laneRow = tile.begin + warp + lane * kWarps;  // row t of this warp: lane t's
  const int32_t laneIndex = laneRow < tile.end ? outputIndex[laneRow] : 0;
  for (int t0 = 0; t0 < kRowsPerWarp; t0 += kBatch) {
    if (tile.begin + warp + t0 * kWarps >= tile.end) break;  // warp-uniform
    uint2 raw[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t r = tile.begin + warp + (t0 + b) * kWarps;
      const int64_t src = __shfl_sync(0xffffffffu, laneIndex, t0 + b);
      raw[b] = make_uint2(0u, 0u);
      if (r < tile.end && col < d) raw[b] = *reinterpret_cast<const uint2*>(dy + src * d + col);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = warp + (t0 + b) * kWarps;
      const int64_t r = tile.begin + i;
      if (r >= tile.end) break;  // warp-uniform
      float sum = 0.0f;
      if (col < d) {
        const float4 v = *reinterpret_cast<const float4*>(s + i * v2::kEpiLd + lane * 4);
        const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(&raw[b]);
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
}

// dRowWeight part 1 (grouped_bwd_rowweight_batched_kernel): the down product of a row tile, then
// the per-row dot with dy (rowWeightEpilogueBatched, round 2).
__device__ __forceinline__ void rowWeightBody(const bf16_t* hidden, const bf16_t* down,
                                              int64_t d, int64_t f, const int32_t* offsets,
                                              const int32_t* tileStart, int numExperts,
                                              const bf16_t* dy, const int32_t* outputIndex,
                                              int64_t maxRows, float* partial,
                                              unsigned char* smem) {
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((f + kBK - 1) / kBK);
  v2::RowsLoader la;
  la.init(hidden, nullptr, f, nullptr, tile.begin, tile.end, f, kTiles);
  v2::WeightNKLoader lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, n0, d, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  float* partialTile = partial + int64_t(blockIdx.x) * maxRows;
  rowWeightEpilogueBatched(smem, tile, n0, d, dy, outputIndex, partialTile);
}

// dRowWeight part 1 as v2::grouped_bwd_rowweight_kernel (grid (ceil(d / 128), row-tile slots);
// partial [ceil(d / 128), maxRows]); smem kSmemBytes. Round 2: the epilogue's global loads
// batched (rowWeightEpilogueBatched); round 1 (v2's epilogue, the same bits) is gone.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_rowweight_batched_kernel(const bf16_t* hidden, const bf16_t* down, int64_t d,
                                         int64_t f, const int32_t* offsets,
                                         const int32_t* tileStart, int numExperts,
                                         const bf16_t* dy, const int32_t* outputIndex,
                                         int64_t maxRows, float* partial) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  rowWeightBody(hidden, down, d, f, offsets, tileStart, numExperts, dy, outputIndex, maxRows,
                partial, alignedSmem(smemRaw));
}

// As v2::grouped_bwd_dh_kernel (grid (ceil(f / 128), row-tile slots)); smem kSmemBytes. The
// weight tile (down [d, f] read [K, N]) is MN-major.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_dh_kernel(const bf16_t* dY, const bf16_t* down, int64_t d, int64_t f,
                          const int32_t* offsets, const int32_t* tileStart, int numExperts,
                          GluDeviceParams glu, const bf16_t* gatePre, const bf16_t* upPre,
                          bf16_t* dGate, bf16_t* dUp) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  unsigned char* smem = alignedSmem(smemRaw);
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((d + kBK - 1) / kBK);
  v2::RowsLoader la;
  la.init(dY, nullptr, d, nullptr, tile.begin, tile.end, d, kTiles);
  LoadKRowsMn lb;
  lb.init(down + int64_t(tile.expert) * d * f, nullptr, f, nullptr, 0, d, n0, f, kTiles);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  v2::dhEpilogue(smem, tile, n0, f, glu, gatePre, upPre, dGate, dUp);
}

// As v2::grouped_bwd_dx_kernel (grid (ceil(d / 128), row-tile slots); K = 2 f, dg then du);
// smem kSmemBytes. The weight tiles (gate / up [f, d] read [K, N]) are MN-major.
__global__ void __launch_bounds__(kThreads, 2)
    grouped_bwd_dx_kernel(const bf16_t* dGate, const bf16_t* dUp, const bf16_t* gate,
                          const bf16_t* up, int64_t d, int64_t f, const int32_t* offsets,
                          const int32_t* tileStart, int numExperts, bf16_t* dx) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  unsigned char* smem = alignedSmem(smemRaw);
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, int(blockIdx.y), tile)) return;
  const int64_t n0 = int64_t(blockIdx.x) * kBN;
  const int kTilesPart = int((f + kBK - 1) / kBK);
  v2::RowsLoader la;
  la.init(dGate, dUp, f, nullptr, tile.begin, tile.end, f, kTilesPart);
  LoadKRowsMn lb;
  const int64_t w0 = int64_t(tile.expert) * f * d;
  lb.init(gate + w0, up + w0, d, nullptr, 0, f, n0, d, kTilesPart);
  Accum acc;
  mainloop(smem, la, lb, 2 * kTilesPart, acc);
  stageAccum(smem, acc);
  v2::dxEpilogue(smem, tile, n0, d, dx);
}

// grad[e] += A_e^T B_e (grouped_wgrad_prefetch_kernel): B through LoadKRowsMnPrefetch (round 2:
// bIndex read one K tile ahead; round 1 read it with the tile, the same bits, and is gone).
__device__ __forceinline__ void wgradBody(const bf16_t* a, const bf16_t* b, const int32_t* bIndex,
                                          int64_t mSize, int64_t nSize, const int32_t* offsets,
                                          const int32_t* expertOrder, float* grad,
                                          unsigned char* smem) {
  const int e = expertOrder != nullptr ? int(expertOrder[blockIdx.z]) : int(blockIdx.z);
  const int64_t rowBegin = offsets[e], rowEnd = offsets[e + 1];
  if (rowEnd <= rowBegin) return;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  const int kTiles = int((rowEnd - rowBegin + kBK - 1) / kBK);
  LoadKRowsMn la;
  la.init(a, nullptr, mSize, nullptr, rowBegin, rowEnd, m0, mSize, kTiles);
  LoadKRowsMnPrefetch lb;
  lb.init(b, nullptr, nSize, bIndex, rowBegin, rowEnd, n0, nSize, kTiles);
  lb.prefetch(0);
  Accum acc;
  mainloop(smem, la, lb, kTiles, acc);
  stageAccum(smem, acc);
  v2::wgradEpilogue(smem, m0, n0, mSize, nSize, grad + int64_t(e) * mSize * nSize);
}

// As v2::grouped_wgrad_kernel: grad[e] (mSize x nSize, fp32) += A_e^T B_e over expert e's rows,
// a [N k, mSize], b [N k or N, nSize] (through bIndex); grid (ceil(nSize / 128), ceil(mSize /
// 128), experts), expertOrder (or null) maps blockIdx.z to the expert; smem kSmemBytes. Both
// operands are read [K, M] / [K, N] (K = the expert's rows): both MN-major; bIndex is read one K
// tile ahead (LoadKRowsMnPrefetch).
__global__ void __launch_bounds__(kThreads, 2)
    grouped_wgrad_prefetch_kernel(const bf16_t* a, const bf16_t* b, const int32_t* bIndex,
                                  int64_t mSize, int64_t nSize, const int32_t* offsets,
                                  const int32_t* expertOrder, float* grad) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  wgradBody(a, b, bIndex, mSize, nSize, offsets, expertOrder, grad, alignedSmem(smemRaw));
}

}  // namespace moewb::engine::cuda::grouped::wg
