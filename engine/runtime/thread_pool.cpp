// ThreadPool implementation: a job is published under the mutex with a generation number;
// workers that wake while it is open join it (counted in m_activeWorkers) and claim task indices
// from an atomic counter. The caller claims tasks too, then closes the job and waits until every
// worker that joined has left, so no worker can touch a job after parallelFor returns.
#include "runtime/thread_pool.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>

#include "moewb/base/check.h"

namespace moewb::engine {
namespace {

// True on pool workers and on a caller while it runs tasks: nested parallelFor runs inline.
thread_local bool t_insideTask = false;

void configureBlasOnce() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

ThreadPool::ThreadPool(int32_t threads) {
  configureBlasOnce();
  if (threads <= 0) threads = int32_t(std::max(1u, std::thread::hardware_concurrency()));
  m_workers.reserve(size_t(threads - 1));
  for (int32_t i = 1; i < threads; ++i) {
    try {
      m_workers.emplace_back([this] { workerLoop(); });
    } catch (const std::system_error& e) {
      // The workers already started wait on members the unwinding would destroy: stop them first.
      stopWorkers();
      throw ThreadStartError("could not start thread " + std::to_string(i + 1) + " of " +
                             std::to_string(threads) + " (" + e.what() +
                             "): the system's limit on threads or processes is lower; set "
                             "run.threads to at most " + std::to_string(i) +
                             " (0 takes the number of cores)");
    }
  }
}

ThreadPool::~ThreadPool() { stopWorkers(); }

void ThreadPool::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  for (auto& worker : m_workers) worker.join();
  m_workers.clear();
}

void ThreadPool::runClaimedTasks() {
  for (;;) {
    int64_t task = m_nextTask.fetch_add(1, std::memory_order_relaxed);
    if (task >= m_numTasks) return;
    (*m_fn)(task);
  }
}

void ThreadPool::workerLoop() {
  t_insideTask = true;
  uint64_t seenGeneration = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_wake.wait(lock, [&] { return m_stop || (m_jobOpen && m_generation != seenGeneration); });
      if (m_stop) return;
      seenGeneration = m_generation;
      ++m_activeWorkers;
    }
    runClaimedTasks();
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (--m_activeWorkers == 0) m_idle.notify_all();
    }
  }
}

void ThreadPool::parallelFor(int64_t numTasks, const std::function<void(int64_t)>& fn) {
  if (numTasks <= 0) return;
  if (numTasks == 1 || m_workers.empty() || t_insideTask) {
    for (int64_t task = 0; task < numTasks; ++task) fn(task);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    MOEWB_CHECK(!m_jobOpen && m_activeWorkers == 0);
    m_fn = &fn;
    m_numTasks = numTasks;
    m_nextTask.store(0, std::memory_order_relaxed);
    m_jobOpen = true;
    ++m_generation;
  }
  m_wake.notify_all();
  // Closes the job and waits for the workers that joined it, also when a task throws (bad_alloc),
  // so no worker can touch `fn` after this call returns.
  struct JobCloser {
    ThreadPool& pool;
    ~JobCloser() {
      t_insideTask = false;
      std::unique_lock<std::mutex> lock(pool.m_mutex);
      pool.m_jobOpen = false;
      pool.m_nextTask.store(pool.m_numTasks, std::memory_order_relaxed);
      pool.m_idle.wait(lock, [&] { return pool.m_activeWorkers == 0; });
      pool.m_fn = nullptr;
    }
  } closer{*this};
  t_insideTask = true;
  runClaimedTasks();
}

void ThreadPool::parallelForRange(int64_t n, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& fn) {
  MOEWB_CHECK(grain > 0);
  if (n <= 0) return;
  int64_t chunks = (n + grain - 1) / grain;
  parallelFor(chunks, [&](int64_t chunk) {
    int64_t begin = chunk * grain;
    fn(begin, std::min(n, begin + grain));
  });
}

}  // namespace moewb::engine
