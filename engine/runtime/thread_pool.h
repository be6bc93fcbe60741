// ThreadPool: the CPU backend's fixed set of worker threads and its one primitive, parallelFor.
//
// parallelFor(numTasks, fn) runs fn(task) once for every task index, spread over the caller and
// the workers, and returns when all are done. Tasks are claimed dynamically, so each task's
// result must not depend on which thread runs it; ops make the task partition a function of the
// problem size only (never of the thread count) and give every output element exactly one task
// with a fixed reduction order. That is what makes results bit-identical for any thread count.
// Costs: one condition-variable wake-up of the workers per call (~10 us); a call with one task,
// a pool of one thread, or a call from inside a task runs inline on the calling thread.
// Thread-safety: parallelFor may be called from one thread at a time (the training thread).
// Creating a pool also sets OpenBLAS to one thread per call, since the pool parallelises GEMMs
// itself (OpenBLAS threads would make the reduction order depend on the thread count).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace moewb::engine {

// Thrown by ThreadPool's constructor when the system refuses a thread (a pids or process limit);
// what() says how many started and what run.threads to set. Runner factories turn it into a
// Status (resource exhausted).
class ThreadStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ThreadPool {
 public:
  // `threads` counts the calling thread too; 0 = std::thread::hardware_concurrency(). Throws
  // ThreadStartError (after joining the workers it started) when a thread cannot be created.
  explicit ThreadPool(int32_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run tasks, including the caller (>= 1).
  int32_t size() const { return int32_t(m_workers.size()) + 1; }

  // Runs fn(task) for every task in [0, numTasks) and waits for all. See the file comment for
  // the determinism rule. An exception thrown by fn on the calling thread propagates once the
  // workers have left the job (remaining tasks are skipped); one thrown on a worker terminates
  // the process, as for any std::thread.
  void parallelFor(int64_t numTasks, const std::function<void(int64_t)>& fn);

  // Splits [0, n) into chunks of `grain` (the last may be shorter) and runs fn(begin, end) per
  // chunk in parallel. The chunks depend only on n and grain.
  void parallelForRange(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void workerLoop();
  void runClaimedTasks();
  void stopWorkers();  // wakes, joins and forgets every worker

  std::vector<std::thread> m_workers;
  std::mutex m_mutex;
  std::condition_variable m_wake;  // workers wait here for a job
  std::condition_variable m_idle;  // the caller waits here for joined workers to leave
  bool m_stop = false;
  bool m_jobOpen = false;       // workers may join the current job
  uint64_t m_generation = 0;    // incremented per job
  int32_t m_activeWorkers = 0;  // workers inside the current job
  const std::function<void(int64_t)>* m_fn = nullptr;
  int64_t m_numTasks = 0;
  std::atomic<int64_t> m_nextTask{0};
};

}  // namespace moewb::engine
