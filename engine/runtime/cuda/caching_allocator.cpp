#include "runtime/cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include <chrono>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"

namespace moewb::engine::cuda {
namespace {

constexpr int64_t kSmallGranuleBytes = 512;
constexpr int64_t kLargeGranuleBytes = int64_t(2) << 20;
constexpr int64_t kSmallLimitBytes = int64_t(1) << 20;

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

int64_t roundedBlockBytes(int64_t bytes) {
  const int64_t granule = bytes < kSmallLimitBytes ? kSmallGranuleBytes : kLargeGranuleBytes;
  return (bytes + granule - 1) / granule * granule;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(m_mutex);
  emptyCacheLocked();
  // Blocks still in use belong to tensors that outlive the allocator (a bug in the owner); they
  // are freed here so the device memory is not lost.
  for (auto& [pointer, block] : m_inUse) cudaFree(pointer);
}

void* CachingAllocator::takeCached(int64_t bytes, int64_t& blockBytes) {
  auto it = m_cached.lower_bound(bytes);
  if (it == m_cached.end() || it->first > 2 * bytes) return nullptr;
  void* pointer = it->second;
  blockBytes = it->first;
  m_cached.erase(it);
  return pointer;
}

Result<void*> CachingAllocator::allocate(int64_t bytes, MemoryCategory category) {
  MOEWB_CHECK(bytes >= 0);
  if (bytes == 0) return static_cast<void*>(nullptr);
  std::lock_guard lock(m_mutex);
  const int64_t rounded = roundedBlockBytes(bytes);
  Block block{rounded, category};
  // Reuse keeps the cached block's own size (it may be up to twice the request).
  void* pointer = takeCached(rounded, block.bytes);
  if (pointer != nullptr) {
    ++m_stats.cacheHits;
  } else {
    block.bytes = rounded;
    const bool overLimit = m_limitBytes > 0 && m_stats.reservedBytes + rounded > m_limitBytes;
    cudaError_t result = overLimit ? cudaErrorMemoryAllocation : cudaMalloc(&pointer, size_t(rounded));
    if (result == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state of the runtime
      emptyCacheLocked();
      const bool stillOver = m_limitBytes > 0 && m_stats.reservedBytes + rounded > m_limitBytes;
      result = stillOver ? cudaErrorMemoryAllocation : cudaMalloc(&pointer, size_t(rounded));
    }
    if (result == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++m_stats.outOfMemoryErrors;
      size_t freeBytes = 0, totalBytes = 0;
      cudaMemGetInfo(&freeBytes, &totalBytes);
      std::string inUse;
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        inUse += std::string(c ? ", " : "") + memoryCategoryName(MemoryCategory(c)) + " " +
                 mib(m_stats.inUseBytes[size_t(c)]);
      }
      return resourceExhausted(
          "out of device memory: asked for " + mib(rounded) + " of " +
          memoryCategoryName(category) + "; in use: " + inUse + "; device free " +
          mib(int64_t(freeBytes)) + " of " + mib(int64_t(totalBytes)) +
          (m_limitBytes > 0 ? "; allocator limit " + mib(m_limitBytes) : std::string()) +
          ". Reduce data.batch_size or model size, or turn on activation offload");
    }
    MOEWB_RETURN_IF_ERROR(cudaStatus(result, "cudaMalloc", __FILE__, __LINE__));
    m_stats.reservedBytes += rounded;
    ++m_stats.deviceMallocs;
  }
  m_inUse.emplace(pointer, block);
  record(pointer, block, true);
  return pointer;
}

void CachingAllocator::release(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard lock(m_mutex);
  auto it = m_inUse.find(pointer);
  MOEWB_CHECK_MSG(it != m_inUse.end(), "release of a pointer this allocator did not hand out");
  const Block block = it->second;
  m_inUse.erase(it);
  m_cached.emplace(block.bytes, pointer);
  record(pointer, block, false);
}

void CachingAllocator::record(void* pointer, const Block& block, bool isAllocation) {
  const size_t c = size_t(block.category);
  const int64_t delta = isAllocation ? block.bytes : -block.bytes;
  m_stats.inUseBytes[c] += delta;
  m_stats.totalInUseBytes += delta;
  if (m_stats.inUseBytes[c] > m_stats.peakInUseBytes[c]) {
    m_stats.peakInUseBytes[c] = m_stats.inUseBytes[c];
  }
  if (m_stats.totalInUseBytes > m_stats.totalPeakInUseBytes) {
    m_stats.totalPeakInUseBytes = m_stats.totalInUseBytes;
  }
  notePeakWithShadow();
  if (!m_observer && !m_recording) return;
  const DeviceMemoryEvent event{steadyNs(), reinterpret_cast<uintptr_t>(pointer), block.bytes,
                                block.category, isAllocation, m_stats.inUseBytes[c]};
  if (m_recording) m_events.push_back(event);
  if (m_observer) m_observer(event);
}

void CachingAllocator::emptyCacheLocked() {
  for (auto& [bytes, pointer] : m_cached) {
    cudaFree(pointer);
    m_stats.reservedBytes -= bytes;
  }
  m_cached.clear();
}

void CachingAllocator::emptyCache() {
  std::lock_guard lock(m_mutex);
  emptyCacheLocked();
}

void CachingAllocator::setObserver(Observer observer) {
  std::lock_guard lock(m_mutex);
  m_observer = std::move(observer);
}

void CachingAllocator::setRecording(bool on) {
  std::lock_guard lock(m_mutex);
  m_recording = on;
  if (!on) m_events = {};
}

void CachingAllocator::takeEvents(std::vector<DeviceMemoryEvent>& out) {
  out.clear();
  std::lock_guard lock(m_mutex);
  std::swap(out, m_events);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(m_mutex);
  return m_stats;
}

void CachingAllocator::resetPeaks() {
  std::lock_guard lock(m_mutex);
  m_stats.peakInUseBytes = m_stats.inUseBytes;
  m_stats.totalPeakInUseBytes = m_stats.totalInUseBytes;
  m_stats.totalPeakWithShadowBytes = m_stats.totalInUseBytes + m_stats.shadowBytes;
}

void CachingAllocator::notePeakWithShadow() {
  const int64_t withShadow = m_stats.totalInUseBytes + m_stats.shadowBytes;
  if (withShadow > m_stats.totalPeakWithShadowBytes) m_stats.totalPeakWithShadowBytes = withShadow;
}

void CachingAllocator::addShadowBytes(int64_t deltaBytes) {
  std::lock_guard lock(m_mutex);
  m_stats.shadowBytes += deltaBytes;
  notePeakWithShadow();
}

int64_t CachingAllocator::blockBytes(const void* pointer) const {
  if (pointer == nullptr) return 0;
  std::lock_guard lock(m_mutex);
  auto it = m_inUse.find(const_cast<void*>(pointer));
  MOEWB_CHECK_MSG(it != m_inUse.end(), "blockBytes of a pointer this allocator did not hand out");
  return it->second.bytes;
}

}  // namespace moewb::engine::cuda
