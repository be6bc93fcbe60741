// DeviceTensor<T>: an owning, contiguous, row-major array of rank 0..4 in device memory, taken
// from a CachingAllocator under a MemoryCategory and handed back when it dies.
//
// Operations: create (fallible: out of memory is a Status), move, shape queries, raw device
// pointer. Contents after create are undefined (like torch.empty): every op writes its whole
// output, and the GPU tests poison outputs with NaN to prove it. Host copies go through
// cuda/transfer.h. T is float, __nv_bfloat16, int32_t, int64_t or uint8_t.
// Thread-safety: like Tensor<T>; the allocator must outlive its tensors.
#pragma once

#include <cuda_bf16.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/caching_allocator.h"
#include "moewb/base/check.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// The backend's 16-bit float (8-bit exponent, 7-bit mantissa).
using bf16 = __nv_bfloat16;

template <typename T>
class DeviceTensor {
 public:
  static constexpr int kMaxRank = 4;

  DeviceTensor() = default;
  // Allocates a tensor of `shape` (every extent >= 0; rank <= 4). Errors: kResourceExhausted.
  static Result<DeviceTensor> create(CachingAllocator& allocator, const std::vector<int64_t>& shape,
                                     MemoryCategory category) {
    MOEWB_CHECK_LE(int(shape.size()), kMaxRank);
    DeviceTensor tensor;
    tensor.m_numel = 1;
    for (int64_t extent : shape) {
      MOEWB_CHECK(extent >= 0);
      tensor.m_shape[size_t(tensor.m_rank++)] = extent;
      tensor.m_numel *= extent;
    }
    tensor.m_category = category;
    MOEWB_ASSIGN_OR_RETURN(void* pointer, allocator.allocate(tensor.bytes(), category));
    tensor.m_data = static_cast<T*>(pointer);
    tensor.m_allocator = &allocator;
    return Result<DeviceTensor>(std::move(tensor));  // explicit: nvcc's front end needs the move
  }

  DeviceTensor(DeviceTensor&& other) noexcept { swap(other); }
  DeviceTensor& operator=(DeviceTensor&& other) noexcept {
    DeviceTensor moved(std::move(other));
    swap(moved);
    return *this;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (m_allocator != nullptr) m_allocator->release(m_data);
  }

  int rank() const { return m_rank; }
  int64_t dim(int axis) const {
    MOEWB_CHECK(axis >= 0 && axis < m_rank);
    return m_shape[size_t(axis)];
  }
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(m_shape.begin(), m_shape.begin() + m_rank);
  }
  int64_t numel() const { return m_numel; }
  int64_t bytes() const { return m_numel * int64_t(sizeof(T)); }
  bool empty() const { return m_numel == 0; }
  MemoryCategory category() const { return m_category; }
  T* data() { return m_data; }
  const T* data() const { return m_data; }
  // Start of slice i of the first dimension.
  T* row(int64_t i) { return m_data + i * rowStride(); }
  const T* row(int64_t i) const { return m_data + i * rowStride(); }
  int64_t rowStride() const { return m_rank == 0 || m_shape[0] == 0 ? 0 : m_numel / m_shape[0]; }
  // "[512, 64]"
  std::string shapeString() const {
    std::string text = "[";
    for (int i = 0; i < m_rank; ++i) text += (i ? ", " : "") + std::to_string(m_shape[size_t(i)]);
    return text + "]";
  }

 private:
  void swap(DeviceTensor& other) noexcept {
    std::swap(m_shape, other.m_shape);
    std::swap(m_rank, other.m_rank);
    std::swap(m_numel, other.m_numel);
    std::swap(m_data, other.m_data);
    std::swap(m_allocator, other.m_allocator);
    std::swap(m_category, other.m_category);
  }

  std::array<int64_t, kMaxRank> m_shape{};
  int m_rank = 0;
  int64_t m_numel = 0;
  T* m_data = nullptr;
  CachingAllocator* m_allocator = nullptr;
  MemoryCategory m_category = MemoryCategory::kWorkspace;
};

}  // namespace moewb::engine::cuda
