// The backward products of the chunked KDA core, round 3 (bench/scratch/kda_chunk_03.md; the
// engine's only version: round 2, kda_bwd_products_kernel, which staged fp32 and split every
// fragment per warp, was never reached once round 3 ran for every shape, and is gone). Per
// (chunk, b * HV + hv, product z) P_z = X Y^T over the value dim V (see the kernel), split bf16
// hi + lo operands on mma.sync (hi·hi + hi·lo + lo·hi). Changes against round 2 (same bits):
//  1. Operands are split into bf16 hi / lo ONCE, while staging, and kept in shared memory as
//     packed pairs (hi rows then lo rows, same bytes as the fp32 copy): fragments become 32-bit
//     loads with no ALU, instead of every warp re-splitting the Y rows it reads (4 warps share
//     each Y row, 2 each X row). P0..P4 are the same bits as round 2's.
//  2. rowsum(S ⊙ dS) is summed while dS is staged (S read once, float4, in the same pass), in a
//     fixed order: 4 consecutive columns per lane, then a warp shuffle tree; dS is not re-read.
//  3. float2 stores of the outputs (full 32-byte sectors per row).
#pragma once

#include "ops/kda/kda_chunk_kernels.cuh"

namespace moewb::engine::cuda::kda_detail {

// Stages rows [0, rows) x columns [0, vpad) of a row-major fp32 / bf16 source (row stride
// `stride`) split into packed bf16 hi / lo pairs: pair p of row r at hi[r * ldp + p], lo[...];
// rows >= valid and columns >= vd are zero. One warp per row, 4 columns per lane. With kDot,
// dotWith (fp32, same layout and stride as src) gives dotOut[r] = sum over columns of
// src ⊙ dotWith for the rows r < valid (fixed order); without, both are ignored.
template <bool kDot, typename T>
__device__ inline void stageRowsSplit(uint32_t* hi, uint32_t* lo, int ldp, const T* src,
                                      int64_t stride, int rows, int valid, int vd, int vpad,
                                      const float* dotWith, float* dotOut) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const bool vec = (vd & 3) == 0 && (stride & 3) == 0 &&
                   (reinterpret_cast<uintptr_t>(src) & (4 * sizeof(T) - 1)) == 0 &&
                   (!kDot || (reinterpret_cast<uintptr_t>(dotWith) & 15) == 0);
#pragma unroll 4
  for (int r = warp; r < rows; r += warps) {
    float dot = 0.f;
    for (int c = 4 * lane; c < vpad; c += 128) {
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < valid) {
        const T* q = src + r * stride + c;
        if (vec) {
          if (c < vd) x = load4(q);
        } else {
          x.x = c < vd ? toFloat(q[0]) : 0.f;
          x.y = c + 1 < vd ? toFloat(q[1]) : 0.f;
          x.z = c + 2 < vd ? toFloat(q[2]) : 0.f;
          x.w = c + 3 < vd ? toFloat(q[3]) : 0.f;
        }
        if (kDot && c < vd) {
          const float* s = dotWith + r * stride + c;
          float4 y;
          if (vec) {
            y = load4(s);
          } else {
            y.x = s[0];
            y.y = c + 1 < vd ? s[1] : 0.f;
            y.z = c + 2 < vd ? s[2] : 0.f;
            y.w = c + 3 < vd ? s[3] : 0.f;
          }
          dot += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
        }
      }
      uint32_t h0, h1, l0, l1;
      splitBf16(make_float2(x.x, x.y), h0, l0);
      splitBf16(make_float2(x.z, x.w), h1, l1);
      *reinterpret_cast<uint2*>(hi + r * ldp + c / 2) = make_uint2(h0, h1);
      *reinterpret_cast<uint2*>(lo + r * ldp + c / 2) = make_uint2(l0, l1);
    }
    if (kDot) {
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (lane == 0 && r < valid) dotOut[r] = dot;
    }
  }
}

// One CTA per (chunk, b * HV + hv, product z) computes P_z = X Y^T over the value dim V:
//   z = 0: dO S^T   [C, K]      z = 1: Vn dS^T [C, K] (and rowsum(S ⊙ dS) [K])
//   z = 2: dVn S^T  [C, K]      z = 3: dO Vn^T [C, C]      z = 4: dVn v^T [C, C]
// S / dS are the chunk's entry state / the gradient of the state leaving it. Rows of X (tokens)
// >= c and padding are zero, so padded rows / columns of the outputs are written as zeros.
__global__ void __launch_bounds__(kProdThreads, 1)
    kda_bwd_products_r3_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = productLd(vd), vpad = ld - 8, ldp = ld / 2;
  const int z = int(blockIdx.z);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int nCols = z < 3 ? kd : cMax;  // columns of P_z = rows of Y
  const int nPad = (nCols + 7) / 8 * 8;
  uint32_t* xh = reinterpret_cast<uint32_t*>(smem);  // [64, ldp] X hi pairs
  uint32_t* xl = xh + kProdRows * ldp;                // [64, ldp] X lo pairs
  uint32_t* yh = xl + kProdRows * ldp;                // [128, ldp] Y hi pairs
  uint32_t* yl = yh + kProdCols * ldp;                // [128, ldp] Y lo pairs
  const int64_t oStride = a.valueHeads * a.valueDim;
  const int64_t vBase = at.slot * cMax * vd;
  const int64_t sBase = at.slot * a.keyDim * a.valueDim;
  float* const noDot = nullptr;
  if (z == 0 || z == 3) {
    stageRowsSplit<false>(xh, xl, ldp, p.dO + at.row0 * oStride + at.vCol, oStride, kProdRows,
                          c, vd, vpad, noDot, noDot);
  } else {
    stageRowsSplit<false>(xh, xl, ldp, (z == 1 ? p.vn : p.dvn) + vBase, vd, kProdRows, c, vd,
                          vpad, noDot, noDot);
  }
  if (z == 1) {  // dS, and rowsum(S ⊙ dS) on the way
    stageRowsSplit<true>(yh, yl, ldp, p.dStates + sBase, vd, nPad, nCols, vd, vpad,
                         p.states + sBase, p.sds + at.slot * kd);
  } else if (z < 3) {
    stageRowsSplit<false>(yh, yl, ldp, p.states + sBase, vd, nPad, nCols, vd, vpad, noDot,
                          noDot);
  } else if (z == 3) {
    stageRowsSplit<false>(yh, yl, ldp, p.vn + vBase, vd, nPad, c, vd, vpad, noDot, noDot);
  } else {
    stageRowsSplit<false>(yh, yl, ldp, p.v + at.row0 * oStride + at.vCol, oStride, nPad, c, vd,
                          vpad, noDot, noDot);
  }
  __syncthreads();
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int m0 = (warp & 3) * 16;
  const int nTiles = nPad / 8, perWarp = (nTiles + 1) / 2, ntBegin = (warp >> 2) * perWarp;
  if (m0 >= cMax) return;  // warp-uniform; no barrier follows
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int k0 = 0; k0 < vpad; k0 += 16) {
    const int x0 = (m0 + gid) * ldp + k0 / 2 + tig, x1 = x0 + 8 * ldp;
    const uint32_t ah[4] = {xh[x0], xh[x1], xh[x0 + 4], xh[x1 + 4]};
    const uint32_t al[4] = {xl[x0], xl[x1], xl[x0 + 4], xl[x1 + 4]};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int nt = ntBegin + j;
      if (j < perWarp && nt < nTiles) {
        const int y0 = (nt * 8 + gid) * ldp + k0 / 2 + tig;
        const uint32_t bh[2] = {yh[y0], yh[y0 + 4]};
        const uint32_t bl[2] = {yl[y0], yl[y0 + 4]};
        mma16816(acc[j], al, bh);
        mma16816(acc[j], ah, bl);
        mma16816(acc[j], ah, bh);
      }
    }
  }
  float* out = z == 0 ? p.p0 : z == 1 ? p.p1 : z == 2 ? p.p2 : z == 3 ? p.p3 : p.p4;
  out += at.slot * cMax * nCols;
  const bool pairs = (nCols & 1) == 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int nt = ntBegin + j;
    if (j < perWarp && nt < nTiles) {
      const int col = nt * 8 + 2 * tig;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + gid + 8 * h;
        if (row >= cMax) continue;
        if (pairs && col + 1 < nCols) {
          *reinterpret_cast<float2*>(out + row * nCols + col) =
              make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
          continue;
        }
        if (col < nCols) out[row * nCols + col] = acc[j][2 * h];
        if (col + 1 < nCols) out[row * nCols + col + 1] = acc[j][2 * h + 1];
      }
    }
  }
}

// The five products and rowsum(S ⊙ dS): reads states, dStates, dO, v, vn, dvn; writes p0..p4,
// sds. Queues one kernel on `stream`; returns the attribute or launch error.
inline cudaError_t launchBackwardProductsR3(cudaStream_t stream, const CoreArgs& args,
                                           const IntraBwdArgs& in) {
  const int64_t bytes = productsSharedBytes(args.valueDim);
  cudaError_t err = allowSharedBytes(kda_bwd_products_r3_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_products_r3_kernel<<<chunkGrid(args, kNumProducts), kProdThreads, size_t(bytes),
                               stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
