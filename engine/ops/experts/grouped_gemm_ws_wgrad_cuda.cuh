// Grouped expert weight gradients, round 6 (issue 14; bench/scratch/grouped_gemm_06.md): a
// warp-specialized persistent wgmma kernel (sm_90a only) for grad[e] += A_e^T B_e, the K-grouped
// GEMM of the three expert weight gradients (dDown = dY^T h, dGate = dG^T x[gather], dUp =
// dU^T x[gather]). Same inputs, output and numerics contract as round 2's
// grouped_wgrad_prefetch_kernel (grouped_gemm_wgmma_cuda.cuh), on round 5's CTA organisation
// (grouped_gemm_ws_cuda.cuh):
//  - 384 threads = 3 warpgroups. Warpgroup 0, the producer (setmaxnreg.dec), fills per 64-deep
//    K step (64 of the expert's rows) a kStages-deep ring with the A tile [64 K][256 M] and the
//    B tile [64 K][128 N], both in the 128-byte-swizzle MN-major layout (64-wide atoms of 8 KB,
//    chunk c of K row k at c ^ (k % 8)). A (the rows a[r], never gathered) comes by TMA, four
//    {64 M, 64 K} boxes from one thread, on every K step whose 64 rows all belong to the expert;
//    the expert's last, partial K step (and every step when the map cannot be encoded) copies A
//    with cp.async instead, rows past the expert's end zero-filled, so TMA never reads past the
//    expert (no map bound on the row count is needed) and the tile bytes equal round 2's
//    LoadKRowsMn's. B (rows through bIndex when set) always comes by cp.async, zero-filled past
//    the expert's end: 8 copies of 16 bytes per producer thread per step. The stage's full
//    barrier expects 128 cp.async noinc arrivals + 1 arrival of thread 0 (with the TMA bytes
//    when A came by TMA), which first writes the stage's tile record when a tile starts there.
//  - Warpgroups 1 and 2, the consumers (setmaxnreg.inc), own rows 0..127 / 128..255 of the
//    256 x 128 output tile: per 16-deep K slice two wgmma.m64n128k16 (its two 64-row halves
//    against the whole B tile), both operands MN-major (wgmma's bf16 transpose), exactly round
//    2's instruction and order; fp32 accumulators 2 x 64 per thread; wait_group 0 and release the
//    stage (one arrival per consumer warp); the other consumer keeps the tensor cores busy.
//  - Tile 256 x 128 rather than 128 x 256: the same smem per stage (48 KB) and accumulators, but
//    the non-gathered operand (A) takes the larger half and comes by TMA, so the producer's
//    per-thread copies drop from 24 to 8 per step (round 5: producer copy issue bounded the
//    cp.async variants); and m64n128 is round 2's wgmma shape, so its bits.
//  - Persistent grid (one CTA per SM): CTA b walks tiles b, b + gridDim.x, ... (or, with a
//    zeroed WgradParams::tileCounter, takes its next tile from an atomic ticket; with bySkew too,
//    only when the routing is skewed: dynamicWalk); tile id = expert
//    slot x (m tiles x n tiles) + m tile x n tiles + n tile, slot -> expert through expertOrder
//    (grouped_expert_order_kernel: most rows first) or the identity, so the ~#SMs tiles in flight
//    cover one or two experts whose A and B rows (4-12 MB) stay in L2. The producer alone walks
//    the schedule (offsets read on the device, no host sync), skips empty experts' tiles and
//    hands each tile to the consumers through the ring ({expert, m0, n0, rows} in a per-stage
//    record; rows 0 = no more tiles), so consumers never touch the schedule.
//  - Epilogue from the accumulators: grad[e][m][n] = grad + acc (fp32 read-add-write, round 2's
//    v2::wgradEpilogue per element), kEpiChunk float2 loads in flight before the adds and stores;
//    the producer prefetches the tile's grad lines to L2 kEpiPrefetch K steps before its end.
// Numerics: per element the k16 slices in K order into one fp32 accumulator starting at 0 with
// m64n128k16 (round 2's instruction), then one add to the old gradient, so bitwise round 2's
// (grouped_gemm_06.cu and ExpertsWgmmaCudaTest.WsWgradEqualsRound2Bitwise check it).
// Deterministic: each tile's bits do not depend on the CTA that computes it (the walk's atomic
// tickets only pick the CTA). Empty experts: nothing written (grad += 0, as round
// 2, whose CTAs exit). Shape rules as v1 / v2: mSize % 8 == 0, nSize % 8 == 0, 16-byte aligned
// bases.
//
// Defines __global__ functions: include from ONE translation unit compiled for sm_90a, after the
// round-2 and round-5 headers (experts_wgmma_cuda.cu, bench/scratch/grouped_gemm_06.cu). Launch:
// encodeWgradMapA() on the host, then wgradGrid() CTAs of kThreads threads with kSmemBytes dynamic
// smem (cudaFuncSetAttribute first).
#pragma once

#include <cuda.h>  // CUtensorMap (types only; the encoder comes from cudaGetDriverEntryPoint)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/experts_wgmma_cuda.h"  // expertsWgradSkewed
#include "ops/experts/grouped_gemm_ws_cuda.cuh"

namespace moewb::engine::cuda::grouped::wsw {

using grouped::bf16_t;

constexpr int kBM = 256;  // output rows per tile (two consumers of 128 = 2 x m64)
constexpr int kBN = 128;  // output columns per tile (m64n128)
constexpr int kBK = 64;   // K step: 64 expert rows, one 128-byte swizzle row per MN atom row
// Compile-time variants (-D, grouped_gemm_06.md):
//  MOEWB_WSW_STAGES        ring depth (2..4; 48 KB a stage).
//  MOEWB_WSW_EPI_PREFETCH  the producer prefetches the tile's grad lines to L2 this many K steps
//                          before the tile's end (0: off).
//  MOEWB_WSW_EPI_CHUNK     epilogue float2 loads in flight per batch (1, 2, 4, 8 or 16).
//  MOEWB_WSW_PRODUCER_REGS / MOEWB_WSW_CONSUMER_REGS  the setmaxnreg split (default 72 / 216).
#ifndef MOEWB_WSW_STAGES
#define MOEWB_WSW_STAGES 4
#endif
#ifndef MOEWB_WSW_EPI_PREFETCH
#define MOEWB_WSW_EPI_PREFETCH 8
#endif
#ifndef MOEWB_WSW_EPI_CHUNK
#define MOEWB_WSW_EPI_CHUNK 16
#endif
#ifndef MOEWB_WSW_PRODUCER_REGS
#define MOEWB_WSW_PRODUCER_REGS 72
#endif
#ifndef MOEWB_WSW_CONSUMER_REGS
#define MOEWB_WSW_CONSUMER_REGS 216
#endif
constexpr int kStages = MOEWB_WSW_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "ring depth 2..4 (48 KB a stage)");
constexpr int kEpiPrefetch = MOEWB_WSW_EPI_PREFETCH;
constexpr int kEpiChunk = MOEWB_WSW_EPI_CHUNK;
static_assert(kEpiChunk >= 1 && 16 % kEpiChunk == 0, "epilogue chunk divides 16");
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // producer + 2 consumers
constexpr int kProducerRegs = MOEWB_WSW_PRODUCER_REGS;
constexpr int kConsumerRegs = MOEWB_WSW_CONSUMER_REGS;
// setmaxnreg.inc only takes what .dec released: the split must fit the CTA's launch allocation,
// 168 registers per thread (65536 / 384 rounded down to a multiple of 8).
static_assert(kWarpgroup * (kProducerRegs + 2 * kConsumerRegs) <= 168 * kThreads,
              "register split exceeds the launch allocation");
constexpr int kAtomBytes = kBK * 128;       // one 64-wide MN-major atom: 8 KB
constexpr int kATileBytes = kBM * kBK * 2;  // 32 KB: four atoms (M 0..63, ..., 192..255)
constexpr int kBTileBytes = kBN * kBK * 2;  // 16 KB: two atoms
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kAlign = 1024;  // 128-byte swizzle atom alignment
constexpr int kSmemBytes = kStages * kStageBytes + kAlign;
static_assert(kAtomBytes == wg::kMnHalfBytes, "round 2's MN-major descriptor applies");

// Kernel arguments (by value): grad [E, mSize, nSize] fp32 += a_e^T b_e per expert e, a [R, mSize]
// (row r of expert e for r in offsets[e]..offsets[e + 1]), b [*, nSize] read at row bIndex[r]
// (or r when bIndex is null); expertOrder [E] (or null: identity) orders the experts' tiles.
// tmaA / mapA: set by encodeWgradMapA (false: A by cp.async on every step). tileCounter: null
// (static walk: CTA b takes tiles b, b + gridDim.x, ...) or a device int that is 0 at launch
// (after a CTA's first tile b, tiles come from atomicAdd tickets in order, so hot experts' long
// tiles, first under expertOrder, do not pile up on a fixed set of CTAs); same results either way.
// bySkew (with tileCounter): the dynamic walk only when expertsWgradSkewed holds for the device
// offsets, the static one otherwise (the counter is then left at 0).
struct WgradParams {
  CUtensorMap mapA;  // 2-D {mSize, rows} over a, box {64, 64}, 128-byte swizzle
  const bf16_t* a = nullptr;
  const bf16_t* b = nullptr;
  const int32_t* bIndex = nullptr;
  int64_t mSize = 0, nSize = 0;
  const int32_t* offsets = nullptr;  // [E + 1], device
  const int32_t* expertOrder = nullptr;
  int numExperts = 0;
  float* grad = nullptr;
  int* tileCounter = nullptr;
  bool bySkew = false;
  bool tmaA = false;
};

// Tile counts of a problem (host and device).
struct WgradGeometry {
  int mTiles, nTiles, perExpert, total;
  __host__ __device__ explicit WgradGeometry(const WgradParams& p)
      : mTiles(int((p.mSize + kBM - 1) / kBM)),
        nTiles(int((p.nSize + kBN - 1) / kBN)),
        perExpert(mTiles * nTiles),
        total(p.numExperts * perExpert) {}
};

// CTAs to launch: one per multiprocessor, at most one per tile (0 when there are no tiles).
inline unsigned wgradGrid(const WgradParams& p, int multiprocessors) {
  const int total = WgradGeometry(p).total;
  return unsigned(total < multiprocessors ? total : multiprocessors);
}

// The driver's cuTensorMapEncodeTiled through the runtime (no link dependency on libcuda), looked
// up once per process (thread-safe); null when the driver lacks it. Clears the lookup's error.
inline PFN_cuTensorMapEncodeTiled_v12000 wgradTensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    cudaDriverEntryPointQueryResult q{};
    void* fn = nullptr;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                           cudaEnableDefault, &q);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn != nullptr
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encoder;
}

// Sets p.mapA over p.a ({mSize, 2^31 - 1 rows}: the kernel reads by TMA only K steps whose 64 rows
// all lie inside an expert, so no read passes the last row; columns >= mSize are zero-filled) and
// p.tmaA = true; p.tmaA = false (A by cp.async, same bytes) when the driver has no encoder or
// rejects the map (an unaligned base, mSize not a multiple of 8). Host only; no CUDA error left.
inline void encodeWgradMapA(WgradParams& p) {
  p.tmaA = false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = wgradTensorMapEncoder();
  if (encode == nullptr || p.a == nullptr) return;
  const cuuint64_t dims[2] = {cuuint64_t(p.mSize), cuuint64_t(0x7FFFFFFF)};
  const cuuint64_t strides[1] = {cuuint64_t(p.mSize) * 2};
  const cuuint32_t box[2] = {64, kBK};
  const cuuint32_t unit[2] = {1, 1};
  const CUresult r = encode(&p.mapA, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                            const_cast<bf16_t*>(p.a), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  p.tmaA = r == CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Producer (warpgroup 0, threads 0..127).

// A tile as the producer walks it: expert, its rows, the output corner, K steps.
struct WTile {
  int e = 0;
  int32_t rowBegin = 0, rowEnd = 0;
  int m0 = 0, n0 = 0, kTiles = 0;
};

// This launch's walk: false (static) when p.tileCounter is null, or when p.bySkew and the routing
// is not skewed (expertsWgradSkewed over the device offsets: warp 0 reduces the experts' row
// counts); true (dynamic, tickets from p.tileCounter) otherwise. Every CTA reads the same
// offsets, so all take the same walk. Every producer thread calls it once, before any claimTile
// (which re-synchronises before *slot is written again).
__device__ __forceinline__ bool dynamicWalk(const WgradParams& p, volatile int* slot) {
  if (p.tileCounter == nullptr || !p.bySkew) return p.tileCounter != nullptr;
  if (threadIdx.x < 32) {
    int32_t most = 0;
    for (int e = int(threadIdx.x); e < p.numExperts; e += 32) {
      const int32_t rows = __ldg(p.offsets + e + 1) - __ldg(p.offsets + e);
      most = rows > most ? rows : most;
    }
#pragma unroll
    for (int lanes = 16; lanes > 0; lanes /= 2) {
      const int32_t other = __shfl_xor_sync(0xffffffffu, most, lanes);
      most = other > most ? other : most;
    }
    if (threadIdx.x == 0) {
      const int32_t rows = __ldg(p.offsets + p.numExperts) - __ldg(p.offsets);
      *slot = expertsWgradSkewed(most, rows, p.numExperts) ? 1 : 0;
    }
  }
  asm volatile("bar.sync 1, %0;\n" ::"n"(kWarpgroup) : "memory");
  return *slot != 0;
}

// The tile id after `id` for this CTA: id + gridDim.x (static), or the next ticket of
// p.tileCounter + gridDim.x (dynamic; ids below gridDim.x are the CTAs' first tiles). Every
// producer thread calls it at the same point: thread 0 takes the ticket and passes it through
// *slot (named barrier 1).
__device__ __forceinline__ int claimTile(const WgradParams& p, bool dynamic, int id,
                                         volatile int* slot) {
  if (!dynamic) return id + int(gridDim.x);
  asm volatile("bar.sync 1, %0;\n" ::"n"(kWarpgroup) : "memory");  // the last value was read
  if (threadIdx.x == 0) *slot = atomicAdd(p.tileCounter, 1) + int(gridDim.x);
  asm volatile("bar.sync 1, %0;\n" ::"n"(kWarpgroup) : "memory");
  return *slot;
}

// The first tile at or after `id` in this CTA's walk (claimTile) whose expert has rows; `id` is
// left at it. False when none is left.
__device__ __forceinline__ bool nextTile(const WgradParams& p, const WgradGeometry& g,
                                         bool dynamic, int& id, WTile& t, volatile int* slot) {
  for (; id < g.total; id = claimTile(p, dynamic, id, slot)) {
    const int slot = id / g.perExpert, local = id % g.perExpert;
    const int e = p.expertOrder != nullptr ? __ldg(p.expertOrder + slot) : slot;
    const int32_t begin = __ldg(p.offsets + e), end = __ldg(p.offsets + e + 1);
    if (end <= begin) continue;
    t.e = e;
    t.rowBegin = begin;
    t.rowEnd = end;
    t.m0 = (local / g.nTiles) * kBM;
    t.n0 = (local % g.nTiles) * kBN;
    t.kTiles = (end - begin + kBK - 1) / kBK;
    return true;
  }
  return false;
}

// Source row of B row (2 warp + l % 2 + 8 (l / 2)) of K step kt for lane l < 16 (lanes 16..31
// repeat lanes 0..15): the gathered row, or the row itself; 0 past the expert's end (zero-filled,
// never read). Copy q of a thread whose K rows are 2 warp + lane / 16 + 8 q takes lane
// lane / 16 + 2 q's value.
__device__ __forceinline__ int32_t bSourceRow(const WgradParams& p, const WTile& t, int kt) {
  const int warp = int(threadIdx.x) / 32, l = int(threadIdx.x) % 16;
  const int32_t row = t.rowBegin + kt * kBK + 2 * warp + (l % 2) + 8 * (l / 2);
  if (row >= t.rowEnd) return 0;
  return p.bIndex != nullptr ? __ldg(p.bIndex + row) : row;
}

// The tile's grad lines (256 rows x 512 bytes) to L2 before the consumers' read-add-write;
// thread t: rows m0 + t and m0 + 128 + t, 4 lines of 128 bytes each.
__device__ __forceinline__ void prefetchGrad(const WgradParams& p, const WTile& t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = t.m0 + half * 128 + int(threadIdx.x);
    if (row >= p.mSize) break;
    const float* base = p.grad + (int64_t(t.e) * p.mSize + row) * p.nSize + t.n0;
#pragma unroll
    for (int l = 0; l < kBN / 32; ++l) {
      if (t.n0 + 32 * l >= p.nSize) break;
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(base + 32 * l));
    }
  }
}

#if MOEWB_GROUPED_HAS_WGMMA
// TMA 2-D tile load into shared address dst, completing transaction bytes on mbarrier bar.
__device__ __forceinline__ void tmaLoad2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// A [64 K][256 M] of K step kt by cp.async (the partial step, or every step without the map):
// chunk j = lane (columns m0 + 8 j, atom j / 8), K rows warp + 4 q; rows past the expert's end
// and columns >= mSize zero-filled. A warp copies one 512-byte row per instruction.
__device__ __forceinline__ void copyA(const WgradParams& p, const WTile& t, int kLocal, int kLeft,
                                     uint32_t stage) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const bool mOk = t.m0 + 8 * lane < p.mSize;
  const bf16_t* src = p.a + (int64_t(t.rowBegin) + kLocal + warp) * p.mSize + t.m0 + 8 * lane;
  const int64_t stride = 4 * p.mSize;
  const uint32_t atom = stage + uint32_t((lane / 8) * kAtomBytes);
#pragma unroll
  for (int q = 0; q < 16; ++q) {
    const int r = warp + 4 * q;
    const bool ok = mOk && r < kLeft;
    const uint32_t dst = atom + uint32_t(r * 128 + (((lane % 8) ^ (r % 8)) << 4));
    cpAsync16Fenced(dst, ok ? src + q * stride : p.a, ok);
  }
}

// B [64 K][128 N] of K step kt: chunk j = tid % 16 (columns n0 + 8 j, atom j / 8), K rows
// r0 + 8 q (r0 = tid / 16, so r % 8 == r0 and the swizzled chunk is the same for every q); the
// source row from lane r0 % 2 + 2 q (bRow, bSourceRow); rows past the expert's end and columns
// >= nSize zero-filled. A warp copies 2 rows x 256 bytes per instruction.
__device__ __forceinline__ void copyB(const WgradParams& p, const WTile& t, int kLeft,
                                      int32_t bRow, uint32_t tile) {
  const int tid = int(threadIdx.x), j = tid % 16, r0 = tid / 16;
  const bool nOk = t.n0 + 8 * j < p.nSize;
  const bf16_t* col = p.b + t.n0 + 8 * j;
  const uint32_t dst = tile + uint32_t((j / 8) * kAtomBytes + r0 * 128 + (((j % 8) ^ r0) << 4));
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int32_t src = __shfl_sync(0xffffffffu, bRow, (r0 % 2) + 2 * q);
    const bool ok = nOk && r0 + 8 * q < kLeft;
    cpAsync16Fenced(dst + uint32_t(q * 1024), ok ? col + int64_t(src) * p.nSize : p.b, ok);
  }
}

// One K step into the ring stage `stage` with full barrier fullBar: B by cp.async, A by TMA when
// the step is whole and the map is set (else cp.async); this thread's cp.async noinc arrival,
// and thread 0's arrival (with A's transaction bytes under TMA), after the tile record when the
// tile starts here.
__device__ __forceinline__ void produceStep(const WgradParams& p, const WTile& t, int kt,
                                            int32_t bRow, uint32_t stage, uint32_t fullBar,
                                            int4* record) {
  const int kLocal = kt * kBK;
  const int kLeft = t.rowEnd - t.rowBegin - kLocal;  // valid K rows from this step's first
  const bool tma = p.tmaA && kLeft >= kBK;
  if (!tma) copyA(p, t, kLocal, kLeft, stage);
  copyB(p, t, kLeft, bRow, stage + uint32_t(kATileBytes));
  ws::cpAsyncArriveNoinc(fullBar);
  if (threadIdx.x == 0) {
    if (kt == 0) *record = make_int4(t.e, t.m0, t.n0, t.rowEnd - t.rowBegin);
    if (tma) {
      // release (the record) + expect A's bytes, then the four boxes.
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(fullBar),
                   "r"(kATileBytes)
                   : "memory");
#pragma unroll
      for (int atom = 0; atom < kBM / 64; ++atom)
        tmaLoad2d(stage + uint32_t(atom * kAtomBytes), &p.mapA, t.m0 + 64 * atom,
                  t.rowBegin + kLocal, fullBar);
    } else {
      ws::mbarArrive(fullBar);  // release: the record is visible after the consumers' wait
    }
  }
}

__device__ __forceinline__ void produce(const WgradParams& p, const WgradGeometry& g,
                                        uint32_t smem, uint32_t fullBar, uint32_t emptyBar,
                                        int4* records, volatile int* slot) {
  uint32_t it = 0;  // K steps issued (ring slot and phase)
  const bool dynamic = dynamicWalk(p, slot);
  int id = int(blockIdx.x);
  WTile cur;
  bool have = nextTile(p, g, dynamic, id, cur, slot);
  int32_t bRowNext = have ? bSourceRow(p, cur, 0) : 0;
  while (have) {
    int nextId = id;
    WTile next;
    bool haveNext = false;
    for (int kt = 0; kt < cur.kTiles; ++kt, ++it) {
      // The next tile's claim, lookup and first indices go out before this step's empty wait.
      if (kt == cur.kTiles - 1) {
        nextId = claimTile(p, dynamic, id, slot);
        haveNext = nextTile(p, g, dynamic, nextId, next, slot);
      }
      if (kEpiPrefetch > 0 && kt == (cur.kTiles > kEpiPrefetch ? cur.kTiles - kEpiPrefetch : 0))
        prefetchGrad(p, cur);
      const int32_t bRow = bRowNext;
      bRowNext = kt + 1 < cur.kTiles ? bSourceRow(p, cur, kt + 1)
                                     : (haveNext ? bSourceRow(p, next, 0) : 0);
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      ws::mbarWait(emptyBar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
      produceStep(p, cur, kt, bRow, smem + s * uint32_t(kStageBytes), fullBar + 8 * s,
                  records + s);
    }
    cur = next;
    id = nextId;
    have = haveNext;
  }
  const uint32_t s = it % kStages, phase = (it / kStages) & 1u;  // the end record
  ws::mbarWait(emptyBar + 8 * s, phase ^ 1u);
  ws::cpAsyncArriveNoinc(fullBar + 8 * s);
  if (threadIdx.x == 0) {
    records[s] = make_int4(-1, 0, 0, 0);
    ws::mbarArrive(fullBar + 8 * s);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the producer
}
#endif

// ---------------------------------------------------------------------------------------------
// Consumers (warpgroups 1, 2).

// grad[e] rows m0 + 128 cw.. += acc (fragment i of m64n128 half h: row 64 h + 16 (warp % 4) +
// lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) + i % 2), v2::wgradEpilogue's
// old + acc per element; kEpiChunk loads issued before their adds and stores (a store may alias
// a later load for the compiler, which then cannot hoist the loads itself).
__device__ __forceinline__ void epilogue(const WgradParams& p, const int4& tile, int cw,
                                         const wg::Accum& acc) {
  const int warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  const int64_t n0 = tile.z;
  float* ge = p.grad + int64_t(tile.x) * p.mSize * p.nSize;
  const int colLeft = int(p.nSize - n0) - 2 * (lane % 4);  // column group j valid: 8 j < colLeft
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int64_t row = tile.y + cw * 128 + h * 64 + warp * 16 + lane / 4 + q * 8;
      if (row >= p.mSize) continue;
      float* gr = ge + row * p.nSize + n0 + 2 * (lane % 4);
#pragma unroll
      for (int j0 = 0; j0 < 16; j0 += kEpiChunk) {
        float2 old[kEpiChunk];
#pragma unroll
        for (int jj = 0; jj < kEpiChunk; ++jj) {
          const int j = j0 + jj;
          old[jj] = make_float2(0.0f, 0.0f);
          if (8 * j < colLeft) old[jj] = __ldcg(reinterpret_cast<const float2*>(gr + 8 * j));
        }
#pragma unroll
        for (int jj = 0; jj < kEpiChunk; ++jj) {
          const int j = j0 + jj;
          if (8 * j >= colLeft) continue;
          const float v0 = old[jj].x + acc[h][4 * j + 2 * q];
          const float v1 = old[jj].y + acc[h][4 * j + 2 * q + 1];
          *reinterpret_cast<float2*>(gr + 8 * j) = make_float2(v0, v1);
        }
      }
    }
}

#if MOEWB_GROUPED_HAS_WGMMA
__device__ __forceinline__ void consume(const WgradParams& p, uint32_t smem, uint32_t fullBar,
                                        uint32_t emptyBar, const int4* records) {
  const int cw = int(threadIdx.x) / kWarpgroup - 1;
  const bool releaser = int(threadIdx.x) % 32 == 0;  // one arrival per consumer warp
  uint32_t it = 0;
  wg::Accum acc;
  for (;;) {
    uint32_t s = it % kStages, phase = (it / kStages) & 1u;
    ws::mbarWait(fullBar + 8 * s, phase);
    const int4 tile = records[s];
    if (tile.w <= 0) break;
    const int kTiles = (tile.w + kBK - 1) / kBK;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
    for (int kt = 0;;) {
      wg::fenceProxyAsync();  // the cp.async (generic proxy) bytes, for wgmma's operand reads
      const uint32_t a = smem + s * uint32_t(kStageBytes) + uint32_t(2 * cw * kAtomBytes);
      const uint32_t b = smem + s * uint32_t(kStageBytes) + uint32_t(kATileBytes);
      wg::fenceOperand(acc[0]);
      wg::fenceOperand(acc[1]);
      wg::wgmmaFence();
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        // K slice k16 = MN-major K rows 16 k16.. (128 bytes each): round 2's mainloop order.
        const uint32_t k = uint32_t(k16 * 16 * 128);
        const uint64_t db = wg::descMn128(b + k);
        wg::wgmma128<1, 1>(acc[0], wg::descMn128(a + k), db);
        wg::wgmma128<1, 1>(acc[1], wg::descMn128(a + uint32_t(kAtomBytes) + k), db);
      }
      wg::wgmmaCommit();
      ws::wgmmaWait<0>();  // this step's batch has retired: its slot is free at once
      wg::fenceOperand(acc[0]);
      wg::fenceOperand(acc[1]);
      if (releaser) ws::mbarArrive(emptyBar + 8 * s);
      ++it;
      if (++kt == kTiles) break;
      s = it % kStages;
      phase = (it / kStages) & 1u;
      ws::mbarWait(fullBar + 8 * s, phase);
    }
    epilogue(p, tile, cw, acc);
  }
}
#endif

// The weight-gradient kernel (WgradParams documents the operands). Grid: wgradGrid() (any
// positive count is correct); kThreads threads; kSmemBytes dynamic shared memory.
__global__ void __launch_bounds__(kThreads, 1)
    grouped_ws_wgrad_kernel(const __grid_constant__ WgradParams p) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];  // full[kStages], empty[kStages]
  __shared__ int4 records[kStages];  // {expert, m0, n0, rows} of the tile starting at a stage
  __shared__ int ticket;             // claimTile's broadcast (dynamic walk)
#if MOEWB_GROUPED_HAS_WGMMA
  unsigned char* smem = wg::alignedSmem(smemRaw);
  const uint32_t fullBar = smemAddr(&bars[0]), emptyBar = smemAddr(&bars[kStages]);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ws::mbarInit(fullBar + 8 * s, kWarpgroup + 1);  // 128 noinc + thread 0's arrival
      ws::mbarInit(emptyBar + 8 * s, 8);              // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int role = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroup, 0);
  if (role == 0) {
    ws::setMaxRegsDec<kProducerRegs>();
    produce(p, WgradGeometry(p), smemAddr(smem), fullBar, emptyBar, records, &ticket);
  } else {
    ws::setMaxRegsInc<kConsumerRegs>();
    consume(p, smemAddr(smem), fullBar, emptyBar, records);
  }
#else
  (void)bars;
  (void)records;
  (void)ticket;
  (void)p;
  __trap();
#endif
}

}  // namespace moewb::engine::cuda::grouped::wsw
