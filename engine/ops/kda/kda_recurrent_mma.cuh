// Tensor-core helpers of the KDA chunk recurrences (kda_recurrent_r3.cuh; ENGINE-MATH §2.3 step 5
// and the dS recurrence of §2.5) and of the other tensor-core KDA kernels: the padded shapes and
// shared row strides of the recurrences, cp.async copies of workspace blocks, fragment loads from
// fp32 shared memory split into bf16 hi + lo, and mma3, the split-precision product every KDA
// kernel uses (hi·hi + hi·lo + lo·hi, fp32 accumulation; ~1e-5 relative, see
// kda_chunk_kernels.cuh). The recurrences' rounds 1 (fp32 FMA) and 2 (kda_fwd_mma_kernel /
// kda_bwd_dh_mma_kernel: the state S^T in fp32 shared memory, split by every warp that read it)
// were never reached once round 3 ran for every shape, and are gone (bench/scratch/kda_chunk_01.cu
// and _03.cu compared them at their commits).
#pragma once

#include "ops/kda/kda_chunk_kernels.cuh"

namespace moewb::engine::cuda::kda_detail {

constexpr int kRecK = 128;  // key dim padded
constexpr int kRecC = 64;   // chunk padded
// Row strides (floats): kLdRow for [rows, K] buffers read as B fragments along K (float2 loads,
// conflict-free since 136 = 8 mod 32), kLdCol for [C, K] buffers read down a column (scalar loads,
// 132 = 4 mod 32), kLdC / kLdCCol the same for [C, C] buffers.
constexpr int kLdRow = kRecK + 8, kLdCol = kRecK + 4, kLdC = kRecC + 8, kLdCCol = kRecC + 4;

// Queues the copy of a row-major global block [rows, cols] (contiguous) into shared rows of
// stride ld (a multiple of 4 floats, 16-byte aligned rows): 16-byte copies when cols % 4 == 0 and
// the source is 16-byte aligned, else 4-byte copies. One warp per row.
__device__ inline void cpAsyncRows(float* dst, int ld, const float* src, int rows, int cols) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  if ((cols & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    for (int r = warp; r < rows; r += warps) {
      for (int c = 4 * lane; c < cols; c += 128) cpAsync16(dst + r * ld + c, src + r * cols + c);
    }
  } else {
    for (int r = warp; r < rows; r += warps) {
      for (int c = lane; c < cols; c += 32) cpAsync4(dst + r * ld + c, src + r * cols + c);
    }
  }
}

__device__ __forceinline__ float2 lds2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}

// B fragment (k16 x n8) with B[k][n] = M[n][k], M row-major at `base` = &M[n0][k0] (float2 loads).
__device__ __forceinline__ void loadBRowsSplit(const float* base, int ld, int lane,
                                               uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const float* p = base + (lane >> 2) * ld + 2 * (lane & 3);
  splitBf16(lds2(p), hi[0], lo[0]);
  splitBf16(lds2(p + 8), hi[1], lo[1]);
}

// B fragment (k16 x n8) with B[k][n] = M[k][n], M row-major at `base` = &M[k0][n0] (scalar loads).
__device__ __forceinline__ void loadBColsSplit(const float* base, int ld, int lane,
                                               uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const float* p = base + 2 * (lane & 3) * ld + (lane >> 2);
  splitBf16(make_float2(p[0], p[ld]), hi[0], lo[0]);
  splitBf16(make_float2(p[8 * ld], p[9 * ld]), hi[1], lo[1]);
}

// d += a b in split precision (hi·hi + hi·lo + lo·hi; the small terms first).
__device__ __forceinline__ void mma3(float (&d)[4], const uint32_t (&ah)[4],
                                     const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                     const uint32_t (&bl)[2]) {
  mma16816(d, al, bh);
  mma16816(d, ah, bl);
  mma16816(d, ah, bh);
}

}  // namespace moewb::engine::cuda::kda_detail
