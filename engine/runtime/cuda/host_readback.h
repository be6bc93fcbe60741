// Several small device -> host reads with one wait. A step's forward reads its loss, aux-loss
// terms and per-expert counts: each toHost() waits for the stream, so a model with L layers
// drained the GPU queue about 5 L times at the end of every forward (and the GPU then idled
// while the host launched the backward's first kernels). add() queues a copy into pinned staging
// memory on the context's stream; wait() synchronises once; take() copies a read out.
// Staging memory (cudaHostAlloc, in 4 KiB-or-larger blocks) is kept across reset() so that a
// readback reused every step allocates only in its first steps.
// Thread-safety: one thread at a time; the context's stream only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::cuda {

class HostReadback {
 public:
  HostReadback() = default;
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;

  // Forgets the queued reads (their values included); keeps the staging memory. A copy still in
  // flight (a read abandoned on an error before wait()) may land in memory a later add() reuses:
  // call wait() before reading anything queued after such a reset.
  void reset();

  // Queues a copy of every element of `device` and returns its index for take(). T: float,
  // int32_t. Errors: kResourceExhausted (pinned host memory), kInternal (a CUDA call failed).
  template <typename T>
  Result<size_t> add(CudaContext& context, const DeviceTensor<T>& device);

  // Waits for the context's stream (every queued copy). Errors: kInternal.
  Status wait(CudaContext& context);

  // The host copy of read `index` (same shape as its device tensor); after wait().
  template <typename T>
  Tensor<T> take(size_t index) const;

 private:
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
    size_t used = 0;
  };
  struct Entry {
    size_t block = 0, offset = 0, bytes = 0;
    std::vector<int64_t> shape;
  };
  Result<Entry> reserve(size_t bytes);

  std::vector<Block> m_blocks;
  std::vector<Entry> m_entries;
  bool m_waited = true;
};

}  // namespace moewb::engine::cuda
