// Multi-tensor optimizer launches: AdamW, the global gradient norm and gradient zeroing over a
// whole parameter set in one launch each (as apex's multi_tensor_apply and PyTorch's fused
// AdamW do), instead of one launch per parameter tensor.
//
// A MultiTensorPlan holds, in device memory, the tensors' pointers and a list of chunks (tensor,
// element range of at most kMultiTensorChunkElements) that the kernels walk one block per chunk.
// Build it once for a fixed set of buffers (parameter buffers never move) and rebuild it when
// matches() says the set changed. Every element gets exactly the arithmetic of adamwUpdateCuda,
// so results are bitwise equal to the per-tensor launches. The norm sums squares in double per
// chunk, then the chunk partials in one block in a fixed order: bitwise reproducible for the same
// plan (not bitwise equal to globalGradNormCuda, whose partials are per tensor).
// Costs: one launch per operation (two for the norm) whatever the number of tensors; the plan
// uploads 48 bytes per tensor and 24 per chunk once.
// Thread-safety: a plan is used on one stream at a time (the norm's partials live in it).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "moewb/base/status.h"
#include "ops/adamw/adamw.h"

namespace moewb::engine::cuda {

inline constexpr int64_t kMultiTensorChunkElements = 16384;

// One tensor of a plan: n fp32 elements each of param, grad, m and v, and the bf16 copy of param
// (device pointers; any of them may be null where the operations used do not need it: the norm
// reads grad only, zeroing writes grad only, AdamW needs param, grad, m, v).
struct MultiTensorRef {
  float* param = nullptr;
  float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  bf16* paramBf16 = nullptr;
  int64_t n = 0;
  bool decay = false;  // decoupled weight decay applies to this tensor

  bool operator==(const MultiTensorRef&) const = default;
};

class MultiTensorPlan {
 public:
  MultiTensorPlan() = default;
  // Uploads the tensor table and its chunks (tensors with n == 0 get none).
  // Errors: kResourceExhausted, kInternal.
  static Result<MultiTensorPlan> create(CudaContext& context,
                                        const std::vector<MultiTensorRef>& tensors);

  // True when the plan was built for exactly these tensors (same pointers, sizes, decay flags).
  bool matches(const std::vector<MultiTensorRef>& tensors) const { return tensors == m_refs; }
  int64_t chunkCount() const { return m_chunkCount; }
  const void* deviceTensors() const { return m_tensors.data(); }
  const void* deviceChunks() const { return m_chunks.data(); }
  double* devicePartials() { return m_partials.data(); }

 private:
  std::vector<MultiTensorRef> m_refs;
  int64_t m_chunkCount = 0;
  DeviceTensor<uint8_t> m_tensors;  // [tensors] device table
  DeviceTensor<uint8_t> m_chunks;   // [chunkCount] (tensor, begin, end)
  DeviceTensor<double> m_partials;  // [max(chunkCount, 1)] norm partial sums
};

// adamwUpdateCuda (ops/adamw/adamw_cuda.h) on every tensor of the plan, gradScale (device scalar
// or nullptr for 1) applied to every gradient. Errors: launch errors.
Status multiTensorAdamWCuda(cudaStream_t stream, const MultiTensorPlan& plan,
                            const AdamWHyper& hyper, const float* gradScale);

// norm[0] (device double) = sqrt(sum over the plan's tensors of sum grad^2). Errors: launch
// errors.
Status multiTensorGradNormCuda(cudaStream_t stream, MultiTensorPlan& plan, double* norm);

// grad = 0 for every tensor of the plan. Errors: launch errors.
Status multiTensorZeroGradsCuda(cudaStream_t stream, const MultiTensorPlan& plan);

}  // namespace moewb::engine::cuda
