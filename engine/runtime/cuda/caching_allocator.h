// CachingAllocator: device memory for one CUDA stream, cached and reused instead of returned to
// the driver, with bytes in use counted per MemoryCategory and every allocation and free reported
// to an observer and/or recorded into a buffer (the memory timeline's events).
//
// Operations: allocate(bytes, category) -> pointer or kResourceExhausted; release(pointer);
// emptyCache() hands cached blocks back to the driver; stats() reads the counters;
// setRecording(true) + takeEvents() hand the events over in batches (the CUDA backend takes them
// once per step, so the hot path pays one clock read and one 48-byte append per event and no
// call into the tracer).
// Counterfactual watermark (swap): the swap tier reports, through addShadowBytes, the bytes its
// swapped tensors would hold had they stayed on the device minus what they hold now (the
// "shadow"); the allocator keeps the peak of (in use + shadow) next to the real peak, so one
// step with swap also gives the peak of the same step without it.
// Policy: sizes are rounded up to 512 bytes (small, < 1 MiB) or 2 MiB (large); a free block is
// reused for a request of at least half its size; on out-of-memory the cache is emptied and the
// cudaMalloc retried once. The error message names the request, its category, the bytes in use
// per category and what the device has free, so a step that runs out fails clearly and the engine
// stays usable (nothing already allocated is touched).
// Ordering: a released block may be handed out again at once, which is safe because all work that
// uses memory from one allocator is queued on one stream (stream order). Use one allocator per
// stream (per virtual rank).
// Thread-safety: all methods lock one mutex; the observer is called with the lock held and must
// only copy the event. takeEvents may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/memory_category.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

struct DeviceMemoryEvent {
  int64_t tsNs = 0;                  // steady clock
  uintptr_t address = 0;             // device address of the block
  int64_t bytes = 0;                 // rounded block size
  MemoryCategory category = MemoryCategory::kWorkspace;
  bool isAllocation = true;          // false: a free
  int64_t categoryInUseBytes = 0;    // bytes in use in this category after the event
};

struct AllocatorStats {
  std::array<int64_t, kMemoryCategoryCount> inUseBytes{};    // per category, now
  std::array<int64_t, kMemoryCategoryCount> peakInUseBytes{};  // per category, since resetPeaks()
  int64_t totalInUseBytes = 0;       // all categories, now
  int64_t totalPeakInUseBytes = 0;   // all categories, since resetPeaks()
  int64_t reservedBytes = 0;         // held from the driver (in use + cached)
  int64_t deviceMallocs = 0;         // cudaMalloc calls so far
  int64_t cacheHits = 0;             // allocations served from the cache
  int64_t outOfMemoryErrors = 0;     // allocations that failed after emptying the cache
  int64_t shadowBytes = 0;           // swap: bytes offloaded and not resident now (signed, see
                                     //   addShadowBytes)
  int64_t totalPeakWithShadowBytes = 0;  // peak of totalInUseBytes + shadowBytes since
                                         //   resetPeaks(): the same step's peak without swap
};

class CachingAllocator {
 public:
  using Observer = std::function<void(const DeviceMemoryEvent&)>;

  // Allocates on the current CUDA device. `limitBytes` > 0 caps reservedBytes (tests use it to
  // provoke out-of-memory without filling the device); 0 = the device's memory.
  explicit CachingAllocator(int64_t limitBytes = 0) : m_limitBytes(limitBytes) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned, contents undefined). bytes == 0 gives null.
  // Errors: kResourceExhausted naming the request and the memory in use; kInternal for other
  // CUDA failures.
  Result<void*> allocate(int64_t bytes, MemoryCategory category);

  // Returns a block from allocate() to the cache. Null is ignored; an unknown pointer aborts
  // (a bug).
  void release(void* pointer);

  // Frees every cached (not in use) block back to the driver.
  void emptyCache();

  // Called on every allocation and free (null to stop).
  void setObserver(Observer observer);

  // While on, every allocation and free is also appended, in order, to a buffer that
  // takeEvents() empties (off: the buffer is dropped). The buffer grows until taken.
  void setRecording(bool on);
  // Moves the events recorded since the last call into `out` (cleared first, in the order they
  // happened); the allocator keeps `out`'s old storage for the next events, so a caller that
  // passes the same vector every time allocates nothing in steady state.
  void takeEvents(std::vector<DeviceMemoryEvent>& out);

  AllocatorStats stats() const;
  // Sets the peaks to the current in-use bytes (the trainer does this at each step start); the
  // shadow peak to in use + shadow.
  void resetPeaks();

  // Swap tier: adds `deltaBytes` to the shadow, the bytes the swapped tensors would hold without
  // swap minus the bytes they hold now: + a block's bytes when an offloaded tensor's block is
  // released, - the same bytes just before its reload is allocated (the two may come in either
  // order, so the shadow may be negative for a moment). Updates the shadow peak.
  void addShadowBytes(int64_t deltaBytes);
  // Size of the block `pointer` (from allocate(), in use) holds, >= the request; 0 for null.
  // An unknown pointer aborts (a bug).
  int64_t blockBytes(const void* pointer) const;

 private:
  struct Block {
    int64_t bytes = 0;
    MemoryCategory category = MemoryCategory::kWorkspace;
  };
  // A cached block of rounded size in [bytes, 2 bytes] (its size into blockBytes), or null.
  void* takeCached(int64_t bytes, int64_t& blockBytes);
  void emptyCacheLocked();
  void record(void* pointer, const Block& block, bool isAllocation);
  void notePeakWithShadow();

  mutable std::mutex m_mutex;
  int64_t m_limitBytes = 0;
  std::multimap<int64_t, void*> m_cached;          // free blocks by size
  std::unordered_map<void*, Block> m_inUse;        // allocated blocks
  AllocatorStats m_stats;
  Observer m_observer;
  bool m_recording = false;
  std::vector<DeviceMemoryEvent> m_events;  // recorded, not yet taken
};

// Rounded block size for a request (512 B granules below 1 MiB, 2 MiB above).
int64_t roundedBlockBytes(int64_t bytes);

}  // namespace moewb::engine::cuda
