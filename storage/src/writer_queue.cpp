// The mutex/condition-variable queue between row producers and the trace writer thread.
#include "writer_queue.h"

#include <utility>

namespace moewb::storage::detail {

bool WriterQueue::push(WriteOp op) {
  bool wasEmpty = false;
  {
    std::lock_guard lock(m_mutex);
    if (m_closed) return false;
    wasEmpty = m_pending.empty();
    m_pending.push_back(std::move(op));
  }
  // The writer only sleeps when it found the queue empty, so one notify per burst is enough.
  if (wasEmpty) m_ready.notify_one();
  return true;
}

uint64_t WriterQueue::pushSync(bool commit) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(m_mutex);
    if (m_closed) return 0;
    ticket = ++m_lastTicket;
    m_pending.push_back(SyncOp{ticket, commit});
  }
  m_ready.notify_one();
  return ticket;
}

bool WriterQueue::popAll(std::vector<WriteOp>& out) {
  std::unique_lock lock(m_mutex);
  m_ready.wait(lock, [&] { return !m_pending.empty() || m_closed; });
  if (m_pending.empty()) return false;
  std::swap(out, m_pending);
  return true;
}

void WriterQueue::close() {
  {
    std::lock_guard lock(m_mutex);
    m_closed = true;
  }
  m_ready.notify_one();
}

void WriterQueue::markDone(uint64_t ticket) {
  {
    std::lock_guard lock(m_mutex);
    if (ticket > m_doneTicket) m_doneTicket = ticket;
  }
  m_done.notify_all();
}

void WriterQueue::markAllDone() {
  {
    std::lock_guard lock(m_mutex);
    m_writerExited = true;
  }
  m_done.notify_all();
}

void WriterQueue::waitDone(uint64_t ticket) {
  std::unique_lock lock(m_mutex);
  m_done.wait(lock, [&] { return m_doneTicket >= ticket || m_writerExited; });
}

}  // namespace moewb::storage::detail
