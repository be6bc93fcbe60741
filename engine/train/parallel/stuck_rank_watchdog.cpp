// The stuck-rank watchdog of multi-process runs (see stuck_rank_watchdog.h).
#include "train/parallel/stuck_rank_watchdog.h"

namespace moewb::engine {

StuckRankWatchdog::StuckRankWatchdog(std::chrono::milliseconds grace,
                                     std::function<void(const Status&)> stuck)
    : m_grace(grace), m_stuck(std::move(stuck)) {
  if (m_stuck) m_thread = std::thread([this] { loop(); });
}

StuckRankWatchdog::~StuckRankWatchdog() {
  finished();
  if (m_thread.joinable()) m_thread.join();
}

void StuckRankWatchdog::peerFailed(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_reason.empty() || m_finished) return;
    m_reason = reason.empty() ? "a peer failed" : reason;
  }
  m_wake.notify_all();
}

void StuckRankWatchdog::finished() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_finished = true;
  }
  m_wake.notify_all();
}

void StuckRankWatchdog::loop() {
  std::unique_lock<std::mutex> lock(m_mutex);
  m_wake.wait(lock, [this] { return m_finished || !m_reason.empty(); });
  if (m_finished) return;
  if (m_wake.wait_for(lock, m_grace, [this] { return m_finished; })) return;
  const Status status = cancelled(m_reason + "; this rank's GPU work did not stop within " +
                                  std::to_string(m_grace.count()) +
                                  " ms of aborting its communicators");
  lock.unlock();
  m_stuck(status);
}

}  // namespace moewb::engine
