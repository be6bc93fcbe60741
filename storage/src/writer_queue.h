// WriterQueue: the hand-off between threads that add rows and the trace writer's thread.
//
// Producers push WriteOps under a mutex; the writer thread takes everything pending at once by
// swapping vectors (so both sides reuse their capacity and the lock is held for O(1)). Sync
// tickets let flush() wait until the writer has applied (and committed) every op queued before
// it. Ordering: ops are applied in push order. Costs: push is one lock, a move and, when the
// queue was empty, one notify. The queue is unbounded: the hot path never blocks on the disk.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "moewb/storage/rows.h"

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

// Marks a point in the queue: the writer commits (when `commit`) and then reports `ticket` done.
struct SyncOp {
  uint64_t ticket = 0;
  bool commit = true;
};

using WriteOp = std::variant<RunRow, FinishRunOp, TrackRow, SliceRow, CounterRow, ExpertLoadRow,
                             ConfigChangeOp, StatRow, StepRow, MetaOp, SyncOp>;

class WriterQueue {
 public:
  // Appends `op`; returns false (op dropped) once close() was called. Any thread.
  bool push(WriteOp op);
  // Appends a SyncOp and returns its ticket, or 0 once closed. Any thread.
  uint64_t pushSync(bool commit);
  // Writer thread: blocks until ops are pending or the queue is closed, then swaps the pending
  // ops into `out` (which must be empty). Returns false when closed and nothing is pending.
  bool popAll(std::vector<WriteOp>& out);
  // Refuses further pushes and wakes the writer thread. Any thread; idempotent.
  void close();

  // Writer thread: every ticket <= `ticket` has been handled.
  void markDone(uint64_t ticket);
  // Writer thread, on exit: no ticket will be handled any more; wakes every waiter.
  void markAllDone();
  // Blocks until `ticket` was handled (or the writer exited). Any thread.
  void waitDone(uint64_t ticket);

 private:
  std::mutex m_mutex;
  std::condition_variable m_ready;  // ops pending or closed
  std::condition_variable m_done;   // m_doneTicket advanced
  std::vector<WriteOp> m_pending;
  bool m_closed = false;
  bool m_writerExited = false;
  uint64_t m_lastTicket = 0;
  uint64_t m_doneTicket = 0;
};

}  // namespace moewb::storage::detail
