// ThreadPool: every task runs exactly once for any pool size; nested calls run inline.
#include "runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <new>
#include <thread>
#include <vector>

namespace moewb::engine {
namespace {

TEST(ThreadPool, SizeCountsTheCaller) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  EXPECT_EQ(ThreadPool(0).size(), int32_t(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  for (int32_t threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {0, 1, 2, 7, 1000}) {
      for (int repeat = 0; repeat < 20; ++repeat) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
        pool.parallelFor(tasks, [&](int64_t i) { hits[size_t(i)].fetch_add(1); });
        for (int64_t i = 0; i < tasks; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads;
      }
    }
  }
}

TEST(ThreadPool, RangeChunksDependOnlyOnSizeAndGrain) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> chunks(4);
  pool.parallelForRange(10, 3, [&](int64_t begin, int64_t end) {
    chunks[size_t(begin / 3)] = {begin, end};
  });
  EXPECT_EQ(chunks[0], std::make_pair(int64_t(0), int64_t(3)));
  EXPECT_EQ(chunks[3], std::make_pair(int64_t(9), int64_t(10)));
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.parallelFor(4, [&](int64_t) { pool.parallelFor(5, [&](int64_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 20);
}

TEST(ThreadPool, ExceptionOnTheCallerLeavesThePoolUsable) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  // Slow tasks make sure the caller claims some; only the caller throws (a throw on a worker
  // thread would terminate, like any uncaught exception on a std::thread).
  EXPECT_THROW(pool.parallelFor(8,
                                [&](int64_t) {
                                  std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                  if (std::this_thread::get_id() == caller) throw std::bad_alloc();
                                }),
               std::bad_alloc);
  std::atomic<int> total{0};
  pool.parallelFor(100, [&](int64_t) { total.fetch_add(1); });
  EXPECT_EQ(total.load(), 100);
}

}  // namespace
}  // namespace moewb::engine
