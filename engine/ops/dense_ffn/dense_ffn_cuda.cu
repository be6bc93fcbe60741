// The dense FFN's one own kernel: adding the fp32 dx workspace into the bf16 dx.
#include "runtime/cuda/cuda_check.h"
#include "ops/dense_ffn/dense_ffn_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

// out[i] = bf16(float(out[i]) + acc[i]).
__global__ void dense_ffn_add_kernel(const float* __restrict__ acc, bf16* __restrict__ out,
                                     int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(__bfloat162float(out[i]) + acc[i]);
  }
}

}  // namespace

Status denseFfnAddFloatIntoBf16(cudaStream_t stream, const float* acc, bf16* out, int64_t count) {
  if (count <= 0) return Status::ok();
  dense_ffn_add_kernel<<<gridFor(count), 256, 0, stream>>>(acc, out, count);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
