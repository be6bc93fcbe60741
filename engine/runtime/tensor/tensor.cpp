// The global byte counter behind TensorMemory and the tracked allocator used by Tensor<T>.
// Costs: one aligned_alloc + memset per allocation, two relaxed atomics (plus a CAS loop while
// the peak rises). Allocations of kMappedBytes or more, and LazyZeroPages tensors, are anonymous
// mappings instead: the kernel hands out zero pages on first touch, so a tensor that is never
// written (the host gradients of a model that trains on the GPU) costs no time and no memory, and
// the rest is zeroed by whichever thread touches it first rather than by one memset.
#include "runtime/tensor/tensor.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace moewb::engine {
namespace {

constexpr int64_t kAlignmentBytes = 64;
constexpr int64_t kMappedBytes = int64_t(64) << 20;  // from here on: mmap, not aligned_alloc

int64_t roundedBytes(int64_t bytes) {
  return (bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
}

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

bool mappedByDefault(int64_t bytes) { return roundedBytes(bytes) >= kMappedBytes; }

void* allocateTensorBytes(int64_t bytes, bool mapped) {
  MOEWB_CHECK(bytes >= 0);
  if (bytes == 0) return nullptr;
  const int64_t rounded = roundedBytes(bytes);
  void* ptr = nullptr;
  if (mapped) {
    ptr = mmap(nullptr, size_t(rounded), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
               0);
    if (ptr == MAP_FAILED) throw std::bad_alloc();  // page-aligned and zero-filled
  } else {
    ptr = std::aligned_alloc(size_t(kAlignmentBytes), size_t(rounded));
    if (ptr == nullptr) throw std::bad_alloc();
    std::memset(ptr, 0, size_t(rounded));
  }
  raisePeak(g_currentBytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return ptr;
}

void freeTensorBytes(void* ptr, int64_t bytes, bool mapped) {
  if (ptr == nullptr) return;
  if (mapped) {
    munmap(ptr, size_t(roundedBytes(bytes)));
  } else {
    std::free(ptr);
  }
  g_currentBytes.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace moewb::engine
