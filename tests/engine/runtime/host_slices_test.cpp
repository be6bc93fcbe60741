// forEachSliceOnThreads: every index is covered exactly once, slices are grain-aligned and at
// most maxThreads, on more than one thread when asked.
#include "runtime/host_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace moewb::engine {
namespace {

struct Recorded {
  std::vector<std::pair<int64_t, int64_t>> slices;
  std::set<std::thread::id> threads;
};

Recorded run(int64_t count, int64_t grain, unsigned maxThreads) {
  Recorded recorded;
  std::mutex mutex;
  forEachSliceOnThreads(count, grain, maxThreads, [&](int64_t first, int64_t last) {
    std::lock_guard<std::mutex> lock(mutex);
    recorded.slices.emplace_back(first, last);
    recorded.threads.insert(std::this_thread::get_id());
  });
  std::sort(recorded.slices.begin(), recorded.slices.end());
  return recorded;
}

TEST(HostSlices, CoversTheRangeOnceInGrainAlignedSlices) {
  for (const int64_t count : {1, 7, 4096, 4097, 1000003}) {
    for (const int64_t grain : {1, 3, 4096}) {
      for (const unsigned threads : {1u, 2u, 5u, 16u}) {
        const Recorded r = run(count, grain, threads);
        ASSERT_FALSE(r.slices.empty());
        EXPECT_LE(r.slices.size(), size_t(threads));
        EXPECT_EQ(r.slices.front().first, 0);
        EXPECT_EQ(r.slices.back().second, count);
        for (size_t i = 0; i < r.slices.size(); ++i) {
          EXPECT_LT(r.slices[i].first, r.slices[i].second) << count << " " << grain;
          EXPECT_EQ(r.slices[i].first % grain, 0);
          if (i > 0) {
            EXPECT_EQ(r.slices[i].first, r.slices[i - 1].second);
          }
        }
      }
    }
  }
}

TEST(HostSlices, UsesSeveralThreadsAndNothingForAnEmptyRange) {
  EXPECT_EQ(run(1 << 20, 1, 4).threads.size(), 4u);
  EXPECT_TRUE(run(0, 1, 4).slices.empty());
  EXPECT_TRUE(run(-5, 1, 4).slices.empty());
  // Fewer grains than threads: one slice per grain.
  EXPECT_EQ(run(10, 4, 8).slices.size(), 3u);
}

TEST(HostSlices, AllSlicesAreDoneOnReturn) {
  std::atomic<int64_t> sum{0};
  forEachSliceOnThreads(100000, 64, 6, [&](int64_t first, int64_t last) {
    int64_t local = 0;
    for (int64_t i = first; i < last; ++i) local += i;
    sum += local;
  });
  EXPECT_EQ(sum.load(), int64_t(100000) * 99999 / 2);
}

}  // namespace
}  // namespace moewb::engine
