// Global gradient norm's host side: the partial-sum workspace laid out per buffer, then the
// kernels of adamw_cuda.cu (see adamw_cuda.h).
#include "ops/adamw/adamw_cuda.h"

#include "moewb/base/check.h"
#include "ops/adamw/adamw_cuda_kernels.h"

namespace moewb::engine::cuda {

Status globalGradNormCuda(CudaContext& context, const std::vector<const float*>& grads,
                          const std::vector<int64_t>& sizes, double* norm) {
  MOEWB_CHECK(grads.size() == sizes.size());
  int64_t total = 0;
  for (int64_t size : sizes) total += gradNormBlocks(size);
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<double> partial,
      context.newTensor<double>({total > 0 ? total : 1}, MemoryCategory::kWorkspace));
  int64_t offset = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    MOEWB_RETURN_IF_ERROR(
        gradNormPartials(context.stream(), grads[i], sizes[i], partial.data() + offset));
    offset += gradNormBlocks(sizes[i]);
  }
  return gradNormFinish(context.stream(), partial.data(), total, norm);
}

}  // namespace moewb::engine::cuda
