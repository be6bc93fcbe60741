// Elementwise GLU forward / backward kernels over strided [rows, cols] arrays (see
// glu_activation_cuda.h): 8 elements a thread with 16-byte accesses when the columns, strides and
// bases allow it, one element a thread otherwise; the same per-element arithmetic either way.
#include <cstdint>
#include <initializer_list>

#include "runtime/cuda/cuda_check.h"
#include "ops/experts/glu_activation_cuda.cuh"
#include "ops/experts/glu_activation_cuda.h"

namespace moewb::engine::cuda {
namespace {

__global__ void glu_fwd_kernel(GluDeviceParams p, const bf16* __restrict__ g,
                               const bf16* __restrict__ u, int64_t ldIn, bf16* __restrict__ h,
                               int64_t ldOut, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float gv = __bfloat162float(g[r * ldIn + c]);
    const float uv = __bfloat162float(u[r * ldIn + c]);
    h[r * ldOut + c] = __float2bfloat16(gluForwardDevice(p, gv, uv));
  }
}

__global__ void glu_bwd_kernel(GluDeviceParams p, const bf16* g, const bf16* u, int64_t ldIn,
                               const bf16* dh, int64_t ldDh, bf16* dg, bf16* du, int64_t ldGrad,
                               int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float gv = __bfloat162float(g[r * ldIn + c]);
    const float uv = __bfloat162float(u[r * ldIn + c]);
    const float dhv = __bfloat162float(dh[r * ldDh + c]);
    float dgv, duv;
    gluBackwardDevice(p, gv, uv, dhv, dgv, duv);
    dg[r * ldGrad + c] = __float2bfloat16(dgv);
    du[r * ldGrad + c] = __float2bfloat16(duv);
  }
}

constexpr int kPack = 8;  // elements per thread in the pack kernels (16-byte bf16 accesses)

union Bf16x8 {
  uint4 raw;  // loaded and stored as one 16-byte access
  __nv_bfloat162 pair[4];
};

__device__ __forceinline__ uint4 loadPack(const bf16* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// glu_fwd_kernel's arithmetic on packs of 8 (cols % 8 == 0, every stride % 8 == 0, 16-byte
// aligned bases): one row / column split per 8 elements instead of per element.
__global__ void glu_fwd_pack_kernel(GluDeviceParams p, const bf16* __restrict__ g,
                                    const bf16* __restrict__ u, int64_t ldIn, bf16* __restrict__ h,
                                    int64_t ldOut, int64_t rows, int64_t rowPacks) {
  const int64_t total = rows * rowPacks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / rowPacks, c = (i - r * rowPacks) * kPack;
    Bf16x8 gv, uv, hv;
    gv.raw = loadPack(g + r * ldIn + c);
    uv.raw = loadPack(u + r * ldIn + c);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float h0 = gluForwardDevice(p, __low2float(gv.pair[q]), __low2float(uv.pair[q]));
      const float h1 = gluForwardDevice(p, __high2float(gv.pair[q]), __high2float(uv.pair[q]));
      hv.pair[q] = __halves2bfloat162(__float2bfloat16(h0), __float2bfloat16(h1));
    }
    *reinterpret_cast<uint4*>(h + r * ldOut + c) = hv.raw;
  }
}

// glu_bwd_kernel's arithmetic on packs of 8 (same rules; dg / du may alias g / u, each pack is
// read before it is written by the same thread).
__global__ void glu_bwd_pack_kernel(GluDeviceParams p, const bf16* g, const bf16* u, int64_t ldIn,
                                    const bf16* dh, int64_t ldDh, bf16* dg, bf16* du,
                                    int64_t ldGrad, int64_t rows, int64_t rowPacks) {
  const int64_t total = rows * rowPacks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / rowPacks, c = (i - r * rowPacks) * kPack;
    Bf16x8 gv, uv, dv, dgv, duv;
    gv.raw = loadPack(g + r * ldIn + c);
    uv.raw = loadPack(u + r * ldIn + c);
    dv.raw = loadPack(dh + r * ldDh + c);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float dg0, du0, dg1, du1;
      gluBackwardDevice(p, __low2float(gv.pair[q]), __low2float(uv.pair[q]),
                        __low2float(dv.pair[q]), dg0, du0);
      gluBackwardDevice(p, __high2float(gv.pair[q]), __high2float(uv.pair[q]),
                        __high2float(dv.pair[q]), dg1, du1);
      dgv.pair[q] = __halves2bfloat162(__float2bfloat16(dg0), __float2bfloat16(dg1));
      duv.pair[q] = __halves2bfloat162(__float2bfloat16(du0), __float2bfloat16(du1));
    }
    *reinterpret_cast<uint4*>(dg + r * ldGrad + c) = dgv.raw;
    *reinterpret_cast<uint4*>(du + r * ldGrad + c) = duv.raw;
  }
}

// True when the pack kernels apply: cols and every stride multiples of 8, bases 16-byte aligned.
template <typename... P>
bool packable(int64_t cols, std::initializer_list<int64_t> strides, const P*... pointers) {
  if (cols % kPack != 0) return false;
  for (const int64_t ld : strides) {
    if (ld % kPack != 0) return false;
  }
  return ((reinterpret_cast<uintptr_t>(pointers) % 16 == 0) && ...);
}

}  // namespace

Status gluForwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                      int64_t ldIn, bf16* h, int64_t ldOut, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  if (packable(cols, {ldIn, ldOut}, g, u, h)) {
    glu_fwd_pack_kernel<<<gridFor(rows * cols / kPack), 256, 0, stream>>>(
        gluDeviceParams(params), g, u, ldIn, h, ldOut, rows, cols / kPack);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::ok();
  }
  glu_fwd_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(gluDeviceParams(params), g, u, ldIn, h,
                                                           ldOut, rows, cols);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status gluBackwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                       int64_t ldIn, const bf16* dh, int64_t ldDh, bf16* dg, bf16* du,
                       int64_t ldGrad, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  if (packable(cols, {ldIn, ldDh, ldGrad}, g, u, dh, dg, du)) {
    glu_bwd_pack_kernel<<<gridFor(rows * cols / kPack), 256, 0, stream>>>(
        gluDeviceParams(params), g, u, ldIn, dh, ldDh, dg, du, ldGrad, rows, cols / kPack);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::ok();
  }
  glu_bwd_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(gluDeviceParams(params), g, u, ldIn, dh,
                                                           ldDh, dg, du, ldGrad, rows, cols);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
