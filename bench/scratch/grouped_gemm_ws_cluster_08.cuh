// Grouped expert GEMMs, round 8 (issue 14; bench/scratch/grouped_gemm_08.md): forward gate+up
// with the GLU epilogue (fc1) and dh with the GLU-backward epilogue on round 7's ping-pong
// kernel (grouped_gemm_ws_pingpong_cuda.cuh) run as 2-CTA CLUSTERS that share the weight tile:
// each CTA's TMA loads one half of B and multicasts it into both CTAs' rings, so a CTA's K step
// reads 16 KB of A + 8 KB of B from L2 instead of 32 KB (sm_90a only).
//  - Work unit (one per cluster at a time, both CTAs in step): within an expert, its 128-row
//    tiles are taken two at a time ("pair", 256 rows): rank r of the cluster takes rows
//    128 r .. 128 r + 127 of the pair, both the same column block n, B MULTICAST (rank 0 loads
//    the first 8 KB half of the stage's B: the gate box / MN atom 0; rank 1 the second: the up
//    box / atom 1; each to both CTAs). An expert with an odd tile count ends with a "split"
//    unit: both ranks take its last row tile, rank r column block 2 q + r, each loading its own
//    whole B (no multicast); rank 1 idles (zero A, no stores) when 2 q + 1 is past the last
//    column block. Units per expert: (tiles / 2) colTiles + (tiles % 2) ceil(colTiles / 2);
//    their prefix (unitStart) is computed per CTA into shared memory from offsets. Cluster c
//    walks units c, c + clusters, ...; its j-th unit goes to consumer j % 2 in both CTAs.
//  - The ring protocol is round 7's plus the cluster: a stage's FULL barrier (per CTA) takes the
//    128 cp.async noinc arrivals of its producer and thread 0's arrive.expect_tx of 16 KB, and
//    the 16 KB land as 8 KB from each CTA's TMA (multicast) or 16 KB from its own (split); its
//    EMPTY barrier takes 8 arrivals: one per consumer warp of BOTH CTAs (a release is a local and
//    a remote mbarrier arrive), so no producer overwrites a slot its partner still reads.
//    Why a partner's bytes never land in the wrong phase: CTA X's TMA writes step `it` into CTA
//    Y's slot only after X's empty wait for step it - kStages, which needs Y's consumers to have
//    released it - kStages, i.e. Y's full phase for it - kStages completed; the phase for `it`
//    cannot complete early because thread 0's expect_tx arrival is one of its 129 (a partner's
//    complete_tx may come first: the tx-count goes transiently negative, which PTX allows).
//    The consumers' token (named barriers 1, 2) is round 7's (pp::tokenWait / tokenPass).
//    Start: barriers initialised, then a cluster barrier (no partner multicasts into an
//    uninitialised barrier); end: a cluster barrier (no CTA leaves while its partner may still
//    arrive remotely on its empty barriers). Both CTAs walk the same units and K steps, so they
//    make the same number of releases.
//  - Tiles and MMA batches exactly round 7's (128 x 128, two m64n128k16 per k16, round 2's
//    per-element K order); fc1 epilogue pp::gateUpEpilogue; dh epilogue dhEpilogueQuad (16-byte
//    gatePre / upPre accesses after a shuffle transpose in each quad) or, MOEWB_CL_DH_EPI 0,
//    pp::dhEpilogue; round 2's per-element arithmetic everywhere: round 2's bits.
// Shape rules as round 2 (D % 8 == 0, F % 8 == 0, 16-byte aligned bases); rows >= an expert's
// end are not written; deterministic. Params, encodeMaps: round 7's (p.tileStart is not read).
// Needs MOEWB_WS_TMA_B 1. Defines __global__ functions: include from ONE translation unit
// compiled for sm_90a. Launch: grid = an EVEN number of CTAs (clusters of 2, compile-time
// __cluster_dims__), kThreads threads, smemBytes(numExperts) dynamic shared memory
// (cudaFuncSetAttribute first); clusterGrid() picks the grid.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/grouped_gemm_ws_pingpong_cuda.cuh"

// MOEWB_CL_DH_EPI: the dh epilogue, 1 dhEpilogueQuad (16-byte accesses), 0 round 7's.
#ifndef MOEWB_CL_DH_EPI
#define MOEWB_CL_DH_EPI 1
#endif

namespace moewb::engine::cuda::grouped::cl {

using pp::Params;
using pp::Stage;
constexpr int kBM = pp::kBM, kBN = pp::kBN, kBK = pp::kBK;
constexpr int kStages = pp::kStages;
constexpr int kThreads = pp::kThreads;
constexpr int kWarpgroup = pp::kWarpgroup;
constexpr int kClusterSize = 2;
constexpr int kATileBytes = pp::kATileBytes, kBTileBytes = pp::kBTileBytes;
constexpr int kStageBytes = pp::kStageBytes;
constexpr int kHalfBBytes = kBTileBytes / 2;  // one gate / up box or one MN atom: 8 KB
static_assert(kHalfBBytes == pp::kMnAtomBytes, "the halves are the two MN-major atoms of dh");
// Most experts the unit prefix in shared memory holds (227 KB minus the ring).
constexpr int kMaxExperts = 4096;

// Dynamic shared memory for numExperts experts: the ring (aligned) + unitStart[E + 1].
__host__ __device__ constexpr int smemBytes(int numExperts) {
  return kStages * kStageBytes + pp::kAlign + ((numExperts + 1) * 4 + 15) / 16 * 16;
}
static_assert(smemBytes(kMaxExperts) <= 227 * 1024, "unit prefix fits next to the ring");

// One CTA's share of a unit: its row tile (end == begin: idle), column base, whether B is
// multicast (pair) or loaded whole by each CTA (split), and the column block B is loaded for.
struct Unit {
  RowTile tile;
  int n0 = 0;     // output column base (gate+up: f column of the gate / up halves)
  int nLoad = 0;  // column base B is loaded for (== n0 except an idle split rank)
  bool multicast = false;
};

#if MOEWB_GROUPED_HAS_WGMMA
__device__ __forceinline__ uint32_t clusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t clusterId() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t clusterCount() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
// Every thread of both CTAs; orders earlier shared / remote accesses before later ones.
__device__ __forceinline__ void clusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}
// Arrive on the empty barrier at local shared address `bar` in this CTA and in the partner's.
__device__ __forceinline__ void releaseBoth(uint32_t bar, uint32_t partner) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(partner));
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
               : "memory");
}
// Producer's empty wait: the partner's arrivals are cluster-scope releases.
__device__ __forceinline__ void mbarWaitCluster(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// TMA 3-D box into shared offset `dst` of every CTA in ctaMask, completing its bytes on the
// barrier at the same offset in each.
__device__ __forceinline__ void tmaLoad3dMulticast(uint32_t dst, const CUtensorMap* map, int c0,
                                                   int c1, int c2, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
      : "memory");
}

// unitStart[e] (shared memory, E + 1 entries) = units of experts < e; warp 0 of the CTA.
__device__ __forceinline__ void unitPrefix(const Params& p, int colTiles, int32_t* unitStart) {
  if (threadIdx.x >= 32) return;
  const int lane = int(threadIdx.x);
  int32_t running = 0;
  if (lane == 0) unitStart[0] = 0;
  for (int base = 0; base < p.numExperts; base += 32) {
    const int e = base + lane;
    int32_t u = 0;
    if (e < p.numExperts) {
      const int32_t tiles = (p.offsets[e + 1] - p.offsets[e] + kBM - 1) / kBM;
      u = (tiles / 2) * colTiles + (tiles % 2) * ((colTiles + 1) / 2);
    }
#pragma unroll
    for (int s = 1; s < 32; s *= 2) {  // inclusive scan
      const int32_t v = __shfl_up_sync(0xffffffffu, u, s);
      if (lane >= s) u += v;
    }
    if (e < p.numExperts) unitStart[e + 1] = running + u;
    running += __shfl_sync(0xffffffffu, u, 31);
  }
}

// This CTA's (rank's) share of unit `id` (< unitStart[E]).
template <Stage kS>
__device__ __forceinline__ Unit decodeUnit(const Params& p, const pp::Geometry<kS>& g,
                                           const int32_t* unitStart, int id, int rank) {
  int lo = 0, hi = p.numExperts;  // largest e with unitStart[e] <= id
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (unitStart[mid] <= id) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t first = p.offsets[lo], last = p.offsets[lo + 1];
  const int tiles = int((last - first + kBM - 1) / kBM);
  const int local = id - unitStart[lo], pairUnits = (tiles / 2) * g.colTiles;
  Unit u;
  u.tile.expert = lo;
  int block;
  if (local < pairUnits) {
    u.multicast = true;
    u.tile.begin = first + int64_t(local / g.colTiles) * (2 * kBM) + rank * kBM;
    block = local % g.colTiles;
    u.nLoad = int(block * g.colWidth);
  } else {
    u.tile.begin = first + int64_t(tiles - 1) * kBM;
    block = 2 * (local - pairUnits) + rank;
    const int loadBlock = block < g.colTiles ? block : g.colTiles - 1;
    u.nLoad = int(loadBlock * g.colWidth);
  }
  const int64_t end = u.tile.begin + kBM < last ? u.tile.begin + kBM : last;
  u.tile.end = block < g.colTiles && end > u.tile.begin ? end : u.tile.begin;  // idle: no rows
  u.n0 = int(block * g.colWidth);
  return u;
}

// ---------------------------------------------------------------------------------------------
// Producer (warpgroup 0).

template <Stage kS>
__device__ __forceinline__ void producerTile(const Params& p, const Unit& u, pp::ProducerTile& pt) {
  pt.begin = u.tile.begin;
  pt.end = u.tile.end;
  pt.expert = u.tile.expert;
  pt.n0 = u.n0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int64_t logical = u.tile.begin + int(threadIdx.x) / 8 + q * (kWarpgroup / 8);
    pt.aRow[q] = logical >= u.tile.end
                     ? -1
                     : int32_t(p.gather != nullptr ? int64_t(__ldg(p.gather + logical)) : logical);
  }
}

// B of one K step at stage B address b: this rank's half to both CTAs (multicast) or both halves
// to this CTA; thread 0 only, after its expect_tx of the whole 16 KB.
template <Stage kS>
__device__ __forceinline__ void loadB(const Params& p, const Unit& u, int expert, uint32_t b, int k,
                                      uint32_t fullBar, int rank) {
  const int n = u.nLoad;
  if (u.multicast) {
    const uint32_t dst = b + uint32_t(rank * kHalfBBytes);
    if constexpr (kS == Stage::kGateUp) {  // rank 0: gate rows 0..63; rank 1: up rows 64..127
      tmaLoad3dMulticast(dst, rank == 0 ? &p.mapB1 : &p.mapB2, k, n, expert, fullBar, 0x3);
    } else {  // rank r: MN atom r (N n + 64 r .. + 63)
      tmaLoad3dMulticast(dst, &p.mapB1, n + 64 * rank, k, expert, fullBar, 0x3);
    }
  } else if constexpr (kS == Stage::kGateUp) {
    ws::tmaLoad3d(b, &p.mapB1, k, n, expert, fullBar);
    ws::tmaLoad3d(b + uint32_t(kHalfBBytes), &p.mapB2, k, n, expert, fullBar);
  } else {
    ws::tmaLoad3d(b, &p.mapB1, n, k, expert, fullBar);
    ws::tmaLoad3d(b + uint32_t(kHalfBBytes), &p.mapB1, n + 64, k, expert, fullBar);
  }
}

// One K step into the stage at shared address a: A rows by cp.async as round 7, B by loadB.
template <Stage kS>
__device__ __forceinline__ void copyStep(const Params& p, const pp::ProducerTile& pt, const Unit& u,
                                         uint32_t a, int kt, uint32_t fullBar, int rank) {
  const int t = int(threadIdx.x), c = t % 8;
  const int64_t kLocal = int64_t(kt) * kBK;
  const uint32_t rowOff = uint32_t((t / 8) * 128 + ((c ^ ((t / 8) & 7)) << 4));
  const bf16_t* base = p.a + kLocal + c * 8;
  const bool kOk = kLocal + c * 8 < p.d;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const bool ok = kOk && pt.aRow[q] >= 0;
    ws::cpAsync16s(a + rowOff + uint32_t(q * 2048), ok ? base + int64_t(pt.aRow[q]) * p.d : p.a,
                   ok);
  }
  if (t == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(fullBar),
                 "r"(kBTileBytes)
                 : "memory");
    loadB<kS>(p, u, pt.expert, a + uint32_t(kATileBytes), int(kLocal), fullBar, rank);
  }
}

template <Stage kS>
__device__ __forceinline__ void produce(const Params& p, const pp::Geometry<kS>& g,
                                        const int32_t* unitStart, uint32_t smem, uint32_t fullBar,
                                        uint32_t emptyBar) {
  const int rank = int(clusterRank()), clusters = int(clusterCount());
  const int total = unitStart[p.numExperts];
  uint32_t it = 0;  // K steps issued by this CTA (ring slot and phase); equal in both CTAs
  const int prefetchAt = g.kTiles > MOEWB_PP_EPI_PREFETCH ? g.kTiles - MOEWB_PP_EPI_PREFETCH : 0;
  int id = int(clusterId());
  Unit u;
  pp::ProducerTile pt;
  if (id < total) {
    u = decodeUnit<kS>(p, g, unitStart, id, rank);
    producerTile<kS>(p, u, pt);
  }
  for (; id < total; id += clusters) {
    Unit nextU;
    pp::ProducerTile nextPt;
    const bool hasNext = id + clusters < total;
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      // The next unit's gather loads go out before this step's empty wait (as round 7).
      if (kt == g.kTiles - 1 && hasNext) {
        nextU = decodeUnit<kS>(p, g, unitStart, id + clusters, rank);
        producerTile<kS>(p, nextU, nextPt);
      }
      if (kS == Stage::kDh && MOEWB_PP_EPI_PREFETCH > 0 && kt == prefetchAt)
        pp::prefetchDhEpilogue(p, pt);
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      mbarWaitCluster(emptyBar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
      copyStep<kS>(p, pt, u, smem + s * uint32_t(kStageBytes), kt, fullBar + 8 * s, rank);
      ws::cpAsyncArriveNoinc(fullBar + 8 * s);
    }
    if (hasNext) {
      u = nextU;
      pt = nextPt;
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the producer
}

// ---------------------------------------------------------------------------------------------
// dh epilogue with 16-byte accesses (MOEWB_CL_DH_EPI 1). Round 7's (pp::dhEpilogue) loads
// gatePre / upPre 4 bytes a lane (a warp instruction: 8 rows x 16 B) in 8 dependent batches;
// H200: dh 3.56 ms against ~1.2 ms of mainloop (grouped_gemm_08.md). Here the 4 lanes of a quad
// (same row, columns 8 j + 2 t + {0, 1} of the m64n128 fragment, t = lane % 4) transpose their
// fragments by shuffles so that lane t holds all 8 columns of groups j = 4 m + t (m = 0..3):
// per row 8 x 16-byte loads (64 contiguous bytes a quad), issued before the row's shuffles,
// then round 2's per-element arithmetic (gluBackwardDevice on bf16 g / u, __floats2bfloat162_rn)
// and 16-byte stores: the same bits as pp::dhEpilogue, 4 exposed load batches instead of 8.
// Rotation transpose, round k: lane t reads lane (t + k) % 4 of its quad, which sends its pair
// of group 4 m + ((its t - k) % 4): each side picks its register by selects, no local memory.

// Lane t of a quad: (v[2 s], v[2 s + 1]) = the pair of group 4 m + t from quad lane s, for the
// row (h, q) of acc (fragment i = 4 j + 2 q + e).
__device__ __forceinline__ void quadTranspose(const float (&acc)[2][64], int h, int q, int m, int t,
                                              float (&v)[8]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int send = (t - k) & 3;  // pair index this lane sends
    float x0 = acc[h][4 * (4 * m) + 2 * q], x1 = acc[h][4 * (4 * m) + 2 * q + 1];
#pragma unroll
    for (int jj = 1; jj < 4; ++jj) {
      const int i = 4 * (4 * m + jj) + 2 * q;
      x0 = send == jj ? acc[h][i] : x0;
      x1 = send == jj ? acc[h][i + 1] : x1;
    }
    const int src = (int(threadIdx.x) & ~3) | ((t + k) & 3);
    const float y0 = __shfl_sync(0xffffffffu, x0, src & 31);
    const float y1 = __shfl_sync(0xffffffffu, x1, src & 31);
    const int from = (t + k) & 3;
#pragma unroll
    for (int ss = 0; ss < 4; ++ss) {
      v[2 * ss] = from == ss ? y0 : v[2 * ss];
      v[2 * ss + 1] = from == ss ? y1 : v[2 * ss + 1];
    }
  }
}

__device__ __forceinline__ void dhEpilogueQuad(const Params& p, const RowTile& tile, int64_t n0,
                                               const float (&acc)[2][64]) {
  const int warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32, t = lane % 4;
  const int64_t f = p.f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int64_t r = tile.begin + h * 64 + warp * 16 + lane / 4 + q * 8;
      const bool rowOk = r < tile.end;  // warp-divergent; the shuffles below stay converged
      uint4 gv[4], uv[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int64_t col = n0 + (4 * m + t) * 8;
        if (rowOk && col < f) {  // f % 8 == 0: a group is wholly in or out
          gv[m] = __ldg(reinterpret_cast<const uint4*>(p.gatePre + r * f + col));
          uv[m] = __ldg(reinterpret_cast<const uint4*>(p.upPre + r * f + col));
        }
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = 0.0f;
        quadTranspose(acc, h, q, m, t, v);
        const int64_t col = n0 + (4 * m + t) * 8;
        if (!rowOk || col >= f) continue;
        const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv[m]);
        const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv[m]);
        uint4 dgOut, duOut;
        __nv_bfloat162* dg2 = reinterpret_cast<__nv_bfloat162*>(&dgOut);
        __nv_bfloat162* du2 = reinterpret_cast<__nv_bfloat162*>(&duOut);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float dg0, du0, dg1, du1;
          gluBackwardDevice(p.glu, __low2float(g2[e]), __low2float(u2[e]), v[2 * e], dg0, du0);
          gluBackwardDevice(p.glu, __high2float(g2[e]), __high2float(u2[e]), v[2 * e + 1], dg1,
                            du1);
          dg2[e] = __floats2bfloat162_rn(dg0, dg1);
          du2[e] = __floats2bfloat162_rn(du0, du1);
        }
        *reinterpret_cast<uint4*>(p.out1 + r * f + col) = dgOut;
        *reinterpret_cast<uint4*>(p.out2 + r * f + col) = duOut;
      }
    }
}

// Consumer cw (0 or 1): the cluster's units j = cw, cw + 2, ... as round 7's consume(), the
// releases to both CTAs' empty barriers.
template <Stage kS, int kDhEpi>
__device__ __forceinline__ void consume(const Params& p, const pp::Geometry<kS>& g,
                                        const int32_t* unitStart, uint32_t smem, uint32_t fullBar,
                                        uint32_t emptyBar) {
  constexpr int kTb = kS == Stage::kDh ? 1 : 0;  // dh: B MN-major
  const int cw = int(threadIdx.x) / kWarpgroup - 1;
  const bool releaser = int(threadIdx.x) % 32 == 0;  // one arrival per warp, in each CTA
  const int rank = int(clusterRank()), clusters = int(clusterCount());
  const uint32_t partner = uint32_t(rank ^ 1);
  const int total = unitStart[p.numExperts];
  float acc[2][64];
  for (int j = cw;; j += 2) {
    const int id = int(clusterId()) + j * clusters;
    if (id >= total) break;
    const Unit u = decodeUnit<kS>(p, g, unitStart, id, rank);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
    uint32_t it = uint32_t(j) * uint32_t(g.kTiles), prev = 0;
    if (j > 0) pp::tokenWait(cw);  // the other consumer passed unit j - 1's full barriers
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      ws::mbarWait(fullBar + 8 * s, phase);
      wg::fenceProxyAsync();  // the cp.async (generic proxy) A bytes, for wgmma's reads
      const uint32_t a = smem + s * uint32_t(kStageBytes);
      const uint32_t b = a + uint32_t(kATileBytes);
      pp::fenceAcc(acc);
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
      pp::fenceAcc(acc);
      if (kt > 0 && releaser) releaseBoth(emptyBar + 8 * prev, partner);
      prev = s;
    }
    if (id + clusters < total) pp::tokenPass(cw);
    ws::wgmmaWait<0>();
    pp::fenceAcc(acc);
    if (releaser) releaseBoth(emptyBar + 8 * prev, partner);
    if (u.tile.end > u.tile.begin) {
      if constexpr (kS == Stage::kGateUp) {
        pp::gateUpEpilogue(p, u.tile, u.n0, acc);
      } else {
        if constexpr (kDhEpi != 0) {
          dhEpilogueQuad(p, u.tile, u.n0, acc);
        } else {
          pp::dhEpilogue(p, u.tile, u.n0, acc);
        }
      }
    }
  }
}
#endif  // MOEWB_GROUPED_HAS_WGMMA

// One persistent kernel per stage, clusters of 2 CTAs (Params documents the operands). Grid: an
// even count, at most the co-resident clusters x 2 (clusterGrid); any even count is correct.
// kDhEpi (dh only): 1 dhEpilogueQuad, 0 round 7's pp::dhEpilogue (same bits; A/B in the bench).
template <Stage kS, int kDhEpi = MOEWB_CL_DH_EPI>
__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(kThreads, 1)
    grouped_cluster_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];  // full[kStages], empty[kStages]
#if MOEWB_GROUPED_HAS_WGMMA
  unsigned char* smem = wg::alignedSmem(smemRaw);
  int32_t* unitStart = reinterpret_cast<int32_t*>(smem + kStages * kStageBytes);
  const uint32_t fullBar = smemAddr(&bars[0]), emptyBar = smemAddr(&bars[kStages]);
  const pp::Geometry<kS> g(p);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ws::mbarInit(fullBar + 8 * s, kWarpgroup + 1);  // noinc per producer thread + expect_tx
      ws::mbarInit(emptyBar + 8 * s, 2 * 4);          // one per consumer warp, both CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  unitPrefix(p, g.colTiles, unitStart);
  clusterSync();  // barriers of both CTAs initialised, unitStart written
  const int role = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroup, 0);
  if (role == 0) {
    ws::setMaxRegsDec<pp::kProducerRegs>();
    produce<kS>(p, g, unitStart, smemAddr(smem), fullBar, emptyBar);
  } else {
    ws::setMaxRegsInc<pp::kConsumerRegs>();
    consume<kS, kDhEpi>(p, g, unitStart, smemAddr(smem), fullBar, emptyBar);
  }
  clusterSync();  // no CTA leaves while its partner may still arrive on its barriers
#else
  (void)bars;
  __trap();
#endif
}

// Grid for `kernel` (a grouped_cluster_kernel) with smem dynamic bytes: 2 x the clusters that
// fit at once (cudaOccupancyMaxActiveClusters), at most 2 x maxUnits and `sms`, at least 2.
template <class Kernel>
inline cudaError_t clusterGrid(Kernel kernel, int sms, int smem, int64_t maxUnits, unsigned& grid) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(sms / kClusterSize * kClusterSize));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = size_t(smem);
  int clusters = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (e != cudaSuccess) return e;
  int64_t c = clusters < sms / kClusterSize ? clusters : sms / kClusterSize;
  if (c > maxUnits) c = maxUnits;
  if (c < 1) c = 1;
  grid = unsigned(c * kClusterSize);
  return cudaSuccess;
}

}  // namespace moewb::engine::cuda::grouped::cl
