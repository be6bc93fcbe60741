// StuckRankWatchdog: the last line of defence of a multi-process rank (like PyTorch's NCCL
// watchdog). When a peer dies, the rank aborts its communicators; a GPU whose stream is stuck
// behind an NCCL kernel that the abort could not stop would otherwise keep the rank waiting
// forever in a blocking CUDA call. The watchdog arms on the first peer failure and, if the rank
// has not finished (finished()) within `grace`, calls `stuck` once from its own thread with a
// status naming the failure, so the application can record it and end the process.
// Thread-safe; the destructor disarms and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "moewb/base/status.h"

namespace moewb::engine {

class StuckRankWatchdog {
 public:
  StuckRankWatchdog(std::chrono::milliseconds grace, std::function<void(const Status&)> stuck);
  ~StuckRankWatchdog();
  StuckRankWatchdog(const StuckRankWatchdog&) = delete;
  StuckRankWatchdog& operator=(const StuckRankWatchdog&) = delete;

  // A peer failed (`reason` names it); the first call arms the watchdog.
  void peerFailed(const std::string& reason);
  // The rank finished (successfully or not); the watchdog stands down.
  void finished();

 private:
  void loop();

  const std::chrono::milliseconds m_grace;
  const std::function<void(const Status&)> m_stuck;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::string m_reason;  // non-empty once armed
  bool m_finished = false;
  std::thread m_thread;
};

}  // namespace moewb::engine
