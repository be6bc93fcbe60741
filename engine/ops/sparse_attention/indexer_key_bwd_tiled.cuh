// The lightning indexer's key-side backward as a key-tile x query-tile product (issue 15;
// bench/scratch/indexer_key_bwd_01.md has the counts):
//   dk[m, :] = sum over the (query r, slot) pairs that selected key m and heads j of
//              coef[r, j, slot] qI[r, j, :]
// computed per CTA for a tile of KM keys of one sequence as
//   dk[tile, :] += C^T Q  over the query tiles that hold an entry for the tile,
// C [128 (query, head) rows][KM keys] = the sparse coef scattered densely into shared memory from
// the transposed selection (keyStart / entries: per key its (query * W + slot) entries in query
// order, so each key's entries for one query tile are a contiguous run from a per-key cursor),
// Q [128 rows][dI] = the tile's qI rows (one contiguous block of q, cp.async). A query tile is
// 128 / HI queries counted from the sequence start; tiles holding no entry of the key tile are
// never visited (causal: none before it). CTA p takes key tiles p and tiles-1-p of its sequence
// (equal causal work per CTA). fp32 FMA, 4 keys x 4 (dI 64) or 8 (dI 128) values per thread.
// Order per key: query tiles ascending, rows ascending: deterministic, no atomics on floats; it
// differs from indexer_key_bwd_kernel's (entry by entry), ~1e-7 relative apart.
// Cost: dense KM x dI x 128 FMA per visited (key tile, query tile) pair: about HI dI T^2 / 2 FMA
// per sequence for a causal selection, i.e. t / top-k times the useful work; Q read once per
// pair (from L2), each entry's HI coef values once.
// Taken for HI in {4, 8, 16}, dI in {64, 128}, q and dk 16-byte aligned, entries int32
// (indexerKeyBwdTiledSupported); the caller keeps the old kernel for everything else.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "runtime/cuda/warp_mma.cuh"

namespace moewb::engine::cuda::sparse_detail {

constexpr int kKeyTiledRows = 128;  // (query, head) rows per query tile
constexpr int kKeyTiledPad = 4;     // floats of padding per C row (keeps float4 alignment)
constexpr int kKeyTiledWideCtas = 192;  // KM = 64 from ~1.5 CTAs per H200 SM, else KM = 32

inline bool indexerKeyBwdTiledSupported(int64_t heads, int64_t di, const void* q, const void* dk) {
  const bool headsOk = heads == 4 || heads == 8 || heads == 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(q) % 16) == 0 &&
                       (reinterpret_cast<uintptr_t>(dk) % 16) == 0;
  return headsOk && (di == 64 || di == 128) && aligned;
}

// Dynamic shared bytes of one CTA: C [128][KM + pad] and Q [128][DI], fp32.
constexpr size_t keyTiledSmemBytes(int km, int di) {
  return (size_t(kKeyTiledRows) * size_t(km + kKeyTiledPad) + size_t(kKeyTiledRows) * di) * 4;
}

struct KeyTiledArgs {
  const float* q;          // [N, HI*dI]
  const float* coef;       // [N, HI, W]
  const int32_t* keyStart;  // [N + 1]
  const int32_t* entries;  // [N W] query * W + slot, per key in query order
  int n;                   // tokens N
  int seqLen;              // T
  int width;               // W
  float* dk;               // [N, dI] out
};

// Scatters into C the run of each key's entries inside queries [query0, query0 + QT), advancing
// the key's cursor past it. The 4 threads of a key take entries cur+0..3 at a time (all HI coef
// loads of an entry independent); a warp ballot counts the run (entries are sorted).
template <int KM, int HI>
__device__ __forceinline__ void keyTiledScatter(const KeyTiledArgs& a, int query0, int keyLocal,
                                                int sub, bool hasKey, int end, int& cur,
                                                float* cS) {
  constexpr int kLd = KM + kKeyTiledPad, kQt = kKeyTiledRows / HI;
  const int lane = int(threadIdx.x) & 31;
  const int64_t limit = int64_t(query0 + kQt) * a.width;
  bool done = !hasKey;
  for (;;) {
    const int e = cur + sub;
    int entry = 0;
    bool in = false;
    if (!done && e < end) {
      entry = a.entries[e];
      in = int64_t(entry) < limit;
    }
    if (in) {
      const int r = entry / a.width, slot = entry - r * a.width;
      const float* src = a.coef + int64_t(r) * HI * a.width + slot;
      float v[HI];
#pragma unroll
      for (int j = 0; j < HI; ++j) v[j] = src[int64_t(j) * a.width];
      float* dst = cS + (r - query0) * HI * kLd + keyLocal;
#pragma unroll
      for (int j = 0; j < HI; ++j) dst[j * kLd] = v[j];
    }
    const unsigned mask = __ballot_sync(0xffffffffu, in);
    const int count = __popc((mask >> (lane & ~3)) & 0xfu);
    cur += count;
    done = done || count < 4;
    if (__all_sync(0xffffffffu, done)) break;
  }
}

// acc[k][i] += sum over rows C[row][tk*4 + k] Q[row][v*64 + td*4 + i%4] (i = v*4 + i%4).
template <int KM, int DI>
__device__ __forceinline__ void keyTiledProduct(const float* cS, const float* qS, int tk, int td,
                                                float (&acc)[4][DI / 16]) {
  constexpr int kLd = KM + kKeyTiledPad, kDv = DI / 64;
  const float* cCol = cS + tk * 4;
  const float* qCol = qS + td * 4;
#pragma unroll 4
  for (int row = 0; row < kKeyTiledRows; ++row) {
    const float4 c4 = *reinterpret_cast<const float4*>(cCol + row * kLd);
    const float cv[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
    for (int v = 0; v < kDv; ++v) {
      const float4 q4 = *reinterpret_cast<const float4*>(qCol + row * DI + v * 64);
      const float qv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[k][v * 4 + i] = fmaf(cv[k], qv[i], acc[k][v * 4 + i]);
      }
    }
  }
}

// dk of key tile `tile` (KM keys from seqBase + tile * KM, clipped to the sequence).
template <int KM, int DI, int HI>
__device__ void keyTiledOneTile(const KeyTiledArgs& a, int seqBase, int tile, float* cS,
                                float* qS, int& nextTile) {
  constexpr int kThreads = 4 * KM, kLd = KM + kKeyTiledPad, kQt = kKeyTiledRows / HI;
  const int tid = int(threadIdx.x), keyLocal = tid >> 2, sub = tid & 3;
  const int tk = tid >> 4, td = tid & 15;
  const int keyFirst = seqBase + tile * KM;
  const int keyCount = min(KM, seqBase + a.seqLen - keyFirst);
  const bool hasKey = keyLocal < keyCount;
  int cur = hasKey ? a.keyStart[keyFirst + keyLocal] : 0;
  const int end = hasKey ? a.keyStart[keyFirst + keyLocal + 1] : 0;
  float acc[4][DI / 16] = {};
  for (;;) {
    if (tid == 0) nextTile = INT_MAX;
    __syncthreads();  // also: the previous product is done with C and Q
    if (sub == 0 && cur < end) atomicMin(&nextTile, (a.entries[cur] / a.width - seqBase) / kQt);
    __syncthreads();
    const int qTile = nextTile;
    if (qTile == INT_MAX) break;
    const int query0 = seqBase + qTile * kQt;
    const int64_t base = int64_t(query0) * HI * DI, limit = int64_t(a.n) * HI * DI;
    for (int i = tid; i < kKeyTiledRows * DI / 4; i += kThreads) {
      const bool ok = base + int64_t(i) * 4 < limit;  // rows past N are zero-filled
      cpAsync16(qS + i * 4, ok ? a.q + base + int64_t(i) * 4 : a.q, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for (int i = tid; i < kKeyTiledRows * kLd / 4; i += kThreads) {
      reinterpret_cast<float4*>(cS)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();
    keyTiledScatter<KM, HI>(a, query0, keyLocal, sub, hasKey, end, cur, cS);
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    keyTiledProduct<KM, DI>(cS, qS, tk, td, acc);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (tk * 4 + k >= keyCount) continue;
    float* out = a.dk + int64_t(keyFirst + tk * 4 + k) * DI + td * 4;
#pragma unroll
    for (int v = 0; v < DI / 64; ++v) {
      *reinterpret_cast<float4*>(out + v * 64) =
          make_float4(acc[k][v * 4], acc[k][v * 4 + 1], acc[k][v * 4 + 2], acc[k][v * 4 + 3]);
    }
  }
}

// Grid: batch * ceil(tiles / 2) CTAs of 4 KM threads; CTA (b, p) takes key tiles p and
// tiles - 1 - p of sequence b.
template <int KM, int DI, int HI>
__global__ void __launch_bounds__(4 * KM) indexer_key_bwd_tiled_kernel(KeyTiledArgs a) {
  extern __shared__ float4 keyTiledSmem[];
  __shared__ int nextTile;
  float* cS = reinterpret_cast<float*>(keyTiledSmem);  // [128][KM + pad]
  float* qS = cS + kKeyTiledRows * (KM + kKeyTiledPad);   // [128][DI]
  const int tiles = (a.seqLen + KM - 1) / KM, pairs = (tiles + 1) / 2;
  const int b = int(blockIdx.x) / pairs, p = int(blockIdx.x) % pairs;
  keyTiledOneTile<KM, DI, HI>(a, b * a.seqLen, p, cS, qS, nextTile);
  if (tiles - 1 - p != p) keyTiledOneTile<KM, DI, HI>(a, b * a.seqLen, tiles - 1 - p, cS, qS,
                                                      nextTile);
}

template <int KM, int DI, int HI>
cudaError_t launchKeyTiled(cudaStream_t stream, const KeyTiledArgs& a, int batch) {
  const size_t smem = keyTiledSmemBytes(KM, DI);
  const cudaError_t attr = cudaFuncSetAttribute(indexer_key_bwd_tiled_kernel<KM, DI, HI>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(smem));
  if (attr != cudaSuccess) return attr;
  const int tiles = (a.seqLen + KM - 1) / KM, pairs = (tiles + 1) / 2;
  indexer_key_bwd_tiled_kernel<KM, DI, HI>
      <<<unsigned(batch * pairs), 4 * KM, smem, stream>>>(a);
  return cudaGetLastError();
}

template <int DI, int HI>
cudaError_t launchKeyTiledWidth(cudaStream_t stream, const KeyTiledArgs& a, int batch) {
  const int64_t widePairs = int64_t(batch) * (((a.seqLen + 63) / 64 + 1) / 2);
  if (widePairs >= kKeyTiledWideCtas) return launchKeyTiled<64, DI, HI>(stream, a, batch);
  return launchKeyTiled<32, DI, HI>(stream, a, batch);
}

// dk [N, dI] for the transposed selection (see the file comment); every key written (0 for a key
// no query chose). Needs indexerKeyBwdTiledSupported(heads, di, q, dk) and N W < 2^31; returns
// cudaErrorInvalidValue otherwise, else the launch error. Queued on `stream`.
inline cudaError_t launchIndexerKeyBwdTiled(cudaStream_t stream, const float* q, const float* coef,
                                            const int32_t* keyStart, const int32_t* entries,
                                            int64_t batch, int64_t seqLen, int64_t width,
                                            int64_t heads, int64_t di, float* dk) {
  const int64_t n = batch * seqLen;
  if (n == 0) return cudaSuccess;
  if (!indexerKeyBwdTiledSupported(heads, di, q, dk) || n * width >= (int64_t(1) << 31)) {
    return cudaErrorInvalidValue;
  }
  const KeyTiledArgs a{q, coef, keyStart, entries, int(n), int(seqLen), int(width), dk};
  const int b = int(batch);
  if (di == 64) {
    if (heads == 4) return launchKeyTiledWidth<64, 4>(stream, a, b);
    if (heads == 8) return launchKeyTiledWidth<64, 8>(stream, a, b);
    return launchKeyTiledWidth<64, 16>(stream, a, b);
  }
  if (heads == 4) return launchKeyTiledWidth<128, 4>(stream, a, b);
  if (heads == 8) return launchKeyTiledWidth<128, 8>(stream, a, b);
  return launchKeyTiledWidth<128, 16>(stream, a, b);
}

}  // namespace moewb::engine::cuda::sparse_detail
