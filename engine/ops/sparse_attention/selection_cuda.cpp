// Selection transpose on the GPU, allocating entry point (see sparse_attention_cuda.h); the
// kernels and the CUB sort are in selection_cuda.cu.
#include <string>

#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"

namespace moewb::engine::cuda {

Status transposeSelectionCuda(CudaContext& context, const int32_t* selected, int64_t n,
                              int64_t width, int64_t seqLen, SelectionTransposeCuda& out) {
  const int64_t total = n * width;
  if (total >= (int64_t(1) << 31) - 1) {
    return invalidArgument("sparse attention selection of " + std::to_string(n) + " x " +
                           std::to_string(width) + " entries exceeds the int32 transpose");
  }
  const auto ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(out.keyStart, context.newTensor<int32_t>({n + 1}, ws));
  MOEWB_ASSIGN_OR_RETURN(out.entries, context.newTensor<int32_t>({total}, ws));
  if (total == 0) {
    return launchTransposeSelection(context.stream(), selected, n, width, seqLen,
                                    TransposeBuffers{}, out.keyStart.data(), out.entries.data());
  }
  size_t tempBytes = 0;
  MOEWB_RETURN_IF_ERROR(transposeSelectionTempBytes(n, total, tempBytes));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> keys, context.newTensor<int32_t>({total}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> sortedKeys, context.newTensor<int32_t>({total}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> values, context.newTensor<int32_t>({total}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<uint8_t> temp,
                         context.newTensor<uint8_t>({int64_t(tempBytes) + 1}, ws));
  const TransposeBuffers buffers{reinterpret_cast<uint32_t*>(keys.data()),
                                 reinterpret_cast<uint32_t*>(sortedKeys.data()), values.data(),
                                 temp.data(), tempBytes};
  return launchTransposeSelection(context.stream(), selected, n, width, seqLen, buffers,
                                  out.keyStart.data(), out.entries.data());
}

}  // namespace moewb::engine::cuda
