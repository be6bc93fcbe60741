// Grouped expert GEMMs, round 7 (issue 14; bench/scratch/grouped_gemm_07.md): forward gate+up
// with the GLU epilogue (fc1) and dh with the GLU-backward epilogue on a warp-specialized
// persistent kernel with PING-PONG consumers (sm_90a only). Round 5's cooperative kernel
// (grouped_gemm_ws_cuda.cuh) runs both consumers' epilogues at once with the tensor cores idle;
// here each consumer owns whole tiles, so one consumer's epilogue runs while the other's
// mainloop keeps the tensor cores busy.
//  - 384 threads = 3 warpgroups, one CTA per SM, persistent: CTA b walks tiles b, b + gridDim.x,
//    ...; its j-th tile goes to consumer j % 2. Warpgroup 0 is the producer (setmaxnreg.dec): per
//    64-deep K step its 128 threads copy the A tile (gathered rows) with cp.async and thread 0
//    loads the B tile by TMA (expect_tx on the stage's full barrier: 128 noinc arrivals + 1).
//    The producer fills the ring in tile order. The consumers pass a TOKEN (named barriers 1
//    and 2): a consumer starts waiting on tile j's full barriers only after the other consumer
//    has passed every full barrier of tile j - 1. Without it a consumer whose own previous tile
//    ended more than kStages steps back waits on a parity that is already satisfied by an older
//    phase and reads a stage that was never filled (the H200 hang of many_tiles, K steps 9 > 5;
//    bench/scratch/grouped_gemm_07.md, "H200 call 1: hang").
//  - Tiles exactly round 2's (grouped_gemm_wgmma_cuda.cuh): 128 rows x 128 columns, per k16
//    slice two wgmma.m64n128k16 (rows 0..63, 64..127), acc[2][64] fp32 per consumer thread, the
//    same K order per element, so the same bits. fc1: columns 0..63 gate, 64..127 up of f columns
//    n0..n0+63 (the GLU pairs acc[h][i] with acc[h][i + 32] in one thread); dh: 128 f columns,
//    B (down [E, d, f] read [K = d, N = f]) MN-major, two 64-wide atoms of 8 KB.
//  - Ring: kStages stages of A 16 KB + B 16 KB; each consumer keeps one wgmma batch queued
//    (wait_group 1) and releases the previous step's slot (one arrival per warp: 4).
//  - Epilogues from registers with round 2's per-element arithmetic (gluForwardDevice /
//    gluBackwardDevice on bf16 g / u, __floats2bfloat162_rn), bf16x2 stores. dh: the producer
//    prefetches the tile's gatePre / upPre lines to L2 a few K steps before the tile ends; the
//    epilogue loads the next 8 column groups before the current group's math and stores.
// Shape rules as round 2: D % 8 == 0, F % 8 == 0, 16-byte aligned bases. Rows >= the expert's
// end are not written; deterministic (fixed tile order, no atomics).
//
// Needs MOEWB_WS_TMA_B 1 (round 5's TMA helpers). Defines __global__ functions: include from ONE
// translation unit compiled for sm_90a (the engine's experts_wgmma_cuda.cu, grouped_gemm_07.cu).
// Launch: grid = multiprocessor count (or fewer; any positive count is correct), kThreads
// threads, kSmemBytes dynamic smem (cudaFuncSetAttribute first); Params from encodeMaps().
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/grouped_gemm_ws_cuda.cuh"

#if !MOEWB_WS_TMA_B
#error "grouped_gemm_ws_pingpong_cuda.cuh needs MOEWB_WS_TMA_B 1 (B by TMA)"
#endif

namespace moewb::engine::cuda::grouped::pp {

using grouped::bf16_t;

constexpr int kBM = 128;  // output rows per tile (v1's row-tile schedule)
constexpr int kBN = 128;  // output columns per tile (gate+up: 64 of g and 64 of u)
constexpr int kBK = 64;   // K step: one 128-byte swizzle row
// MOEWB_PP_STAGES: ring depth (32 KB a stage; 7 is the most that fits 227 KB).
#ifndef MOEWB_PP_STAGES
#define MOEWB_PP_STAGES 6
#endif
// MOEWB_PP_EPI_PREFETCH: dh, K steps before a tile's end at which the producer prefetches its
// gatePre / upPre lines to L2 (0: off).
#ifndef MOEWB_PP_EPI_PREFETCH
#define MOEWB_PP_EPI_PREFETCH 6
#endif
constexpr int kStages = MOEWB_PP_STAGES;
static_assert(kStages >= 2 && kStages <= 7, "ring depth 2..7 (32 KB a stage)");
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // producer + 2 consumers
constexpr int kProducerRegs = 56;
constexpr int kConsumerRegs = 224;
static_assert(kWarpgroup * (kProducerRegs + 2 * kConsumerRegs) <= 65536, "register file");
constexpr int kATileBytes = kBM * kBK * 2;  // 16 KB
constexpr int kBTileBytes = kBN * kBK * 2;  // 16 KB
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kAlign = 1024;  // 128-byte swizzle atom
constexpr int kSmemBytes = kStages * kStageBytes + kAlign;
constexpr int kMnAtomBytes = kBK * 128;  // one 64-wide MN-major atom: 8 KB
static_assert(kMnAtomBytes == wg::kMnHalfBytes, "round 2's MN-major descriptor applies");
static_assert(kBM == grouped::kBM, "row-tile schedule shared with v1");

// The two stages of this header.
enum class Stage { kGateUp, kDh };

// Kernel arguments (by value). Shapes (R = offsets[numExperts] permuted rows, E experts):
//  kGateUp: a = x [tokens or R, d] through gather (or null: row r), B maps over gate / up
//           [E, f, d]; out1 / out2 / out3 = gatePre / upPre / hidden [R, f].
//  kDh:     a = dY [R, d], B map over down [E, d, f] (read [K = d, N = f]); gatePre / upPre
//           [R, f]; out1 / out2 = dGate / dUp [R, f].
struct Params {
  const bf16_t* a = nullptr;
  const int32_t* gather = nullptr;
  int64_t d = 0, f = 0;
  const int32_t* offsets = nullptr;    // [E + 1]
  const int32_t* tileStart = nullptr;  // [E + 1], grouped_schedule_kernel with tileRows kBM
  int numExperts = 0;
  GluDeviceParams glu;
  const bf16_t* gatePre = nullptr;
  const bf16_t* upPre = nullptr;
  bf16_t* out1 = nullptr;
  bf16_t* out2 = nullptr;
  bf16_t* out3 = nullptr;
  CUtensorMap mapB1;  // kGateUp: gate; kDh: down
  CUtensorMap mapB2;  // kGateUp: up; kDh: unused
};

// Fills p.mapB1 (and p.mapB2 for kGateUp) over the weights b1 / b2 for stage kS from p.d, p.f,
// p.numExperts: 3-D bf16 maps {inner, rows, E}, 128-byte swizzle (the smem layouts of the
// header comment), zero fill out of bounds. Boxes {64, 64}: K-major gate / up halves (kGateUp)
// or one MN-major atom (kDh). cudaErrorInvalidValue when the driver has no
// cuTensorMapEncodeTiled or rejects a map (unaligned base, d or f not a multiple of 8).
template <Stage kS>
inline cudaError_t encodeMaps(Params& p, const bf16_t* b1, const bf16_t* b2) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = ws::tensorMapEncoder();
  if (encode == nullptr) return cudaErrorInvalidValue;
  const bool gateUp = kS == Stage::kGateUp;  // gate / up [E, f, d]; down [E, d, f]
  const uint64_t inner = uint64_t(gateUp ? p.d : p.f), rows = uint64_t(gateUp ? p.f : p.d);
  const cuuint64_t dims[3] = {inner, rows, cuuint64_t(p.numExperts)};
  const cuuint64_t strides[2] = {inner * 2, inner * rows * 2};
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const bf16_t* srcs[2] = {b1, b2};
  CUtensorMap* maps[2] = {&p.mapB1, &p.mapB2};
  for (int i = 0; i < (gateUp ? 2 : 1); ++i) {
    const CUresult r =
        encode(maps[i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16_t*>(srcs[i]), dims,
               strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// Per-stage geometry derived from Params (K = d for both stages).
template <Stage kS>
struct Geometry {
  int kTiles;    // K steps per tile
  int colTiles;  // column tiles per row tile
  int64_t colWidth;

  __device__ __forceinline__ explicit Geometry(const Params& p) {
    kTiles = int((p.d + kBK - 1) / kBK);
    colWidth = kS == Stage::kGateUp ? kBN / 2 : kBN;
    colTiles = int((p.f + colWidth - 1) / colWidth);
  }
};

#if MOEWB_GROUPED_HAS_WGMMA
// ---------------------------------------------------------------------------------------------
// Producer (warpgroup 0).

struct ProducerTile {
  int32_t aRow[8];  // this thread's 8 A source rows (-1: outside the expert, zero fill)
  int64_t begin = 0, end = 0;
  int n0 = 0;
  int expert = 0;
};

template <Stage kS>
__device__ __forceinline__ void lookupTile(const Params& p, const Geometry<kS>& g, int id,
                                           ProducerTile& pt) {
  RowTile tile;
  findRowTile(p.offsets, p.tileStart, p.numExperts, id / g.colTiles, tile);
  pt.begin = tile.begin;
  pt.end = tile.end;
  pt.expert = tile.expert;
  pt.n0 = int((id % g.colTiles) * g.colWidth);
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int64_t logical = tile.begin + int(threadIdx.x) / 8 + q * (kWarpgroup / 8);
    pt.aRow[q] = logical >= tile.end
                     ? -1
                     : int32_t(p.gather != nullptr ? int64_t(__ldg(p.gather + logical)) : logical);
  }
}

// dh: the tile's gatePre / upPre lines (128 rows x 128 columns x 2 tensors) to L2; thread t:
// row t, two 128-byte lines of each tensor.
__device__ __forceinline__ void prefetchDhEpilogue(const Params& p, const ProducerTile& pt) {
  const int64_t r = pt.begin + int(threadIdx.x);
  if (r >= pt.end) return;
#pragma unroll
  for (int l = 0; l < kBN / 64; ++l) {
    const int64_t col = pt.n0 + l * 64;
    if (col >= p.f) break;
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.gatePre + r * p.f + col));
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.upPre + r * p.f + col));
  }
}

// One K step into the stage at shared address `a` (A at a, B at a + kATileBytes): A rows by
// cp.async (K-major 128-byte swizzle, zero fill outside the expert and past d), B by TMA from
// thread 0 with the stage's 16 KB transaction on fullBar.
template <Stage kS>
__device__ __forceinline__ void copyStep(const Params& p, const ProducerTile& pt, uint32_t a,
                                         int kt, uint32_t fullBar) {
  const int t = int(threadIdx.x), c = t % 8;
  const int64_t kLocal = int64_t(kt) * kBK;
  // Rows i = t / 8 + 16 q: i % 8 is the same for every q, so the swizzled chunk too.
  const uint32_t rowOff = uint32_t((t / 8) * 128 + ((c ^ ((t / 8) & 7)) << 4));
  const bf16_t* base = p.a + kLocal + c * 8;
  const bool kOk = kLocal + c * 8 < p.d;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const bool ok = kOk && pt.aRow[q] >= 0;
    cpAsync16Fenced(a + rowOff + uint32_t(q * 2048), ok ? base + int64_t(pt.aRow[q]) * p.d : p.a,
                   ok);
  }
  if (t == 0) {
    const uint32_t b = a + uint32_t(kATileBytes);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(fullBar),
                 "r"(kBTileBytes)
                 : "memory");
    const int e = pt.expert, k = int(kLocal), n = pt.n0;
    if constexpr (kS == Stage::kGateUp) {  // rows 0..63 gate, 64..127 up (K-major)
      ws::tmaLoad3d(b, &p.mapB1, k, n, e, fullBar);
      ws::tmaLoad3d(b + uint32_t(kBTileBytes / 2), &p.mapB2, k, n, e, fullBar);
    } else {  // two MN-major atoms: N n..n+63, n+64..n+127 of K rows k..k+63
      ws::tmaLoad3d(b, &p.mapB1, n, k, e, fullBar);
      ws::tmaLoad3d(b + uint32_t(kMnAtomBytes), &p.mapB1, n + 64, k, e, fullBar);
    }
  }
}

template <Stage kS>
__device__ __forceinline__ void produce(const Params& p, const Geometry<kS>& g, uint32_t smem,
                                        uint32_t fullBar, uint32_t emptyBar) {
  const int total = p.tileStart[p.numExperts] * g.colTiles;
  uint32_t it = 0;  // K steps issued by this CTA (ring slot and phase)
  int id = int(blockIdx.x);
  ProducerTile cur;
  if (id < total) lookupTile<kS>(p, g, id, cur);
  const int prefetchAt = g.kTiles > MOEWB_PP_EPI_PREFETCH ? g.kTiles - MOEWB_PP_EPI_PREFETCH : 0;
  for (; id < total; id += int(gridDim.x)) {
    ProducerTile next;
    const bool hasNext = id + int(gridDim.x) < total;
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      // The next tile's index loads go out before this step's empty wait (their latency hides
      // under the ring's lead).
      if (kt == g.kTiles - 1 && hasNext) lookupTile<kS>(p, g, id + int(gridDim.x), next);
      if (kS == Stage::kDh && MOEWB_PP_EPI_PREFETCH > 0 && kt == prefetchAt)
        prefetchDhEpilogue(p, cur);
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      ws::mbarWait(emptyBar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
      copyStep<kS>(p, cur, smem + s * uint32_t(kStageBytes), kt, fullBar + 8 * s);
      ws::cpAsyncArriveNoinc(fullBar + 8 * s);
    }
    if (hasNext) cur = next;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the producer
}
#endif  // MOEWB_GROUPED_HAS_WGMMA

// ---------------------------------------------------------------------------------------------
// Epilogues from one consumer's accumulators (whole 128 x 128 tile). Fragment i of half h
// (m64n128): row 64 h + 16 (warp % 4) + lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) +
// 2 (lane % 4) + i % 2. Per element round 2's (v2's) arithmetic.

// fc1: gatePre / upPre / hidden [R, f] = bf16(g), bf16(u), bf16(glu(g, u)) (v2::gateUpEpilogue).
__device__ __forceinline__ void gateUpEpilogue(const Params& p, const RowTile& tile, int64_t n0,
                                               const float (&acc)[2][64]) {
  const int warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int64_t r = tile.begin + h * 64 + warp * 16 + lane / 4 + q * 8;
      if (r >= tile.end) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t col = n0 + j * 8 + (lane % 4) * 2;
        if (col >= p.f) continue;
        const int i = 4 * j + 2 * q;
        const float g0 = acc[h][i], g1 = acc[h][i + 1];
        const float u0 = acc[h][i + 32], u1 = acc[h][i + 33];
        const int64_t at = r * p.f + col;
        storeBf16x2(p.out1 + at, g0, g1);
        storeBf16x2(p.out2 + at, u0, u1);
        storeBf16x2(p.out3 + at, gluForwardDevice(p.glu, g0, u0), gluForwardDevice(p.glu, g1, u1));
      }
    }
}

// dh: (dGate, dUp) [R, f] = bf16(glu backward at the saved bf16 (g, u) with dh = acc)
// (v2::dhEpilogue). Loads of gatePre / upPre kChunk column groups at a time, the next chunk's
// issued before the current chunk's math and stores (the compiler would not hoist them above
// stores to a possibly aliasing out1 / out2).
__device__ __forceinline__ void dhEpilogue(const Params& p, const RowTile& tile, int64_t n0,
                                           const float (&acc)[2][64]) {
  constexpr int kChunk = 8, kGroups = kBN / 8;  // column groups of 8 per row
  const int warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  const int64_t f = p.f;
  auto load = [&](int64_t r, int j0, __nv_bfloat162 (&gp)[kChunk], __nv_bfloat162 (&up)[kChunk]) {
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj) {
      const int64_t col = n0 + (j0 + jj) * 8 + (lane % 4) * 2;
      if (r < tile.end && col < f) {
        gp[jj] = __ldg(reinterpret_cast<const __nv_bfloat162*>(p.gatePre + r * f + col));
        up[jj] = __ldg(reinterpret_cast<const __nv_bfloat162*>(p.upPre + r * f + col));
      }
    }
  };
  // Sequence of (row pair hq, chunk) steps: 4 rows x 2 chunks.
  constexpr int kSteps = 4 * (kGroups / kChunk);
  __nv_bfloat162 gp[2][kChunk], up[2][kChunk];
  auto rowOf = [&](int step) {
    const int hq = step / (kGroups / kChunk), h = hq / 2, q = hq % 2;
    return tile.begin + h * 64 + warp * 16 + lane / 4 + q * 8;
  };
  load(rowOf(0), 0, gp[0], up[0]);
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    const int buf = step % 2;
    if (step + 1 < kSteps)
      load(rowOf(step + 1), ((step + 1) % (kGroups / kChunk)) * kChunk, gp[buf ^ 1], up[buf ^ 1]);
    const int hq = step / (kGroups / kChunk), h = hq / 2, q = hq % 2;
    const int j0 = (step % (kGroups / kChunk)) * kChunk;
    const int64_t r = rowOf(step);
    if (r >= tile.end) continue;
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj) {
      const int j = j0 + jj;
      const int64_t col = n0 + j * 8 + (lane % 4) * 2;
      if (col >= f) continue;
      const int i = 4 * j + 2 * q;
      float dg0, du0, dg1, du1;
      gluBackwardDevice(p.glu, __low2float(gp[buf][jj]), __low2float(up[buf][jj]), acc[h][i], dg0,
                        du0);
      gluBackwardDevice(p.glu, __high2float(gp[buf][jj]), __high2float(up[buf][jj]),
                        acc[h][i + 1], dg1, du1);
      const int64_t at = r * f + col;
      storeBf16x2(p.out1 + at, dg0, dg1);
      storeBf16x2(p.out2 + at, du0, du1);
    }
  }
}

#if MOEWB_GROUPED_HAS_WGMMA
__device__ __forceinline__ void fenceAcc(float (&acc)[2][64]) {
  wg::fenceOperand(acc[0]);
  wg::fenceOperand(acc[1]);
}

// The consumers' token. Named barrier 1 + c means "consumer c may start its next tile": the other
// consumer arrives (bar.arrive, 128 threads), consumer c waits (bar.sync, its 128 threads), 256 in
// all. The turns strictly alternate, so a barrier never sees a second arrival before its sync.
// Immediate ids (cw is warp-uniform), so ptxas reserves barriers 0..2 only.
constexpr int kTokenThreads = 2 * kWarpgroup;
__device__ __forceinline__ void tokenWait(int cw) {
  if (cw == 0) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kTokenThreads) : "memory");
  } else {
    asm volatile("bar.sync 2, %0;\n" ::"n"(kTokenThreads) : "memory");
  }
}
__device__ __forceinline__ void tokenPass(int cw) {  // to the other consumer, 1 - cw
  if (cw == 0) {
    asm volatile("bar.arrive 2, %0;\n" ::"n"(kTokenThreads) : "memory");
  } else {
    asm volatile("bar.arrive 1, %0;\n" ::"n"(kTokenThreads) : "memory");
  }
}

// Consumer cw (0 or 1): the CTA's tiles j = cw, cw + 2, ...; per K step wait full, 4 k16 slices
// x 2 m64n128k16 (round 2's batch), keep it queued, release the previous step's slot.
// Why the token makes every full-barrier wait exact: a parity wait for the fill of ring step it
// is only unambiguous once the fill of step it - kStages (same slot, previous phase) is complete.
// Within a tile that step is this consumer's own (kt >= kStages) or, for the first kStages
// steps, in an earlier tile whose fills the other consumer (tile j - 1) or this one (j - 2) has
// already passed: the token orders this tile's first wait after the other's last one.
template <Stage kS>
__device__ __forceinline__ void consume(const Params& p, const Geometry<kS>& g, uint32_t smem,
                                        uint32_t fullBar, uint32_t emptyBar) {
  constexpr int kTb = kS == Stage::kDh ? 1 : 0;  // dh: B MN-major
  const int cw = int(threadIdx.x) / kWarpgroup - 1;
  const bool releaser = int(threadIdx.x) % 32 == 0;  // one arrival per warp of this consumer
  const int total = p.tileStart[p.numExperts] * g.colTiles;
  float acc[2][64];
  for (int j = cw;; j += 2) {
    const int id = int(blockIdx.x) + j * int(gridDim.x);
    if (id >= total) break;
    RowTile tile;
    findRowTile(p.offsets, p.tileStart, p.numExperts, id / g.colTiles, tile);
    const int64_t n0 = int64_t(id % g.colTiles) * g.colWidth;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
    uint32_t it = uint32_t(j) * uint32_t(g.kTiles), prev = 0;
    if (j > 0) tokenWait(cw);  // the other consumer passed tile j - 1's full barriers
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      ws::mbarWait(fullBar + 8 * s, phase);
      wg::fenceProxyAsync();  // the cp.async (generic proxy) A bytes, for wgmma's reads
      const uint32_t a = smem + s * uint32_t(kStageBytes);
      const uint32_t b = a + uint32_t(kATileBytes);
      fenceAcc(acc);
      wg::wgmmaFence();
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        const uint64_t db = kTb ? wg::descMn128(b + uint32_t(k16 * 16 * 128))
                                : wg::descSw128(b + uint32_t(k16 * 32));
        wg::wgmma128<0, kTb>(acc[0], wg::descSw128(a + uint32_t(k16 * 32)), db);
        wg::wgmma128<0, kTb>(acc[1], wg::descSw128(a + uint32_t(64 * 128 + k16 * 32)), db);
      }
      wg::wgmmaCommit();
      ws::wgmmaWait<1>();  // step kt - 1's batch has retired: its slot is free
      fenceAcc(acc);
      if (kt > 0 && releaser) ws::mbarArrive(emptyBar + 8 * prev);
      prev = s;
    }
    // Tile j + 1 (the other consumer's) may start its waits; no pass when it does not exist, so
    // no barrier is left half-arrived at exit.
    if (id + int(gridDim.x) < total) tokenPass(cw);
    ws::wgmmaWait<0>();
    fenceAcc(acc);
    if (releaser) ws::mbarArrive(emptyBar + 8 * prev);
    if constexpr (kS == Stage::kGateUp) {
      gateUpEpilogue(p, tile, n0, acc);
    } else {
      dhEpilogue(p, tile, n0, acc);
    }
  }
}
#endif

// One persistent kernel per stage (Params documents the operands). Grid: at most the
// multiprocessor count (any positive count is correct); kThreads threads; kSmemBytes dynamic
// shared memory. Rows >= offsets[numExperts] are not written.
template <Stage kS>
__global__ void __launch_bounds__(kThreads, 1) grouped_pp_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];  // full[kStages], empty[kStages]
#if MOEWB_GROUPED_HAS_WGMMA
  unsigned char* smem = wg::alignedSmem(smemRaw);
  const uint32_t fullBar = smemAddr(&bars[0]), emptyBar = smemAddr(&bars[kStages]);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ws::mbarInit(fullBar + 8 * s, kWarpgroup + 1);  // noinc per producer thread + expect_tx
      ws::mbarInit(emptyBar + 8 * s, 4);              // one arrival per warp of one consumer
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const Geometry<kS> g(p);
  const int role = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroup, 0);
  if (role == 0) {
    ws::setMaxRegsDec<kProducerRegs>();
    produce<kS>(p, g, smemAddr(smem), fullBar, emptyBar);
  } else {
    ws::setMaxRegsInc<kConsumerRegs>();
    consume<kS>(p, g, smemAddr(smem), fullBar, emptyBar);
  }
#else
  (void)bars;
  __trap();
#endif
}

}  // namespace moewb::engine::cuda::grouped::pp
