// CCE's gradient filtering on the GPU (see cce_filter_cuda.h): the logit gradient with its tile
// maxima, the zeroing of filtered tiles (the general path) and the two tile-skipping GEMMs.
//
// The skipping GEMMs run the grouped experts' mainloop (one 128-row A tile against two 128-column
// B tiles, BK = 32, 8 warps, a 4-stage cp.async pipeline, mma.sync m16n8k16 with fp32
// accumulators) over a list of K steps: each CTA first marks the K steps whose rows x columns
// meet a kept tile, compacts them into a list in shared memory, then multiplies those steps only.
// Inside a listed step the A loader zero-fills every 16-byte chunk that lies in a filtered tile
// (tiles are multiples of 8 columns wide, so a chunk never straddles two), so a CTA that spans a
// kept and a filtered tile still adds exactly the kept tiles. A CTA whose list is empty writes
// zeros (dh, when not accumulating) or nothing.
#define MOEWB_GROUPED_DEVICE_PARTS_ONLY
#include "ops/experts/grouped_gemm_cuda.cuh"
#undef MOEWB_GROUPED_DEVICE_PARTS_ONLY

#include <algorithm>
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
constexpr int64_t kGradMaxChunks = 1024;   // blocks per filter tile (gridDim.y <= 65535)
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
  __device__ __forceinline__ bool kept(int32_t token, int32_t vocab) const {
    return keptTile(token / tileRows, vocab / tileCols);
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

// Grid (strip tiles, chunks): block (k, j) walks its share of strip tile k (token tile k /
// vocabTiles, vocabulary tile k % vocabTiles), writes g and folds the tile's max |dz / g_t|.
__global__ void __launch_bounds__(kGradThreads)
    cce_grad_tiles_kernel(const float* __restrict__ z, int64_t rows, int64_t cols,
                          int64_t rowBegin, int64_t colBegin, const int32_t* __restrict__ targets,
                          int64_t vocab, int32_t ignoreIndex, float zLossCoef, float cap,
                          const float* __restrict__ lse, const int32_t* __restrict__ validCount,
                          float dLoss, TileMask mask, int64_t vocabTiles, bf16* __restrict__ g,
                          int64_t ldG) {
  __shared__ float warpMax[kGradThreads / 32];
  const int32_t valid = validCount[0];
  const float scale = valid > 0 ? dLoss / float(valid) : 0.0f;
  const int32_t tr = int32_t(blockIdx.x / vocabTiles), tc = int32_t(blockIdx.x % vocabTiles);
  const int64_t r0 = int64_t(tr) * mask.tileRows, r1 = minI64(r0 + mask.tileRows, rows);
  const int64_t c0 = int64_t(tc) * mask.tileCols, c1 = minI64(c0 + mask.tileCols, cols);
  const int32_t width = int32_t(c1 - c0), total = int32_t(r1 - r0) * width;
  float maxAbs = 0.0f;
  for (int32_t i = int32_t(blockIdx.y) * kGradThreads + int32_t(threadIdx.x); i < total;
       i += int32_t(gridDim.y) * kGradThreads) {
    const int64_t r = r0 + i / width, c = c0 + i % width;
    const int64_t t = rowBegin + r;
    const int32_t y = targets[t];
    bf16* out = g + r * ldG + c;
    if (y == ignoreIndex || y < 0 || int64_t(y) >= vocab || valid == 0) {
      *out = __float2bfloat16(0.0f);
      continue;
    }
    const float grad =
        unscaledGrad(z[r * cols + c], lse[t], colBegin + c == int64_t(y), zLossCoef, cap);
    maxAbs = fmaxf(maxAbs, fabsf(grad));
    *out = __float2bfloat16(grad * scale);
  }
  for (int o = 16; o > 0; o >>= 1) maxAbs = fmaxf(maxAbs, __shfl_xor_sync(0xffffffffu, maxAbs, o));
  if (threadIdx.x % 32 == 0) warpMax[threadIdx.x / 32] = maxAbs;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int w = 0; w < kGradThreads / 32; ++w) m = fmaxf(m, warpMax[w]);
    const int64_t tile = ((colBegin + c0) / mask.tileCols) * int64_t(mask.tokenTiles) +
                         (rowBegin + r0) / mask.tileRows;
    atomicMax(const_cast<int32_t*>(mask.tileMax) + tile, __float_as_int(m));  // m >= 0
  }
}

// In place safe (same index read then written by one thread).
__global__ void cce_zero_filtered_kernel(const bf16* g, int64_t rows, int64_t cols, int64_t ldG,
                                         int64_t rowBegin, int64_t colBegin, TileMask mask,
                                         bf16* out) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t at = r * ldG + c;
    out[at] = mask.kept(int32_t(rowBegin + r), int32_t(colBegin + c)) ? g[at]
                                                                     : __float2bfloat16(0.0f);
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

// A operand of dh: the strip's G rows [kBM][kBK] (K = vocabulary along the columns), K step kt
// read at list[kt]; chunks in filtered tiles and outside the strip are zero.
struct DhGradLoader {
  static constexpr bool kKMajor = false;
  static constexpr int kLd = kBK + 8;
  static constexpr int kTileBytes = kBM * kLd * 2;
  static constexpr int kChunksPerRow = kBK / 8;
  static constexpr int kPer = kBM * kChunksPerRow / kThreads;
  static_assert(kBM * kChunksPerRow % kThreads == 0, "whole chunks per thread");
  static_assert(kThreads % kChunksPerRow == 0, "a thread's chunks share their column");

  const bf16_t* row[kPer];  // null: row outside the strip
  int32_t tokenTile[kPer];  // the row's token tile
  const bf16_t* anyValid;
  const int16_t* list;
  int32_t cols, colBegin;
  TileMask mask;

  __device__ __forceinline__ void init(const bf16_t* g, int64_t ldG, int64_t r0, int64_t rows,
                                       int64_t rowBegin, int64_t stripCols, int64_t vocab0,
                                       const TileMask& m, const int16_t* steps) {
    anyValid = g;
    list = steps;
    cols = int32_t(stripCols);
    colBegin = int32_t(vocab0);
    mask = m;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int64_t r = r0 + (int(threadIdx.x) + p * kThreads) / kChunksPerRow;
      row[p] = r < rows ? g + r * ldG : nullptr;
      tokenTile[p] = int32_t((rowBegin + r) / m.tileRows);
    }
  }

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    const int c = (int(threadIdx.x) % kChunksPerRow) * 8;  // the same for every p
    const int32_t k = int32_t(list[kt]) * kBK + c;
    const int32_t vocabTile = (colBegin + k) / mask.tileCols;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int i = (int(threadIdx.x) + p * kThreads) / kChunksPerRow;
      const bool ok = row[p] != nullptr && k < cols && mask.keptTile(tokenTile[p], vocabTile);
      cpAsync16(tile + i * kLd + c, ok ? row[p] + k : anyValid, ok);
    }
  }
};

// A operand of dWv: G^T as [kBK][kBM] tiles of G rows (K = tokens along the rows, M = vocabulary
// along the columns), K step kt read at list[kt]; chunks in filtered tiles are zero.
struct DwGradLoader {
  static constexpr bool kKMajor = true;
  static constexpr int kLd = kBM + 8;
  static constexpr int kTileBytes = kBK * kLd * 2;
  static constexpr int kChunksPerRow = kBM / 8;
  static constexpr int kPer = kBK * kChunksPerRow / kThreads;
  static_assert(kBK * kChunksPerRow % kThreads == 0, "whole chunks per thread");
  static_assert(kThreads % kChunksPerRow == 0, "a thread's chunks share their column");

  const bf16_t* g;
  const int16_t* list;
  int64_t ldG;
  int32_t rows, m0, ldCols, rowBegin, colBegin;
  TileMask mask;

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    const int j = (int(threadIdx.x) % kChunksPerRow) * 8;  // the same for every p
    const int32_t m = m0 + j;
    const int32_t vocabTile = (colBegin + m) / mask.tileCols;
    const int32_t kBase = int32_t(list[kt]) * kBK;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int r = (int(threadIdx.x) + p * kThreads) / kChunksPerRow;
      const int32_t k = kBase + r;
      const bool ok = k < rows && m < ldCols &&
                      mask.keptTile((rowBegin + k) / mask.tileRows, vocabTile);
      cpAsync16(tile + r * kLd + j, ok ? g + int64_t(k) * ldG + m : g, ok);
    }
  }
};

// A plain [K][N] operand (grouped::LoadKRows) whose K step kt is read at list[kt].
struct ListedKRows {
  using Inner = grouped::LoadKRows<kBN>;
  static constexpr bool kKMajor = Inner::kKMajor;
  static constexpr int kLd = Inner::kLd;
  static constexpr int kTileBytes = Inner::kTileBytes;

  Inner inner;
  const int16_t* list;

  __device__ __forceinline__ void load(bf16_t* tile, int kt) const {
    inner.load(tile, int(list[kt]));
  }
};

template <class LoadA>
using SkipSmem = grouped::MainloopSmem<LoadA, ListedKRows, kNB>;

template <class LoadA>
constexpr int skipSmemBytes() {
  return SkipSmem<LoadA>::kBytes + kMaxKSteps * 3 + 16;  // listKeptSteps' list, flags, count
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
      smem + SkipSmem<DhGradLoader>::kBytes, kSteps, [&](int kt) {
        const int64_t k0 = int64_t(kt) * kBK, k1 = minI64(k0 + kBK, cols);
        return mask.anyKept(int32_t(rowBegin + r0), int32_t(rowBegin + r1),
                            int32_t(colBegin + k0), int32_t(colBegin + k1));
      });
  float acc[kNB][kMi][kNi][4];
  if (kept.count > 0) {
    DhGradLoader la;
    la.init(g, ldG, r0, rows, rowBegin, cols, colBegin, mask, kept.steps);
    ListedKRows lb[kNB];
#pragma unroll
    for (int b = 0; b < kNB; ++b) {
      lb[b].inner.init(wvBlock, nullptr, d, nullptr, 0, cols, n0 + b * kBN, d, 1 << 30);
      lb[b].list = kept.steps;
    }
    grouped::groupedMainloop<DhGradLoader, ListedKRows, kNB>(smem, la, lb, kept.count, acc);
  } else if (accumulate) {
    return;  // nothing to add
  } else {
#pragma unroll
    for (int b = 0; b < kNB; ++b)
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[b][mi][ni][q] = 0.0f;
  }
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
          float2* out = reinterpret_cast<float2*>(dh + r * d + col);
          float2 v = make_float2(acc[b][mi][ni][2 * h], acc[b][mi][ni][2 * h + 1]);
          if (accumulate) {
            const float2 old = *out;
            v.x += old.x;
            v.y += old.y;
          }
          *out = v;
        }
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
      smem + SkipSmem<DwGradLoader>::kBytes, kSteps, [&](int kt) {
        const int64_t k0 = int64_t(kt) * kBK, k1 = minI64(k0 + kBK, rows);
        return mask.anyKept(int32_t(rowBegin + k0), int32_t(rowBegin + k1),
                            int32_t(colBegin + m0), int32_t(colBegin + m1));
      });
  if (kept.count == 0) return;  // nothing to add
  DwGradLoader la;
  la.g = g;
  la.list = kept.steps;
  la.ldG = ldG;
  la.rows = int32_t(rows);
  la.m0 = int32_t(m0);
  la.ldCols = int32_t(ldG);  // the zero padding past cols is read; its products land past cols
  la.rowBegin = int32_t(rowBegin);
  la.colBegin = int32_t(colBegin);
  la.mask = mask;
  ListedKRows lb[kNB];
#pragma unroll
  for (int b = 0; b < kNB; ++b) {
    lb[b].inner.init(hGroup, nullptr, d, nullptr, 0, rows, n0 + b * kBN, d, 1 << 30);
    lb[b].list = kept.steps;
  }
  float acc[kNB][kMi][kNi][4];
  grouped::groupedMainloop<DwGradLoader, ListedKRows, kNB>(smem, la, lb, kept.count, acc);
#pragma unroll
  for (int b = 0; b < kNB; ++b)
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t m = m0 + accRow(mi, 2 * h), col = n0 + b * kBN + accCol(ni);
          if (m >= cols || col >= d) continue;
          float2* out = reinterpret_cast<float2*>(dWv + m * d + col);
          const float2 old = *out;
          *out = make_float2(old.x + acc[b][mi][ni][2 * h], old.y + acc[b][mi][ni][2 * h + 1]);
        }
}

template <class Kernel>
Status setSmem(Kernel kernel, int bytes) {
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return Status::ok();
}

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
                         bf16* g, int64_t ldG) {
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
  const int64_t tileElems = std::min(tiles.tileRows, rows) * std::min(tiles.tileCols, cols);
  const int64_t perBlock = int64_t(kGradThreads) * 8;  // ~8 entries per thread
  const int64_t chunks =
      std::clamp<int64_t>((tileElems + perBlock - 1) / perBlock, 1, kGradMaxChunks);
  cce_grad_tiles_kernel<<<dim3(unsigned(tokenTiles * vocabTiles), unsigned(chunks)), kGradThreads,
                          0, stream>>>(z, rows, cols, rowBegin, colBegin, targets, vocab,
                                       options.ignoreIndex, float(options.zLossCoef),
                                       float(options.softCap), lse, validCount, dLoss,
                                       maskOf(tiles), vocabTiles, g, ldG);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status cceZeroFilteredTiles(cudaStream_t stream, const bf16* g, int64_t rows, int64_t cols,
                            int64_t ldG, int64_t rowBegin, int64_t colBegin,
                            const CceFilterTiles& tiles, bf16* out) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  cce_zero_filtered_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(
      g, rows, cols, ldG, rowBegin, colBegin, maskOf(tiles), out);
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
  constexpr int bytes = skipSmemBytes<DhGradLoader>();
  MOEWB_RETURN_IF_ERROR(setSmem(cce_skip_dh_kernel, bytes));
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
  constexpr int bytes = skipSmemBytes<DwGradLoader>();
  MOEWB_RETURN_IF_ERROR(setSmem(cce_skip_dw_kernel, bytes));
  const dim3 grid(unsigned((d + kNB * kBN - 1) / (kNB * kBN)), unsigned((cols + kBM - 1) / kBM));
  cce_skip_dw_kernel<<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<const bf16_t*>(g), ldG, rows, cols, rowBegin, colBegin,
      reinterpret_cast<const bf16_t*>(hGroup), d, maskOf(tiles), dWvBlock);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
