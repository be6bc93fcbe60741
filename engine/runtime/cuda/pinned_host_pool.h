// PinnedHostPool: the page-locked host memory of the swap tier (model/cuda/swap_tier_cuda.h), one
// pinned block of the whole budget, handed out as bump-allocated slots that all end together at
// the next step start. The block is an anonymous mapping whose pages are first touched on up to 8
// threads and then pinned by one cudaHostRegister: 2.2 s for 16 GiB on an H200 machine against
// 8.3 s for one cudaHostAlloc, with the same 55 GB/s copies (bench/scratch/pinned_alloc_01.md).
//
// Operations: reserve(budget) makes the budget usable, allocating only at the first call and when
// the budget grows past the capacity (the old block is freed first); beginStep() forgets every
// slot; take(bytes) hands out the next 256-byte aligned slot; stats() reads the counters.
// Why one block: per-tensor pinning and unpinning (cudaHostAlloc / cudaFreeHost) synchronise the
// device and would serialise the copies they feed (torchtitan PR #2581); a bump pointer costs
// nothing and a step's slots all die at the same moment (its end), so nothing is ever freed
// individually.
// Full pool: take() answers kResourceExhausted naming swap.pinned_budget_gb; the swap tier then
// keeps that tensor on the device and counts it (the step runs on, with less saved), it does not
// fail the step. A failed mapping or cudaHostRegister is a step error, also naming the key.
// Ordering: the caller guarantees that no copy still reads or writes a slot when it calls
// beginStep() or a growing reserve() (the tier synchronises its copy streams first).
// Not thread-safe: one per swap tier.
#pragma once

#include <atomic>
#include <cstdint>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

struct PinnedPoolStats {
  int64_t capacityBytes = 0;   // pinned bytes held (0 before the first reserve)
  int64_t budgetBytes = 0;     // usable bytes (<= capacity)
  int64_t inUseBytes = 0;      // bytes handed out since beginStep (slots rounded to 256 B)
  int64_t peakInUseBytes = 0;  // most in use since beginStep
  int64_t hostAllocs = 0;      // pinned blocks this pool allocated so far (cudaHostRegister calls)
  int64_t refusals = 0;        // take() calls refused because the budget was full, in total
};

class PinnedHostPool {
 public:
  static constexpr int64_t kAlignBytes = 256;

  PinnedHostPool() = default;
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // Makes `budgetBytes` (> 0) usable: maps, touches and pins the budget at the first call or when
  // it exceeds the capacity; a smaller budget keeps the block and only lowers the limit. Errors:
  // kInvalidArgument (budget <= 0), kResourceExhausted naming swap.pinned_budget_gb when the
  // allocation fails (the pool is then empty).
  Status reserve(int64_t budgetBytes);

  // Forgets every slot (the start of a step); the in-use peak restarts.
  void beginStep();

  // A slot of `bytes` (> 0) starting at a 256-byte boundary. Errors: kResourceExhausted naming
  // swap.pinned_budget_gb when it does not fit the budget (counted in refusals), or before the
  // first reserve.
  Result<void*> take(int64_t bytes);

  PinnedPoolStats stats() const { return m_stats; }

  // Pinned blocks every pool of the process allocated so far (tests: none after the first step).
  static int64_t processHostAllocs() { return s_processHostAllocs.load(); }

 private:
  void freeBlock();

  char* m_base = nullptr;
  PinnedPoolStats m_stats;
  static std::atomic<int64_t> s_processHostAllocs;
};

// bytes rounded up to the pool's 256-byte slot granule.
constexpr int64_t pinnedSlotBytes(int64_t bytes) {
  return (bytes + PinnedHostPool::kAlignBytes - 1) / PinnedHostPool::kAlignBytes *
         PinnedHostPool::kAlignBytes;
}

}  // namespace moewb::engine::cuda
