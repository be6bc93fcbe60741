// Round 9 of the expert GEMMs (bench/scratch/grouped_gemm_09.md), the GLU split: the gate+up and
// dh GEMMs run on round 5's warp-specialized kernel with plain epilogues (gatePre / upPre stored;
// dh stored in fp32) and the GLU forward / backward run here as bandwidth-bound elementwise
// passes, instead of inside epilogues that the tensor cores wait for. Per element the arithmetic
// of the fused epilogues (gluForwardDevice / gluBackwardDevice, round-to-nearest bf16):
//  - backward: the fused dh epilogue's inputs exactly (bf16 gatePre / upPre, the fp32 dh
//    accumulator), so dGate / dUp are round 2's bits;
//  - forward: h from the stored bf16 gatePre / upPre (the fused epilogue used the fp32
//    accumulators): h differs from round 2's in the last bits, as PyTorch's silu(g) * u on bf16
//    g and u does.
// Rows r < *rowCount (the permuted row count, read on the device: no host synchronisation) of
// [maxRows, cols] contiguous arrays; cols % 8 == 0 and 16-byte aligned bases (the grouped
// kernels' own shape rules). One thread per 8 consecutive elements, 16-byte loads and stores.
// Include from the sm_90a translation unit that defines the fused epilogues (the same compiler
// flags give the same per-element code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/experts/glu_activation_cuda.cuh"

namespace moewb::engine::cuda::glu_split {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per thread

union Bf16x8 {
  uint4 raw;
  __nv_bfloat162 pair[4];
};

__global__ void __launch_bounds__(kThreads)
    glu_split_fwd_kernel(GluDeviceParams p, const __nv_bfloat16* __restrict__ g,
                         const __nv_bfloat16* __restrict__ u, __nv_bfloat16* __restrict__ h,
                         int64_t maxRows, int64_t cols, const int32_t* __restrict__ rowCount) {
  const int64_t groups = min(maxRows, int64_t(__ldg(rowCount))) * cols / kVec;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < groups;
       i += int64_t(gridDim.x) * kThreads) {
    Bf16x8 gv, uv, hv;
    gv.raw = __ldg(reinterpret_cast<const uint4*>(g) + i);
    uv.raw = __ldg(reinterpret_cast<const uint4*>(u) + i);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float h0 = gluForwardDevice(p, __low2float(gv.pair[q]), __low2float(uv.pair[q]));
      const float h1 = gluForwardDevice(p, __high2float(gv.pair[q]), __high2float(uv.pair[q]));
      hv.pair[q] = __floats2bfloat162_rn(h0, h1);
    }
    reinterpret_cast<uint4*>(h)[i] = hv.raw;
  }
}

__global__ void __launch_bounds__(kThreads)
    glu_split_bwd_kernel(GluDeviceParams p, const __nv_bfloat16* __restrict__ g,
                         const __nv_bfloat16* __restrict__ u, const float* __restrict__ dh,
                         __nv_bfloat16* __restrict__ dg, __nv_bfloat16* __restrict__ du,
                         int64_t maxRows, int64_t cols, const int32_t* __restrict__ rowCount) {
  const int64_t groups = min(maxRows, int64_t(__ldg(rowCount))) * cols / kVec;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < groups;
       i += int64_t(gridDim.x) * kThreads) {
    Bf16x8 gv, uv, dgv, duv;
    gv.raw = __ldg(reinterpret_cast<const uint4*>(g) + i);
    uv.raw = __ldg(reinterpret_cast<const uint4*>(u) + i);
    const float4 d0 = __ldg(reinterpret_cast<const float4*>(dh) + 2 * i);
    const float4 d1 = __ldg(reinterpret_cast<const float4*>(dh) + 2 * i + 1);
    const float dhv[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float dg0, du0, dg1, du1;
      gluBackwardDevice(p, __low2float(gv.pair[q]), __low2float(uv.pair[q]), dhv[2 * q], dg0,
                        du0);
      gluBackwardDevice(p, __high2float(gv.pair[q]), __high2float(uv.pair[q]), dhv[2 * q + 1],
                        dg1, du1);
      dgv.pair[q] = __floats2bfloat162_rn(dg0, dg1);
      duv.pair[q] = __floats2bfloat162_rn(du0, du1);
    }
    reinterpret_cast<uint4*>(dg)[i] = dgv.raw;
    reinterpret_cast<uint4*>(du)[i] = duv.raw;
  }
}

// Blocks for `maxRows` x `cols` elements, 8 a thread, capped at a few waves (grid-stride).
inline unsigned gridFor(int64_t maxRows, int64_t cols, int multiprocessors) {
  const int64_t groups = maxRows * cols / kVec;
  const int64_t blocks = (groups + kThreads - 1) / kThreads;
  const int64_t cap = int64_t(multiprocessors) * 16;
  return unsigned(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

}  // namespace moewb::engine::cuda::glu_split
