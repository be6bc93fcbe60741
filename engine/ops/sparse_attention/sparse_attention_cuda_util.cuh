// Device helpers shared by the sparse attention kernels (private to engine/ops/sparse_attention):
// warp reductions whose result every lane receives bit-identically (a fixed shuffle-down tree,
// then a broadcast of lane 0), bf16 loads, and a block-wide exclusive scan of ints.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace moewb::engine::cuda::sparse_detail {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warpSum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(kFullMask, value, offset);
  }
  return __shfl_sync(kFullMask, value, 0);
}

__device__ __forceinline__ double warpSumDouble(double value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(kFullMask, value, offset);
  }
  return __shfl_sync(kFullMask, value, 0);
}

__device__ __forceinline__ float warpMax(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_down_sync(kFullMask, value, offset));
  }
  return __shfl_sync(kFullMask, value, 0);
}

__device__ __forceinline__ float loadBf16(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

// Exclusive prefix sum of `flag` over the block (blockDim.x a multiple of 32, <= 1024); `total`
// receives the block's sum. `warpSums` is shared scratch of 32 ints. Contains __syncthreads():
// every thread of the block must call it.
__device__ __forceinline__ int blockExclusiveScan(int flag, int& total, int* warpSums) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int warps = int(blockDim.x) / 32;
  int inclusive = flag;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int up = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) warpSums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int v = lane < warps ? warpSums[lane] : 0;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int up = __shfl_up_sync(kFullMask, v, offset);
      if (lane >= offset) v += up;
    }
    warpSums[lane] = v;  // inclusive prefix over warps
  }
  __syncthreads();
  const int warpOffset = warp > 0 ? warpSums[warp - 1] : 0;
  total = warpSums[warps - 1];
  __syncthreads();  // warpSums may be reused by the next call
  return warpOffset + inclusive - flag;
}

}  // namespace moewb::engine::cuda::sparse_detail
