// CCE's gradient filtering on the GPU (see cce_filter_cuda.h): the logit gradient with its tile
// maxima, the zeroing of filtered tiles and the two tile-skipping GEMMs.
//
// The skipping GEMMs run the grouped experts' mainloop (one 128-row A tile against two 128-column
// B tiles, BK = 32, 8 warps, a 4-stage cp.async pipeline, mma.sync m16n8k16 with fp32
// accumulators) over a list of K steps: each CTA first marks the K steps whose rows x columns
// meet a kept tile, compacts them into a list in shared memory, then multiplies those steps only.
// G's filtered tiles are zeros by then (written so by the gradient kernel), so a CTA that spans a
// kept and a filtered tile adds exactly the kept one, and the loads need no tile lookups. A CTA
// whose list is empty writes zeros (dh, when not accumulating) or nothing.
#define MOEWB_GROUPED_DEVICE_PARTS_ONLY
#include "ops/experts/grouped_gemm_cuda.cuh"
#undef MOEWB_GROUPED_DEVICE_PARTS_ONLY

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/cce/cce_filter_cuda.h"
#include "ops/cce/logit_grad_cuda.cuh"

namespace moewb::engine::cuda {
namespace {

using grouped::accCol;
using grouped::accRow;
using grouped::bf16_t;
using grouped::kBK;
using grouped::kBM;
using grouped::kBN;
using grouped::kMi;
using grouped::kNi;
using grouped::kThreads;

constexpr int kGradThreads = 256;
constexpr int64_t kGroupsPerThread = 4;   // groups of 4 columns per thread (gradient kernel)
constexpr int64_t kGradMaxChunks = 1024;  // blocks per filter tile (gridDim.y <= 65535)
constexpr int kFusedGroups = 16;           // groups a thread holds in the one-pass tile kernel
constexpr int kMaxKSteps = 1024;           // K steps a skipping CTA can list (32768 / kBK)
constexpr int kNB = 2;                     // 128 x 256 CTA tiles

__device__ __forceinline__ int64_t minI64(int64_t a, int64_t b) { return a < b ? a : b; }

// The tile test on the device, in 32-bit arithmetic (the host checks every index fits).
struct TileMask {
  const int32_t* tileMax;
  int32_t tokenTiles, tileRows, tileCols;
  int32_t keepBits;

  __device__ __forceinline__ bool keptTile(int32_t tokenTile, int32_t vocabTile) const {
    return tileMax[vocabTile * tokenTiles + tokenTile] >= keepBits;
  }
  // Any kept tile among tokens [t0, t1) x vocabulary [v0, v1) (non-empty ranges).
  __device__ __forceinline__ bool anyKept(int32_t t0, int32_t t1, int32_t v0, int32_t v1) const {
    for (int32_t vt = v0 / tileCols; vt <= (v1 - 1) / tileCols; ++vt)
      for (int32_t tt = t0 / tileRows; tt <= (t1 - 1) / tileRows; ++tt)
        if (keptTile(tt, vt)) return true;
    return false;
  }
};

TileMask maskOf(const CceFilterTiles& tiles) {
  return TileMask{tiles.tileMax, int32_t(tiles.tokenTiles), int32_t(tiles.tileRows),
                  int32_t(tiles.tileCols), tiles.keepBits};
}

// The strip tile of block blockIdx.x (token tile blockIdx.x / vocabTiles, vocabulary tile
// blockIdx.x % vocabTiles): strip rows [r0, r1) x columns [c0, c1) in `groups` groups of 4 columns
// a row (`total` groups), and its slot in mask.tileMax.
struct StripTile {
  int64_t r0, r1, c0, c1, slot;
  int32_t groups, total;
};

__device__ __forceinline__ StripTile stripTileOf(const TileMask& mask, int32_t vocabTiles,
                                                 int64_t rows, int64_t cols, int64_t rowBegin,
                                                 int64_t colBegin) {
  StripTile t;
  const int32_t tr = int32_t(blockIdx.x) / vocabTiles, tc = int32_t(blockIdx.x) % vocabTiles;
  t.r0 = int64_t(tr) * mask.tileRows;
  t.r1 = minI64(t.r0 + mask.tileRows, rows);
  t.c0 = int64_t(tc) * mask.tileCols;
  t.c1 = minI64(t.c0 + mask.tileCols, cols);
  t.groups = int32_t((t.c1 - t.c0 + 3) / 4);
  t.total = int32_t(t.r1 - t.r0) * t.groups;
  t.slot = ((colBegin + t.c0) / mask.tileCols) * int64_t(mask.tokenTiles) +
           (rowBegin + t.r0) / mask.tileRows;
  return t;
}

// The max of `v` over the block's kGradThreads threads, returned to every thread. warpMax:
// kGradThreads / 32 floats of shared memory; once per kernel (warpMax is not released).
__device__ __forceinline__ float blockMax(float v, float* warpMax) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) warpMax[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < kGradThreads / 32; ++w) m = fmaxf(m, warpMax[w]);
  return m;
}

// Block (k, i): chunk i of strip tile k (token tile k / vocabTiles, vocabulary tile k %
// vocabTiles) in groups of 4 columns (vector: cols, tileCols and ldG multiples of 4); writes g and
// folds the chunk's max |dz / g_t| into the tile's.
__global__ void __launch_bounds__(kGradThreads)
    cce_grad_tiles_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                          int64_t rowBegin, int64_t colBegin, const int32_t* __restrict__ targets,
                          int64_t vocab, int32_t ignoreIndex, float zLossCoef, float cap,
                          const float* __restrict__ lse, const int32_t* __restrict__ validCount,
                          float dLoss, TileMask mask, int32_t vocabTiles, bf16* __restrict__ g,
                          int64_t ldG, bool vector) {
  __shared__ float warpMax[kGradThreads / 32];
  const int32_t valid = validCount[0];
  const float scale = valid > 0 ? dLoss / float(valid) : 0.0f;
  const StripTile tile = stripTileOf(mask, vocabTiles, rows, cols, rowBegin, colBegin);
  const int64_t c1 = tile.c1;
  float maxAbs = 0.0f;
  for (int32_t j = int32_t(blockIdx.y) * kGradThreads + int32_t(threadIdx.x); j < tile.total;
       j += int32_t(gridDim.y) * kGradThreads) {
    const int64_t r = tile.r0 + j / tile.groups, c = tile.c0 + int64_t(j % tile.groups) * 4;
    const int64_t t = rowBegin + r;
    const int32_t y = targets[t];
    bf16* gRow = g + r * ldG;
    const bool vec = vector && c + 4 <= c1;
    if (y == ignoreIndex || y < 0 || int64_t(y) >= vocab || valid == 0) {
      zeroFour(gRow, c, c1, vec);
      continue;
    }
    const GradRow row{z + r * cols, gRow, int64_t(y) - colBegin, lse[t], scale, zLossCoef, cap};
    maxAbs = fmaxf(maxAbs, gradFour(row, c, c1, vec));
  }
  const float m = blockMax(maxAbs, warpMax);
  if (threadIdx.x == 0) {
    atomicMax(const_cast<int32_t*>(mask.tileMax) + tile.slot, __float_as_int(m));  // m >= 0
  }
}

// Block k: the whole strip tile k (at most kFusedGroups groups of 4 columns per thread): the
// gradient is held in registers until the block knows the tile's maximum, then written to g (when
// kept != g) and to kept (zeros for a filtered tile), and the maximum to its slot (one block a
// tile: a plain store). One pass instead of the gradient kernel and cce_zero_filtered_kernel.
__global__ void __launch_bounds__(kGradThreads)
    cce_grad_tiles_fused_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                                int64_t rowBegin, int64_t colBegin,
                                const int32_t* __restrict__ targets, int64_t vocab,
                                int32_t ignoreIndex, float zLossCoef, float cap,
                                const float* __restrict__ lse,
                                const int32_t* __restrict__ validCount, float dLoss, TileMask mask,
                                int32_t vocabTiles, bf16* g, int64_t ldG, bf16* kept,
                                bool vector) {
  __shared__ float warpMax[kGradThreads / 32];
  const int32_t valid = validCount[0];
  const float scale = valid > 0 ? dLoss / float(valid) : 0.0f;
  const StripTile tile = stripTileOf(mask, vocabTiles, rows, cols, rowBegin, colBegin);
  const int64_t c1 = tile.c1;
  uint2 held[kFusedGroups];  // 4 bf16 each
  float maxAbs = 0.0f;
#pragma unroll
  for (int i = 0; i < kFusedGroups; ++i) {
    const int32_t j = int32_t(threadIdx.x) + i * kGradThreads;
    held[i] = make_uint2(0u, 0u);
    if (j >= tile.total) continue;
    const int64_t r = tile.r0 + j / tile.groups, c = tile.c0 + int64_t(j % tile.groups) * 4;
    const int64_t t = rowBegin + r;
    const int32_t y = targets[t];
    if (y == ignoreIndex || y < 0 || int64_t(y) >= vocab || valid == 0) continue;
    const GradRow row{z + r * cols, nullptr, int64_t(y) - colBegin, lse[t], scale, zLossCoef,
                      cap};
    maxAbs = fmaxf(maxAbs, gradFourPacked(row, c, c1, vector && c + 4 <= c1, held[i]));
  }
  const float m = blockMax(maxAbs, warpMax);
  if (threadIdx.x == 0) const_cast<int32_t*>(mask.tileMax)[tile.slot] = __float_as_int(m);
  const bool keep = __float_as_int(m) >= mask.keepBits;  // m >= 0: int order is float order
#pragma unroll
  for (int i = 0; i < kFusedGroups; ++i) {
    const int32_t j = int32_t(threadIdx.x) + i * kGradThreads;
    if (j >= tile.total) continue;
    const int64_t r = tile.r0 + j / tile.groups, c = tile.c0 + int64_t(j % tile.groups) * 4;
    const int64_t at = r * ldG + c;
    const bool vec = vector && c + 4 <= c1;
    const int n = c + 4 <= c1 ? 4 : int(c1 - c);
    if (kept != g) storeFour(g + at, held[i], n, vec);
    storeFour(kept + at, keep ? held[i] : make_uint2(0u, 0u), n, vec);
  }
}

// Block k: strip tile k as above; out = g where the tile is kept, else 0 (in place when out == g:
// kept tiles are left alone). Groups of 4 columns (vector as above).
__global__ void __launch_bounds__(kGradThreads)
    cce_zero_filtered_kernel(const bf16* g, int64_t rows, int64_t cols, int64_t ldG,
                             int64_t rowBegin, int64_t colBegin, TileMask mask,
                             int32_t vocabTiles, bf16* out, bool vector) {
  const StripTile tile = stripTileOf(mask, vocabTiles, rows, cols, rowBegin, colBegin);
  const bool kept = mask.tileMax[tile.slot] >= mask.keepBits;
  if (kept && out == g) return;
  for (int32_t j = int32_t(threadIdx.x); j < tile.total; j += kGradThreads) {
    const int64_t rowStart = (tile.r0 + j / tile.groups) * ldG;
    const int64_t at = rowStart + tile.c0 + int64_t(j % tile.groups) * 4;
    const int64_t end = rowStart + tile.c1;  // the row's tile end
    const bool vec = vector && at + 4 <= end;
    if (!kept) {
      zeroFour(out, at, end, vec);
    } else if (vec) {
      *reinterpret_cast<uint2*>(out + at) = *reinterpret_cast<const uint2*>(g + at);
    } else {
      for (int64_t i = at; i < end && i < at + 4; ++i) out[i] = g[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tile-skipping GEMMs.

// The K steps a skipping CTA multiplies: steps[0 .. count) ascending.
struct StepList {
  const int16_t* steps;
  int count;
};

// Lists the K steps kt < kSteps (<= kMaxKSteps) for which keep(kt) holds, in the shared memory at
// `scratch` (kMaxKSteps * 3 + 4 bytes after the mainloop's stages); every thread of the CTA calls
// it and gets the same list.
template <class Keep>
__device__ StepList listKeptSteps(unsigned char* scratch, int kSteps, Keep keep) {
  int16_t* list = reinterpret_cast<int16_t*>(scratch);
  uint8_t* flags = reinterpret_cast<uint8_t*>(list + kMaxKSteps);
  int* count = reinterpret_cast<int*>(flags + kMaxKSteps);
  for (int kt = int(threadIdx.x); kt < kSteps; kt += kThreads) flags[kt] = keep(kt) ? 1 : 0;
  __syncthreads();
  if (threadIdx.x < 32) {
    const unsigned lane = threadIdx.x;
    int running = 0;
    for (int base = 0; base < kSteps; base += 32) {
      const bool on = base + int(lane) < kSteps && flags[base + lane] != 0;
      const unsigned ballot = __ballot_sync(0xffffffffu, on);
      if (on) list[running + __popc(ballot & ((1u << lane) - 1u))] = int16_t(base + int(lane));
      running += __popc(ballot);
    }
    if (lane == 0) *count = running;
  }
  __syncthreads();
  return StepList{list, *count};
}

// A grouped-mainloop operand loader (grouped::LoadKCols / LoadKRows, one source) whose K step kt
// is read at list[kt]. The filtered tiles are already zeros in G (cceGradStripTiles).
template <class Inner>
struct Listed {
  static constexpr bool kKMajor = Inner::kKMajor;
  static constexpr int kLd = Inner::kLd;
  static constexpr int kTileBytes = Inner::kTileBytes;

  Inner inner;
  const int16_t* list;

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    inner.load(tile, int(list[kt]));
  }
};

using GradRowsLoader = Listed<grouped::LoadKCols<kBM>>;  // dh's A: G rows [M][K]
using GradColsLoader = Listed<grouped::LoadKRows<kBM>>;  // dWv's A: G^T, read as G [K][M]
using DenseLoader = Listed<grouped::LoadKRows<kBN>>;     // Wv or h rows [K][N]
constexpr int kNoSecondSource = 1 << 30;                 // the loaders' kTiles1: one source

template <class LoadA>
using SkipSmem = grouped::MainloopSmem<LoadA, DenseLoader, kNB>;

template <class LoadA>
constexpr int skipSmemBytes() {
  return SkipSmem<LoadA>::kBytes + kMaxKSteps * 3 + 16;  // listKeptSteps' list, flags, count
}

using Accumulators = float[kNB][kMi][kNi][4];

__device__ __forceinline__ void zeroAccumulators(Accumulators& acc) {
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[b][mi][ni][q] = 0.0f;
}

// Writes (or, with `accumulate`, adds) a CTA's fp32 tile into out[rows][d] (row-major): its rows
// r0 + accRow(...) below `rows`, its columns n0 + b * kBN + accCol(...) below d, two at a time.
__device__ __forceinline__ void storeAccumulators(const Accumulators& acc, int64_t r0,
                                                  int64_t rows, int64_t n0, int64_t d,
                                                  bool accumulate, float* out) {
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = r0 + accRow(mi, 2 * h), col = n0 + b * kBN + accCol(ni);
          if (r >= rows || col >= d) continue;
          float2* at = reinterpret_cast<float2*>(out + r * d + col);
          float2 v = make_float2(acc[b][mi][ni][2 * h], acc[b][mi][ni][2 * h + 1]);
          if (accumulate) {
            const float2 old = *at;
            v.x += old.x;
            v.y += old.y;
          }
          *at = v;
        }
}

__global__ void __launch_bounds__(kThreads, 1)
    cce_skip_dh_kernel(const bf16_t* g, int64_t ldG, int64_t rows, int64_t cols, int64_t rowBegin,
                       int64_t colBegin, const bf16_t* wvBlock, int64_t d, TileMask mask,
                       bool accumulate, float* dh) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t r0 = int64_t(blockIdx.y) * kBM, r1 = minI64(r0 + kBM, rows);
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kSteps = int((cols + kBK - 1) / kBK);
  const StepList kept = listKeptSteps(
      smem + SkipSmem<GradRowsLoader>::kBytes, kSteps, [&](int kt) {
        const int64_t k0 = int64_t(kt) * kBK, k1 = minI64(k0 + kBK, cols);
        return mask.anyKept(int32_t(rowBegin + r0), int32_t(rowBegin + r1),
                            int32_t(colBegin + k0), int32_t(colBegin + k1));
      });
  Accumulators acc;
  if (kept.count > 0) {
    GradRowsLoader la{{}, kept.steps};
    la.inner.init(g, nullptr, ldG, nullptr, r0, rows, cols, kNoSecondSource);
    DenseLoader lb[kNB];
#pragma unroll
    for (int b = 0; b < kNB; ++b) {
      lb[b].inner.init(wvBlock, nullptr, d, nullptr, 0, cols, n0 + b * kBN, d, kNoSecondSource);
      lb[b].list = kept.steps;
    }
    grouped::groupedMainloop<GradRowsLoader, DenseLoader, kNB>(smem, la, lb, kept.count, acc);
  } else if (accumulate) {
    return;  // nothing to add
  } else {
    zeroAccumulators(acc);
  }
  storeAccumulators(acc, r0, rows, n0, d, accumulate, dh);
}

__global__ void __launch_bounds__(kThreads, 1)
    cce_skip_dw_kernel(const bf16_t* g, int64_t ldG, int64_t rows, int64_t cols, int64_t rowBegin,
                       int64_t colBegin, const bf16_t* hGroup, int64_t d, TileMask mask,
                       float* dWv) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t m0 = int64_t(blockIdx.y) * kBM, m1 = minI64(m0 + kBM, cols);
  const int64_t n0 = int64_t(blockIdx.x) * kNB * kBN;
  const int kSteps = int((rows + kBK - 1) / kBK);
  const StepList kept = listKeptSteps(
      smem + SkipSmem<GradColsLoader>::kBytes, kSteps, [&](int kt) {
        const int64_t k0 = int64_t(kt) * kBK, k1 = minI64(k0 + kBK, rows);
        return mask.anyKept(int32_t(rowBegin + k0), int32_t(rowBegin + k1),
                            int32_t(colBegin + m0), int32_t(colBegin + m1));
      });
  if (kept.count == 0) return;  // nothing to add
  // G's zero padding past cols is read too; its products land in rows >= cols (not stored).
  GradColsLoader la{{}, kept.steps};
  la.inner.init(g, nullptr, ldG, nullptr, 0, rows, m0, ldG, kNoSecondSource);
  DenseLoader lb[kNB];
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].inner.init(hGroup, nullptr, d, nullptr, 0, rows, n0 + b * kBN, d, kNoSecondSource);
    lb[b].list = kept.steps;
  }
  Accumulators acc;
  grouped::groupedMainloop<GradColsLoader, DenseLoader, kNB>(smem, la, lb, kept.count, acc);
  storeAccumulators(acc, m0, cols, n0, d, /*accumulate=*/true, dWv);
}

// Raises `kernel`'s dynamic shared memory limit to `bytes`, once per process (the attribute
// stays set; a failure is not remembered, so the next launch asks again).
template <class Kernel>
Status allowSmemOnce(Kernel kernel, int bytes, std::atomic<bool>& done) {
  if (done.load(std::memory_order_acquire)) return Status::ok();
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.store(true, std::memory_order_release);
  return Status::ok();
}

std::atomic<bool> g_dhSmemAllowed{false};
std::atomic<bool> g_dwSmemAllowed{false};

}  // namespace

int32_t cceKeepBits(double threshold) {
  MOEWB_CHECK(threshold > 0);
  float f = float(threshold);
  if (double(f) < threshold) f = std::nextafter(f, INFINITY);
  int32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

Status cceGradStripTiles(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                         int64_t rowBegin, int64_t colBegin, const int32_t* targets,
                         int64_t vocab, const LinearLossOptions& options, const float* lse,
                         const int32_t* validCount, float dLoss, const CceFilterTiles& tiles,
                         bf16* g, int64_t ldG, bf16* kept) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  MOEWB_CHECK(tiles.tileRows > 0 && tiles.tileCols > 0 && ldG >= cols);
  MOEWB_CHECK(rowBegin % tiles.tileRows == 0 && colBegin % tiles.tileCols == 0);
  if (ldG > cols) {  // the padding the skipping GEMMs read as zeros
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(g + cols, size_t(ldG) * sizeof(bf16), 0,
                                                 size_t(ldG - cols) * sizeof(bf16), size_t(rows),
                                                 stream));
  }
  const int64_t tokenTiles = (rows + tiles.tileRows - 1) / tiles.tileRows;
  const int64_t vocabTiles = (cols + tiles.tileCols - 1) / tiles.tileCols;
  MOEWB_CHECK(tokenTiles * vocabTiles < (int64_t(1) << 31));
  const int64_t tileGroups =
      std::min(tiles.tileRows, rows) * ((std::min(tiles.tileCols, cols) + 3) / 4);
  const bool vector = cols % 4 == 0 && tiles.tileCols % 4 == 0 && ldG % 4 == 0;
  const unsigned tileBlocks = unsigned(tokenTiles * vocabTiles);
  if (tileGroups <= int64_t(kGradThreads) * kFusedGroups) {  // one pass
    cce_grad_tiles_fused_kernel<<<tileBlocks, kGradThreads, 0, stream>>>(
        z, rows, cols, rowBegin, colBegin, targets, vocab, options.ignoreIndex,
        float(options.zLossCoef), float(options.softCap), lse, validCount, dLoss, maskOf(tiles),
        int32_t(vocabTiles), g, ldG, kept, vector);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::ok();
  }
  const int64_t perBlock = int64_t(kGradThreads) * kGroupsPerThread;
  const int64_t chunks =
      std::clamp<int64_t>((tileGroups + perBlock - 1) / perBlock, 1, kGradMaxChunks);
  cce_grad_tiles_kernel<<<dim3(tileBlocks, unsigned(chunks)), kGradThreads, 0, stream>>>(
      z, rows, cols, rowBegin, colBegin, targets, vocab, options.ignoreIndex,
      float(options.zLossCoef), float(options.softCap), lse, validCount, dLoss, maskOf(tiles),
      int32_t(vocabTiles), g, ldG, vector);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  const bool copyVector = tiles.tileCols % 4 == 0 && ldG % 4 == 0;
  cce_zero_filtered_kernel<<<tileBlocks, kGradThreads, 0, stream>>>(
      g, rows, cols, ldG, rowBegin, colBegin, maskOf(tiles), int32_t(vocabTiles), kept,
      copyVector);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

bool cceSkipGemmSupported(int64_t rows, int64_t cols, int64_t d, int64_t tileCols) {
  return d % 8 == 0 && tileCols % 8 == 0 && rows <= int64_t(kMaxKSteps) * kBK &&
         cols <= int64_t(kMaxKSteps) * kBK;
}

Status cceSkipGemmDh(cudaStream_t stream, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                     int64_t rowBegin, int64_t colBegin, const bf16* wvBlock, int64_t d,
                     const CceFilterTiles& tiles, bool accumulate, float* dh) {
  if (rows <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(cceSkipGemmSupported(rows, cols, d, tiles.tileCols) && ldG % 8 == 0);
  constexpr int bytes = skipSmemBytes<GradRowsLoader>();
  MOEWB_RETURN_IF_ERROR(allowSmemOnce(cce_skip_dh_kernel, bytes, g_dhSmemAllowed));
  const dim3 grid(unsigned((d + kNB * kBN - 1) / (kNB * kBN)), unsigned((rows + kBM - 1) / kBM));
  cce_skip_dh_kernel<<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<const bf16_t*>(g), ldG, rows, cols, rowBegin, colBegin,
      reinterpret_cast<const bf16_t*>(wvBlock), d, maskOf(tiles), accumulate, dh);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status cceSkipGemmDw(cudaStream_t stream, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                     int64_t rowBegin, int64_t colBegin, const bf16* hGroup, int64_t d,
                     const CceFilterTiles& tiles, float* dWvBlock) {
  if (rows <= 0 || cols <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(cceSkipGemmSupported(rows, cols, d, tiles.tileCols) && ldG % 8 == 0);
  constexpr int bytes = skipSmemBytes<GradColsLoader>();
  MOEWB_RETURN_IF_ERROR(allowSmemOnce(cce_skip_dw_kernel, bytes, g_dwSmemAllowed));
  const dim3 grid(unsigned((d + kNB * kBN - 1) / (kNB * kBN)), unsigned((cols + kBM - 1) / kBM));
  cce_skip_dw_kernel<<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<const bf16_t*>(g), ldG, rows, cols, rowBegin, colBegin,
      reinterpret_cast<const bf16_t*>(hGroup), d, maskOf(tiles), dWvBlock);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
