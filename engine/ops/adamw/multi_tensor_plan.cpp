// MultiTensorPlan::create: the host side of the multi-tensor launches (see multi_tensor_adamw.h);
// the kernels are in adamw_cuda.cu.
#include <algorithm>

#include "runtime/cuda/cuda_check.h"
#include "ops/adamw/adamw_cuda_kernels.h"
#include "ops/adamw/multi_tensor_adamw.h"

namespace moewb::engine::cuda {

Result<MultiTensorPlan> MultiTensorPlan::create(CudaContext& context,
                                                const std::vector<MultiTensorRef>& tensors) {
  std::vector<MultiTensorEntry> entries;
  std::vector<MultiTensorChunk> chunks;
  entries.reserve(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const MultiTensorRef& ref = tensors[t];
    MOEWB_CHECK(ref.n >= 0);
    entries.push_back({ref.param, ref.grad, ref.m, ref.v, ref.paramBf16, ref.n,
                       int32_t(ref.decay ? 1 : 0), 0});
    for (int64_t begin = 0; begin < ref.n; begin += kMultiTensorChunkElements) {
      chunks.push_back({int32_t(t), 0, begin, std::min(ref.n, begin + kMultiTensorChunkElements)});
    }
  }
  MultiTensorPlan plan;
  plan.m_refs = tensors;
  plan.m_chunkCount = int64_t(chunks.size());
  auto upload = [&](const void* host, int64_t bytes,
                    DeviceTensor<uint8_t>& device) -> Status {
    MOEWB_ASSIGN_OR_RETURN(device, context.newTensor<uint8_t>({std::max<int64_t>(bytes, 1)},
                                                              MemoryCategory::kOptimizer));
    if (bytes == 0) return Status::ok();
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device.data(), host, size_t(bytes),
                                               cudaMemcpyHostToDevice, context.stream()));
    return Status::ok();
  };
  MOEWB_RETURN_IF_ERROR(upload(entries.data(),
                               int64_t(entries.size() * sizeof(MultiTensorEntry)), plan.m_tensors));
  MOEWB_RETURN_IF_ERROR(upload(chunks.data(), int64_t(chunks.size() * sizeof(MultiTensorChunk)),
                               plan.m_chunks));
  MOEWB_ASSIGN_OR_RETURN(plan.m_partials,
                         context.newTensor<double>({std::max<int64_t>(plan.m_chunkCount, 1)},
                                                   MemoryCategory::kOptimizer));
  // The host tables are pageable: the copies have staged them once cudaMemcpyAsync returned,
  // but wait anyway so the plan is usable on any stream.
  MOEWB_RETURN_IF_ERROR(context.synchronize());
  return plan;
}

}  // namespace moewb::engine::cuda
