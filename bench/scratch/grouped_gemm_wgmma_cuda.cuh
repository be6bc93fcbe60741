// Grouped expert GEMMs, EXPERIMENTAL wgmma mainloop (sm_90a only; benchmark-only this round, not
// built by the engine: the engine targets sm_90, see bench/scratch/grouped_gemm_01.md, round 2).
// For the stages whose two operands are both K-contiguous (forward gate+up and down): the v2
// loaders (grouped_gemm_v2_cuda.cuh) already write each 128 x 64 bf16 tile as rows of 128 bytes
// with 16-byte chunk c of row r at chunk c ^ (r % 8), which is the wgmma 128-byte-swizzle K-major
// layout when the tile starts on a 1024-byte boundary. One warpgroup (128 threads) per 128 x 128
// CTA tile issues, per 16-deep K slice, two wgmma.m64n128k16 (rows 0..63 and 64..127) reading A and
// B from shared memory; fp32 accumulators in registers (2 x 64 per thread). Pipeline: v2's
// 3-stage cp.async (all threads load), fence.proxy.async + barrier before the wgmma batch of a
// stage, wgmma.wait_group 0 at the end of each stage (the second CTA on the SM covers the wait).
// Epilogues: v2's (staged through shared memory). Accumulation order per element: k16 slices in
// K order, as v1 / v2; the wgmma hardware's internal order within a slice may differ from
// mma.sync's, so results may differ from v1 / v2 in the last bits (the benchmark checks against
// the fp32 reference, and reports the difference from v2).
//
// Defines __global__ functions: include from ONE translation unit compiled for sm_90a
// (-gencode=arch=compute_90a,code=sm_90a); elsewhere the kernels trap.
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
// d (m64 x n128, fp32) += A (64 x 16 at descA) B^T (128 x 16 at descB), both K-major.
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
      "%64, %65, p, 1, 1, 0, 0;\n"
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
      : "l"(descA), "l"(descB), "r"(scaleD));
}
#endif

// acc = A B over kTiles K tiles; smem 1024-byte aligned, v2::kSmemBytes. Leaves the pipeline
// drained and the CTA synchronised.
template <class LoadA, class LoadB>
__device__ __forceinline__ void mainloop(unsigned char* smem, const LoadA& la, const LoadB& lb,
                                         int kTiles, Accum& acc) {
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
      const uint64_t db = descSw128(b + uint32_t(s * 32));
      wgmma128(acc[0], descSw128(a + uint32_t(s * 32)), db);
      wgmma128(acc[1], descSw128(a + uint32_t(64 * 128 + s * 32)), db);
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

}  // namespace moewb::engine::cuda::grouped::wg
