// The global byte counter behind TensorMemory and the tracked allocator used by Tensor<T>.
// Costs: one aligned_alloc + memset per allocation, two relaxed atomics (plus a CAS loop while
// the peak rises).
#include "runtime/tensor/tensor.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace moewb::engine {
namespace {

constexpr int64_t kAlignmentBytes = 64;

std::atomic<int64_t> g_currentBytes{0};
std::atomic<int64_t> g_peakBytes{0};

void raisePeak(int64_t candidate) {
  int64_t peak = g_peakBytes.load(std::memory_order_relaxed);
  while (candidate > peak &&
         !g_peakBytes.compare_exchange_weak(peak, candidate, std::memory_order_relaxed)) {
  }
}

}  // namespace

int64_t TensorMemory::currentBytes() {
  return g_currentBytes.load(std::memory_order_relaxed);
}
int64_t TensorMemory::peakBytes() {
  return g_peakBytes.load(std::memory_order_relaxed);
}
void TensorMemory::resetPeak() {
  g_peakBytes.store(currentBytes(), std::memory_order_relaxed);
}

namespace detail {

void* allocateTensorBytes(int64_t bytes) {
  MOEWB_CHECK(bytes >= 0);
  if (bytes == 0) return nullptr;
  int64_t rounded = (bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
  void* ptr = std::aligned_alloc(size_t(kAlignmentBytes), size_t(rounded));
  if (ptr == nullptr) throw std::bad_alloc();
  std::memset(ptr, 0, size_t(rounded));
  raisePeak(g_currentBytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return ptr;
}

void freeTensorBytes(void* ptr, int64_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  g_currentBytes.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace moewb::engine
