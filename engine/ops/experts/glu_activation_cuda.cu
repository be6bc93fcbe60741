// Elementwise GLU forward / backward kernels over strided [rows, cols] arrays (see
// glu_activation_cuda.h).
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

}  // namespace

Status gluForwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                      int64_t ldIn, bf16* h, int64_t ldOut, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  glu_fwd_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(gluDeviceParams(params), g, u, ldIn, h,
                                                           ldOut, rows, cols);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status gluBackwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                       int64_t ldIn, const bf16* dh, int64_t ldDh, bf16* dg, bf16* du,
                       int64_t ldGrad, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return Status::ok();
  glu_bwd_kernel<<<gridFor(rows * cols), 256, 0, stream>>>(gluDeviceParams(params), g, u, ldIn, dh,
                                                           ldDh, dg, du, ldGrad, rows, cols);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
