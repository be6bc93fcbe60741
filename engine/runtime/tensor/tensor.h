// Tensor<T>: the engine's owning, contiguous, row-major array with a shape of rank 0..4.
//
// Operations: construct zero-filled from a shape, move (no implicit copies; clone() copies),
// element access by flat index or (row, col), a pointer to one slice of the first dimension
// (row()), fill. Costs: construction allocates 64-byte-aligned memory and zero-fills it (O(numel));
// everything else is O(1) except clone/fill. Every live tensor's bytes are counted in one global
// counter with a high-water mark (TensorMemory), which is what StepEvent.peakBytes reports.
// Thread-safety: distinct tensors may be used from different threads; the counter is atomic.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "moewb/base/check.h"

namespace moewb::engine {

// Bytes held by live engine tensors, process-wide.
class TensorMemory {
 public:
  // Bytes currently allocated by live tensors.
  static int64_t currentBytes();
  // Highest currentBytes() since the last resetPeak() (or process start).
  static int64_t peakBytes();
  // Sets the peak to the current value; the trainer calls this at the start of each step.
  static void resetPeak();
};

// Tag of the Tensor constructor whose zeros are the kernel's untouched pages (an anonymous
// mapping, whatever the size): no time is spent zeroing, and pages that are never written
// (the host copies of a model that trains on the GPU: gradients, AdamW moments) take no memory.
struct LazyZeroPages {};

namespace detail {
// Whether a tensor of `bytes` bytes is an anonymous mapping by default (64 MiB and more).
bool mappedByDefault(int64_t bytes);
// Allocates `bytes` (64-byte aligned, zero-filled; an anonymous mapping when `mapped`) and adds
// them to TensorMemory. Throws std::bad_alloc on exhaustion, as operator new does; bytes == 0
// returns null.
void* allocateTensorBytes(int64_t bytes, bool mapped);
// Frees memory from allocateTensorBytes (the same `bytes` and `mapped`) and subtracts `bytes`
// from TensorMemory.
void freeTensorBytes(void* ptr, int64_t bytes, bool mapped);
}  // namespace detail

template <typename T>
class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  Tensor() = default;
  // Zero-filled tensor of the given shape; every extent must be >= 0.
  explicit Tensor(std::initializer_list<int64_t> shape) { construct(shape.begin(), shape.end()); }
  explicit Tensor(const std::vector<int64_t>& shape) { construct(shape.begin(), shape.end()); }
  // Zero-filled as above, its zeros the kernel's untouched pages (LazyZeroPages).
  Tensor(const std::vector<int64_t>& shape, LazyZeroPages) : m_mapped(true) {
    construct(shape.begin(), shape.end());
  }
  Tensor(Tensor&& other) noexcept { swap(other); }
  Tensor& operator=(Tensor&& other) noexcept {
    Tensor moved(std::move(other));
    swap(moved);
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { detail::freeTensorBytes(m_data, bytes(), m_mapped); }

  // A deep copy (same shape, same values).
  Tensor clone() const {
    Tensor copy;
    copy.m_shape = m_shape;
    copy.m_rank = m_rank;
    copy.allocate();
    if (m_numel > 0) std::memcpy(copy.m_data, m_data, size_t(bytes()));
    return copy;
  }

  int rank() const { return m_rank; }
  // The extents as a vector ([dim(0), ..., dim(rank-1)]).
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(m_shape.begin(), m_shape.begin() + m_rank);
  }
  int64_t dim(int axis) const {
    MOEWB_CHECK(axis >= 0 && axis < m_rank);
    return m_shape[axis];
  }
  int64_t numel() const { return m_numel; }
  int64_t bytes() const { return m_numel * int64_t(sizeof(T)); }
  bool empty() const { return m_numel == 0; }

  T* data() { return m_data; }
  const T* data() const { return m_data; }
  T& operator[](int64_t i) { return m_data[i]; }
  const T& operator[](int64_t i) const { return m_data[i]; }
  // Element (i, j) of a rank-2 tensor.
  T& at(int64_t i, int64_t j) { return m_data[i * m_shape[1] + j]; }
  const T& at(int64_t i, int64_t j) const { return m_data[i * m_shape[1] + j]; }
  // Start of slice i of the first dimension (a row of a matrix, a matrix of a stack).
  T* row(int64_t i) { return m_data + i * rowStride(); }
  const T* row(int64_t i) const { return m_data + i * rowStride(); }
  // Elements per slice of the first dimension.
  int64_t rowStride() const { return m_rank == 0 || m_shape[0] == 0 ? 0 : m_numel / m_shape[0]; }

  void fill(T value) {
    for (int64_t i = 0; i < m_numel; ++i) m_data[i] = value;
  }
  void zero() {
    if (m_numel > 0) std::memset(m_data, 0, size_t(bytes()));
  }
  bool sameShape(const Tensor& other) const {
    if (m_rank != other.m_rank) return false;
    for (int i = 0; i < m_rank; ++i) {
      if (m_shape[i] != other.m_shape[i]) return false;
    }
    return true;
  }
  // "[512, 64]"
  std::string shapeString() const {
    std::string text = "[";
    for (int i = 0; i < m_rank; ++i) text += (i ? ", " : "") + std::to_string(m_shape[i]);
    return text + "]";
  }

 private:
  template <typename It>
  void construct(It begin, It end) {
    MOEWB_CHECK_LE(int(end - begin), kMaxRank);
    for (It it = begin; it != end; ++it) {
      MOEWB_CHECK(*it >= 0);
      m_shape[m_rank++] = *it;
    }
    allocate();
  }
  void allocate() {
    m_numel = 1;
    for (int i = 0; i < m_rank; ++i) m_numel *= m_shape[i];
    m_mapped = m_mapped || detail::mappedByDefault(bytes());
    m_data = static_cast<T*>(detail::allocateTensorBytes(bytes(), m_mapped));
  }
  void swap(Tensor& other) noexcept {
    std::swap(m_shape, other.m_shape);
    std::swap(m_rank, other.m_rank);
    std::swap(m_numel, other.m_numel);
    std::swap(m_data, other.m_data);
    std::swap(m_mapped, other.m_mapped);
  }

  std::array<int64_t, kMaxRank> m_shape{};
  int m_rank = 0;
  int64_t m_numel = 0;
  T* m_data = nullptr;
  bool m_mapped = false;  // m_data is an anonymous mapping (munmap), else aligned_alloc (free)
};

}  // namespace moewb::engine
