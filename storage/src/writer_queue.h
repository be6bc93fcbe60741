// WriterQueue: the hand-off between threads that add rows and the trace writer's thread.
//
// Producers construct WriteOps in place, under a mutex, in fixed-size chunks; the writer thread
// takes every pending chunk at once by swapping the chunk lists (the lock is held for O(1)) and
// hands the emptied chunks back to a small pool, so steady-state pushes neither allocate nor
// move earlier ops (a growing vector would move every queued op and touch fresh pages). Sync
// tickets let flush() wait until the writer has applied (and committed) every op queued before
// it. Ordering: ops are applied in push order. Costs: push is one lock, one row copy and, when
// the queue was empty, one notify.
// Back-pressure: the queue holds at most `capacity` ops that the writer has not taken yet; a push
// into a full queue waits until the writer takes the pending chunks (or the queue closes), so a
// writer slower than its producers slows them down instead of letting the trace fall arbitrarily
// far behind the run (and a SIGKILL lose all of it). Each such wait is counted (waits(),
// waitNs()). Sync ops do not wait: flush() must always be able to queue its marker.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/swap_queries.h"

namespace moewb::storage::detail {

struct FinishRunOp {
  RunId run;
  std::string status;
  std::string message;
  int64_t endNs = 0;
};

struct ConfigChangeOp {
  RunId run;
  ConfigChangeRow row;
};

struct MetaOp {
  std::string key;
  std::string value;
};

// A GPU activity slice with its detail row (gpu_kernel, gpu_memcpy, ... keyed by the slice id).
struct GpuActivityOp {
  SliceRow slice;
  std::variant<GpuKernelRow, GpuMemcpyRow, GpuMemsetRow, GpuSyncRow, CudaApiRow> detail;
};

// Swap rows with the run they belong to (swap_event; swap_plan and its children; swap_step).
struct SwapEventOp {
  RunId run;
  SwapEventRow row;
};
struct SwapPlanOp {
  RunId run;
  SwapPlanRow row;
};
struct SwapStepOp {
  RunId run;
  SwapStepRow row;
};

// Marks a point in the queue: the writer commits (when `commit`) and then reports `ticket` done.
struct SyncOp {
  uint64_t ticket = 0;
  bool commit = true;
};

// Rare, large rows are boxed so that a WriteOp is only as large as a SliceRow (the common op).
using WriteOp = std::variant<std::unique_ptr<RunRow>, FinishRunOp, TrackRow, SliceRow, CounterRow,
                             ExpertLoadRow, std::unique_ptr<ConfigChangeOp>, StatRow, StepRow,
                             MetaOp, SyncOp, std::unique_ptr<A2aTrafficRow>,
                             std::unique_ptr<CollectiveRow>, MemoryEventRow,
                             std::unique_ptr<GpuActivityOp>, std::unique_ptr<GpuMemoryRow>,
                             SwapEventOp, std::unique_ptr<SwapPlanOp>,
                             std::unique_ptr<SwapStepOp>>;

class WriterQueue {
 public:
  using Chunk = std::vector<WriteOp>;
  static constexpr size_t kChunkOps = 512;   // ~70 KB: below malloc's mmap threshold
  static constexpr size_t kPooledChunks = 64;

  // At most `capacity` (>= 1) ops pending before a push waits.
  explicit WriterQueue(size_t capacity = SIZE_MAX) : m_capacity(capacity < 1 ? 1 : capacity) {}

  // Appends a WriteOp built from `op` (one of its alternatives), first waiting while `capacity`
  // ops are pending; returns false (op dropped) once close() was called. Any thread but the
  // writer's.
  template <typename T>
  bool push(T&& op);
  // Appends a SyncOp and returns its ticket, or 0 once closed. Any thread.
  uint64_t pushSync(bool commit);
  // Writer thread: blocks until ops are pending or the queue is closed, then swaps the pending
  // chunks (ops in order) into `out` (which must be empty). Returns false when closed and
  // nothing is pending.
  bool popAll(std::vector<Chunk>& out);
  // The same, but returns true with `out` empty when nothing was pending for `idle` (so the
  // writer can do periodic work, such as a heartbeat, while the run adds no rows).
  bool popAll(std::vector<Chunk>& out, std::chrono::milliseconds idle);
  // Writer thread: destroys the ops in `chunks`, keeps a few emptied chunks for later pushes and
  // leaves `chunks` empty.
  void recycle(std::vector<Chunk>& chunks);
  // Refuses further pushes and wakes the writer thread. Any thread; idempotent.
  void close();

  // Writer thread: every ticket <= `ticket` has been handled.
  void markDone(uint64_t ticket);
  // Writer thread, on exit: no ticket will be handled any more; wakes every waiter.
  void markAllDone();
  // Blocks until `ticket` was handled (or the writer exited). Any thread.
  void waitDone(uint64_t ticket);

  // Pushes that waited for room, and their total wait in ns, since construction. Any thread.
  int64_t waits() const { return m_waits.load(std::memory_order_relaxed); }
  int64_t waitNs() const { return m_waitNs.load(std::memory_order_relaxed); }

 private:
  // Appends an empty chunk (from the pool when it has one) to m_pending. Holds m_mutex.
  void addChunkLocked();
  // Waits while the queue is full and open; counts the wait. Holds `lock` on m_mutex.
  void waitForRoomLocked(std::unique_lock<std::mutex>& lock);

  std::mutex m_mutex;
  std::condition_variable m_ready;  // ops pending or closed
  std::condition_variable m_done;   // m_doneTicket advanced
  std::condition_variable m_room;   // the writer took the pending ops, or closed
  const size_t m_capacity;
  size_t m_pendingOps = 0;       // ops in m_pending
  std::atomic<int64_t> m_waits{0};
  std::atomic<int64_t> m_waitNs{0};
  std::vector<Chunk> m_pending;  // pending ops in order; only the last chunk may be part-full
  std::vector<Chunk> m_pool;     // empty chunks with capacity kChunkOps
  bool m_closed = false;
  bool m_writerExited = false;
  uint64_t m_lastTicket = 0;
  uint64_t m_doneTicket = 0;
};

template <typename T>
bool WriterQueue::push(T&& op) {
  bool wasEmpty = false;
  {
    std::unique_lock lock(m_mutex);
    if (m_pendingOps >= m_capacity && !m_closed) waitForRoomLocked(lock);
    if (m_closed) return false;
    wasEmpty = m_pending.empty();
    if (wasEmpty || m_pending.back().size() == kChunkOps) addChunkLocked();
    m_pending.back().emplace_back(std::in_place_type<std::decay_t<T>>, std::forward<T>(op));
    ++m_pendingOps;
  }
  // The writer only sleeps when it found the queue empty, so one notify per burst is enough.
  if (wasEmpty) m_ready.notify_one();
  return true;
}

}  // namespace moewb::storage::detail
