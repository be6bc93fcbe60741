// Private to ops/cce on the GPU: CCE's gradient filtering (ops/cce/cce_cuda.h). The logit
// gradient of a backward strip is cut into filter tiles of tileRows tokens x tileCols vocabulary
// entries, aligned at token 0 and vocabulary entry 0 (the CPU reference's token and vocabulary
// blocks); a tile whose every |dz / g_t| is below the threshold adds nothing to dh (and, when
// dWv is filtered too, nothing to dWv). The kernels below write each tile's maximum, zero the
// filtered tiles, and run the two gradient GEMMs over the K steps that meet a kept tile only
// (bf16 mma.sync on the grouped experts' mainloop, ops/experts/grouped_gemm_cuda.cuh). Host code
// that allocates stays in cce_cuda.cpp.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/chunk_loss/linear_loss.h"

namespace moewb::engine::cuda {

// The filter tiles of one backward: tileMax[vocabTile * tokenTiles + tokenTile] holds the fp32
// bits (as int: order-preserving for the non-negative maxima) of the tile's max |dz / g_t|,
// zeroed before the first strip; a tile is kept when that maximum is >= the threshold.
struct CceFilterTiles {
  int32_t* tileMax = nullptr;  // [ceil(V / tileCols), tokenTiles]
  int64_t tokenTiles = 0;      // ceil(N / tileRows)
  int64_t tileRows = 0;        // tokens per tile (> 0)
  int64_t tileCols = 0;        // vocabulary entries per tile (> 0)
  int32_t keepBits = 0;        // fp32 bits of the smallest float >= the threshold (> 0)
};

// keepBits for `threshold` (> 0): the bits of the smallest float f with double(f) >= threshold,
// so that max >= f exactly when double(max) >= threshold.
int32_t cceKeepBits(double threshold);

// The strip of tokens rowBegin.. (rows) x vocabulary colBegin.. (cols), both multiples of the tile
// sizes: g[r, c] (ld ldG >= cols; columns cols..ldG-1 are written 0) = bf16(dz) as
// linearLossGradStrip, each tile's max |dz / g_t| into tiles.tileMax (zeroed before the first
// strip), and kept[r, c] (ld ldG; may equal g) = g[r, c] where the tile is kept, else 0. Tiles of
// at most 16384 entries take one pass (the gradient held in registers until the tile's maximum is
// known); larger ones a gradient pass and a zeroing pass. Errors: launch errors.
Status cceGradStripTiles(cudaStream_t stream, const float* z, int64_t rows, int64_t cols,
                         int64_t rowBegin, int64_t colBegin, const int32_t* targets,
                         int64_t vocab, const LinearLossOptions& options, const float* lse,
                         const int32_t* validCount, float dLoss, const CceFilterTiles& tiles,
                         bf16* g, int64_t ldG, bf16* kept);

// Whether the tile-skipping GEMMs take this strip: d and tileCols multiples of 8, rows and cols
// at most 32768 (the K steps a CTA lists in shared memory).
bool cceSkipGemmSupported(int64_t rows, int64_t cols, int64_t d, int64_t tileCols);

// dh[rows, d] (fp32, ld d) = (accumulate ? dh : 0) + G Wv_block over the kept tiles only:
// g [rows, cols] (ld ldG, the strip of tokens rowBegin.. and vocabulary colBegin.., its filtered
// tiles zero and its columns cols..ldG-1 finite), wvBlock [cols, d] (the head's rows colBegin..).
// Needs cceSkipGemmSupported. Errors: launch errors.
Status cceSkipGemmDh(cudaStream_t stream, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                     int64_t rowBegin, int64_t colBegin, const bf16* wvBlock, int64_t d,
                     const CceFilterTiles& tiles, bool accumulate, float* dh);

// dWvBlock[cols, d] (fp32, ld d) += G^T h_group over the kept tiles only: g as cceSkipGemmDh,
// hGroup [rows, d] (the hidden rows rowBegin..). Needs cceSkipGemmSupported. Errors: launch
// errors.
Status cceSkipGemmDw(cudaStream_t stream, const bf16* g, int64_t ldG, int64_t rows, int64_t cols,
                     int64_t rowBegin, int64_t colBegin, const bf16* hGroup, int64_t d,
                     const CceFilterTiles& tiles, float* dWvBlock);

}  // namespace moewb::engine::cuda
