// Tensor-core operands split once (shared by the per-chunk backward, kda_bwd_chunk.cuh, and the
// intra-chunk forward round 5, kda_intra_r5.cuh): an fp32 matrix is split into bf16 hi = bf16(x),
// lo = bf16(x - hi) ONCE, when it is produced or staged, and kept in shared memory as two
// row-major bf16 matrices with a padded row stride (rows padded by 8 elements: 16-byte rows for
// ldmatrix, conflict-free). Fragments for mma.sync m16n8k16 come from ldmatrix (x4 for A, x2 for
// B), the .trans form where the product needs the transposed operand, so one copy serves both
// orientations; products take hi·hi + hi·lo + lo·hi (mma3, kda_recurrent_mma.cuh), or all four
// (mma4) on the diagonal blocks.
#pragma once

#include "ops/kda/kda_bwd_mma.cuh"  // expNeg, mma3, CoreArgs, bf16

namespace moewb::engine::cuda::kda_detail {

__host__ __device__ inline int64_t alignUp16(int64_t x) { return (x + 15) / 16 * 16; }

// A row-major matrix split into two bf16 matrices with the same padded row stride.
struct SplitMat {
  bf16* hi;
  bf16* lo;
  int ld;
  __device__ void put(int r, int col, float x) const {
    const bf16 h = __float2bfloat16_rn(x);
    hi[r * ld + col] = h;
    lo[r * ld + col] = __float2bfloat16_rn(x - __bfloat162float(h));
  }
  // put(r, col, x0) and put(r, col + 1, x1) (the same roundings) as 4-byte stores; col and ld
  // even.
  __device__ void put2(int r, int col, float x0, float x1) const {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    const float2 back = __bfloat1622float2(h);
    *reinterpret_cast<__nv_bfloat162*>(hi + r * ld + col) = h;
    *reinterpret_cast<__nv_bfloat162*>(lo + r * ld + col) =
        __floats2bfloat162_rn(x0 - back.x, x1 - back.y);
  }
};

// A fragment (16 x 16) A[m][k] = S[m0 + m][k0 + k].
__device__ __forceinline__ void fragA(uint32_t (&h)[4], uint32_t (&l)[4], const SplitMat& s,
                                      int m0, int k0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (m0 + (lane & 15)) * s.ld + k0 + (lane >> 4) * 8;
  ldsm4(h, s.hi + off);
  ldsm4(l, s.lo + off);
}
// A fragment A[m][k] = S[k0 + k][m0 + m] (the transpose of the stored matrix).
__device__ __forceinline__ void fragAT(uint32_t (&h)[4], uint32_t (&l)[4], const SplitMat& s,
                                       int m0, int k0) {
  const int lane = int(threadIdx.x) & 31, q = lane >> 3;
  const int off = (k0 + (q >> 1) * 8 + (lane & 7)) * s.ld + m0 + (q & 1) * 8;
  ldsm4t(h, s.hi + off);
  ldsm4t(l, s.lo + off);
}
// B fragment (16 x 8) B[k][n] = S[n0 + n][k0 + k].
__device__ __forceinline__ void fragB(uint32_t (&h)[2], uint32_t (&l)[2], const SplitMat& s,
                                      int k0, int n0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (n0 + (lane & 7)) * s.ld + k0 + ((lane >> 3) & 1) * 8;
  ldsm2(h, s.hi + off);
  ldsm2(l, s.lo + off);
}
// B fragment B[k][n] = S[k0 + k][n0 + n].
__device__ __forceinline__ void fragBT(uint32_t (&h)[2], uint32_t (&l)[2], const SplitMat& s,
                                       int k0, int n0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (k0 + (lane & 15)) * s.ld + n0;
  ldsm2t(h, s.hi + off);
  ldsm2t(l, s.lo + off);
}

// Largest block decay G_x0 - G_r (any key column of a 16-row diagonal block) that the diagonal
// blocks' tensor-core products take (the per-chunk backward's round 6, the intra forward's round
// 8): a factor e^{G_i - G_x0} >= e^-40 keeps its bf16 lo part far above fp32's normal range.
inline constexpr float kDiagMmaMaxDecay = 40.f;

// d += a b with split operands, lo·lo included (smallest product first; mma3 drops it, ≈ 2^-18
// relative per term): the diagonal blocks hold the largest pairwise terms (the least decayed),
// which the fp32 rounds summed elementwise, so they keep the fourth product.
__device__ __forceinline__ void mma4(float (&d)[4], const uint32_t (&ah)[4],
                                     const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                     const uint32_t (&bl)[2]) {
  mma16816(d, al, bl);
  mma3(d, ah, al, bh, bl);
}

// The split matrix at byte offset `off` of `base`: hi [rows, ld], then lo [rows, ld].
__device__ __forceinline__ SplitMat splitAt(unsigned char* base, int64_t off, int rows, int ld) {
  bf16* hi = reinterpret_cast<bf16*>(base + off);
  return {hi, hi + rows * ld, ld};
}

}  // namespace moewb::engine::cuda::kda_detail
