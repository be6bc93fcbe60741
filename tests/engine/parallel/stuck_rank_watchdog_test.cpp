// The stuck-rank watchdog of multi-process runs: it fires once, after the grace period, only when
// a peer failed and the rank did not finish; its message names the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "train/parallel/stuck_rank_watchdog.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

TEST(StuckRankWatchdog, FiresOnceAfterTheGraceWhenTheRankDoesNotFinish) {
  std::atomic<int> calls{0};
  std::string message;
  {
    StuckRankWatchdog watchdog(milliseconds(50), [&](const Status& status) {
      message = status.message();
      EXPECT_EQ(status.code(), StatusCode::kCancelled);
      ++calls;
    });
    const auto start = std::chrono::steady_clock::now();
    watchdog.peerFailed("rank 1 died (its connection to the store closed)");
    watchdog.peerFailed("rank 2 died");  // only the first failure counts
    while (calls.load() == 0 && std::chrono::steady_clock::now() - start < milliseconds(2000)) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_NE(message.find("rank 1 died"), std::string::npos) << message;
  EXPECT_NE(message.find("did not stop within 50 ms"), std::string::npos) << message;
}

TEST(StuckRankWatchdog, StaysQuietWhenTheRankFinishesInTime) {
  std::atomic<int> calls{0};
  {
    StuckRankWatchdog watchdog(milliseconds(200), [&](const Status&) { ++calls; });
    watchdog.peerFailed("rank 1 died");
    std::this_thread::sleep_for(milliseconds(20));
    watchdog.finished();
    std::this_thread::sleep_for(milliseconds(300));
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(StuckRankWatchdog, StaysQuietWithoutAPeerFailure) {
  std::atomic<int> calls{0};
  {
    StuckRankWatchdog watchdog(milliseconds(10), [&](const Status&) { ++calls; });
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace moewb::engine
