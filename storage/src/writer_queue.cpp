// The mutex/condition-variable queue between row producers and the trace writer thread.
#include "writer_queue.h"

#include <utility>

namespace moewb::storage::detail {

void WriterQueue::addChunkLocked() {
  if (!m_pool.empty()) {
    m_pending.push_back(std::move(m_pool.back()));
    m_pool.pop_back();
    return;
  }
  m_pending.emplace_back().reserve(kChunkOps);
}

uint64_t WriterQueue::pushSync(bool commit) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(m_mutex);
    if (m_closed) return 0;
    ticket = ++m_lastTicket;
    if (m_pending.empty() || m_pending.back().size() == kChunkOps) addChunkLocked();
    m_pending.back().emplace_back(SyncOp{ticket, commit});
    ++m_pendingOps;
  }
  m_ready.notify_one();
  return ticket;
}

void WriterQueue::waitForRoomLocked(std::unique_lock<std::mutex>& lock) {
  const auto start = std::chrono::steady_clock::now();
  m_room.wait(lock, [&] { return m_pendingOps < m_capacity || m_closed; });
  const auto waited = std::chrono::steady_clock::now() - start;
  m_waits.fetch_add(1, std::memory_order_relaxed);
  m_waitNs.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
                     std::memory_order_relaxed);
}

bool WriterQueue::popAll(std::vector<Chunk>& out) {
  std::unique_lock lock(m_mutex);
  m_ready.wait(lock, [&] { return !m_pending.empty() || m_closed; });
  if (m_pending.empty()) return false;
  std::swap(out, m_pending);
  m_pendingOps = 0;
  lock.unlock();
  m_room.notify_all();
  return true;
}

bool WriterQueue::popAll(std::vector<Chunk>& out, std::chrono::milliseconds idle) {
  std::unique_lock lock(m_mutex);
  if (!m_ready.wait_for(lock, idle, [&] { return !m_pending.empty() || m_closed; })) {
    return true;  // idle: nothing pending, not closed
  }
  if (m_pending.empty()) return false;
  std::swap(out, m_pending);
  m_pendingOps = 0;
  lock.unlock();
  m_room.notify_all();
  return true;
}

void WriterQueue::recycle(std::vector<Chunk>& chunks) {
  for (Chunk& chunk : chunks) chunk.clear();  // destroys the ops outside the lock
  {
    std::lock_guard lock(m_mutex);
    for (Chunk& chunk : chunks) {
      if (m_pool.size() >= kPooledChunks) break;
      if (chunk.capacity() == kChunkOps) m_pool.push_back(std::move(chunk));
    }
  }
  chunks.clear();  // frees the chunks the pool did not take
}

void WriterQueue::close() {
  {
    std::lock_guard lock(m_mutex);
    m_closed = true;
  }
  m_ready.notify_one();
  m_room.notify_all();
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
