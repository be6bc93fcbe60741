// Sparse attention core backward on the GPU, allocating entry point (see
// sparse_attention_cuda.h); the kernels are in sparse_attention_core_cuda.cu.
#include <algorithm>

#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"

namespace moewb::engine::cuda {

Status sparseAttentionCoreBackwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                       const bf16* dContext, const SparseCoreSavedView& saved,
                                       const SelectionTransposeCuda& byKey, bf16* dq, bf16* dk,
                                       bf16* dv, float* dSink) {
  const int64_t n = dims.tokens(), heads = dims.numHeads;
  if (n == 0) return Status::ok();
  const auto ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dz,
                         context.newTensor<float>({n, heads, saved.width}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> sinkTerms, context.newTensor<float>({n, heads}, ws));
  const int64_t partialFloats = sparseKeyBwdPartialFloats(dims);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> keyPartials,
                         context.newTensor<float>({std::max<int64_t>(partialFloats, 1)}, ws));
  return launchSparseCoreBackward(context.stream(), dims, dContext, saved, byKey.keyStart.data(),
                                  byKey.entries.data(), dz.data(), sinkTerms.data(),
                                  partialFloats > 0 ? keyPartials.data() : nullptr, dq, dk, dv,
                                  dSink);
}

}  // namespace moewb::engine::cuda
