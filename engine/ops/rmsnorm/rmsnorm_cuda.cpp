// RMSNorm backward's host side: the dGain workspace, then the kernels of rmsnorm_cuda.cu.
#include "ops/rmsnorm/rmsnorm_cuda.h"

#include "ops/rmsnorm/rmsnorm_cuda_kernels.h"

namespace moewb::engine::cuda {

Status rmsNormBackwardCuda(CudaContext& context, const bf16* dy, const bf16* x, const bf16* gain,
                           const float* rstd, bf16* dx, float* dGain, int64_t n, int64_t d,
                           bool accumulate) {
  if (n <= 0 || d <= 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<float> partial,
      context.newTensor<float>({rmsNormDgainChunks(n), d}, MemoryCategory::kWorkspace));
  return rmsNormBackwardLaunch(context.stream(), dy, x, gain, rstd, dx, dGain, partial.data(), n, d,
                               accumulate);
}

}  // namespace moewb::engine::cuda
