// Issue 19, item 7: a reader tells a live run from a dead one by the writer's heartbeat
// (meta heartbeat_unix_ms), the writer reports which steps are durable (committedSteps), and
// the queue to the writer is bounded: a full queue makes producers wait, and the waits are
// counted in stats rows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "moewb/base/units.h"
#include "moewb/storage/run_liveness.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"
#include "writer_queue.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::queryCsv;
using testing::TempDir;

int64_t nowMs() {
  return unixNowNs() / kNsPerMs;
}

RunRow runWithStatus(const std::string& status) {
  RunRow run;
  run.name = "r";
  run.status = status;
  return run;
}

int64_t heartbeatOf(const std::string& path) {
  const std::vector<std::string> rows =
      queryCsv(path, "SELECT value FROM meta WHERE key = 'heartbeat_unix_ms'");
  return rows.size() == 1 ? std::stoll(rows[0]) : -1;
}

TEST(RunLiveness, StatusFromTheHeartbeat) {
  const int64_t now = 1'800'000'000'000;
  const std::map<std::string, std::string> fresh{
      {kMetaHeartbeatUnixMs, std::to_string(now - 3000)}};
  const std::map<std::string, std::string> stale{
      {kMetaHeartbeatUnixMs, std::to_string(now - kHeartbeatStaleMs - 1000)}};
  const std::map<std::string, std::string> none;
  const std::map<std::string, std::string> garbage{{kMetaHeartbeatUnixMs, "12abc"}};

  EXPECT_EQ(runLiveness(runWithStatus("completed"), stale, now).state, RunLiveness::State::kEnded);
  EXPECT_EQ(describeRunStatus(runWithStatus("stopped"), stale, now), "stopped");

  const RunLiveness live = runLiveness(runWithStatus("running"), fresh, now);
  EXPECT_EQ(live.state, RunLiveness::State::kLive);
  EXPECT_EQ(live.heartbeatAgeMs, 3000);
  EXPECT_EQ(describeRunStatus(runWithStatus("running"), fresh, now),
            "running (last heartbeat 3 s ago)");

  EXPECT_EQ(runLiveness(runWithStatus("running"), stale, now).state, RunLiveness::State::kDead);
  EXPECT_EQ(describeRunStatus(runWithStatus("running"), stale, now),
            "ended without closing (writer died; last heartbeat 31 s ago)");

  for (const auto* meta : {&none, &garbage}) {
    const RunLiveness unknown = runLiveness(runWithStatus("running"), *meta, now);
    EXPECT_EQ(unknown.state, RunLiveness::State::kUnknown);
    EXPECT_EQ(unknown.heartbeatAgeMs, -1);
    EXPECT_NE(describeRunStatus(runWithStatus("running"), *meta, now).find("no heartbeat"),
              std::string::npos);
  }
  // A heartbeat from the future (another machine's clock) is fresh, not negative.
  const std::map<std::string, std::string> future{
      {kMetaHeartbeatUnixMs, std::to_string(now + 5000)}};
  EXPECT_EQ(runLiveness(runWithStatus("running"), future, now).heartbeatAgeMs, 0);
}

TEST(TraceWriterHeartbeat, SetAtCreationAndEveryCommit) {
  TempDir dir;
  const std::string path = dir.path("heartbeat.sqlite");
  const int64_t before = nowMs();
  auto writer = TraceWriter::create(path);
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  const int64_t created = heartbeatOf(path);
  EXPECT_GE(created, before);
  EXPECT_LE(created, nowMs());

  const RunId run = (*writer)->addRun(runWithStatus(""));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  StepRow step;
  step.run = run;
  step.step = 0;
  (*writer)->addStep(step);
  ASSERT_TRUE((*writer)->flush().isOk());
  EXPECT_GT(heartbeatOf(path), created) << "the step's commit did not refresh the heartbeat";

  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto meta = (*reader)->meta();
  auto runs = (*reader)->runs();
  ASSERT_TRUE(meta.isOk() && runs.isOk());
  EXPECT_EQ(runLiveness(runs->front(), *meta, nowMs()).state, RunLiveness::State::kLive);
  ASSERT_TRUE((*writer)->close().isOk());
}

TEST(TraceWriterHeartbeat, IdleWriterKeepsBeating) {
  TempDir dir;
  const std::string path = dir.path("idle.sqlite");
  auto writer = TraceWriter::create(path);
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  (void)(*writer)->addRun(runWithStatus(""));
  ASSERT_TRUE((*writer)->flush().isOk());
  const int64_t first = heartbeatOf(path);
  // Nothing is added: the writer still refreshes the heartbeat once per period.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(3 * kHeartbeatPeriodMs);
  int64_t later = first;
  while (later == first && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    later = heartbeatOf(path);
  }
  EXPECT_GE(later, first + kHeartbeatPeriodMs - 100) << "no heartbeat while idle";
  ASSERT_TRUE((*writer)->close().isOk());
}

TEST(TraceWriterCommittedSteps, SmallestOverTheRanksWithATrack) {
  TempDir dir;
  const std::string path = dir.path("committed.sqlite");
  auto writer = TraceWriter::create(path);
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  TraceWriter& w = **writer;
  const RunId run = w.addRun(runWithStatus(""));
  EXPECT_EQ(w.committedSteps(), 0);
  for (int32_t rank : {0, 1}) w.addTrack({TrackId(), "trainer thread", "thread", rank, 1});
  auto addStep = [&](int32_t rank, int64_t index) {
    StepRow step;
    step.run = run;
    step.rank = rank;
    step.step = index;
    w.addStep(step);
  };
  addStep(0, 0);
  addStep(0, 1);
  ASSERT_TRUE(w.flush().isOk());
  EXPECT_EQ(w.committedSteps(), 0) << "rank 1 has committed nothing yet";
  addStep(1, 0);
  ASSERT_TRUE(w.flush().isOk());
  EXPECT_EQ(w.committedSteps(), 1);
  addStep(1, 1);
  addStep(0, 2);
  ASSERT_TRUE(w.flush().isOk());
  EXPECT_EQ(w.committedSteps(), 2);
  ASSERT_TRUE(w.close().isOk());
}

TEST(WriterQueueBackPressure, FullQueueMakesThePusherWaitUntilTheWriterTakesIt) {
  detail::WriterQueue queue(2);
  ASSERT_TRUE(queue.push(StatRow{"a", "info", 1, ""}));
  ASSERT_TRUE(queue.push(StatRow{"b", "info", 2, ""}));
  EXPECT_EQ(queue.waits(), 0);
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(queue.push(StatRow{"c", "info", 3, ""}));
    pushed.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(pushed.load()) << "a push into a full queue did not wait";
  std::vector<detail::WriterQueue::Chunk> taken;
  ASSERT_TRUE(queue.popAll(taken));
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(queue.waits(), 1);
  EXPECT_GE(queue.waitNs(), 100 * kNsPerMs);
  queue.recycle(taken);
  // The third op is pending, in order after the two taken.
  ASSERT_TRUE(queue.popAll(taken));
  ASSERT_EQ(taken.size(), 1u);
  ASSERT_EQ(taken[0].size(), 1u);
  EXPECT_EQ(std::get<StatRow>(taken[0][0]).name, "c");
  queue.recycle(taken);
}

TEST(WriterQueueBackPressure, CloseWakesAWaitingPusherAndDropsItsOp) {
  detail::WriterQueue queue(1);
  ASSERT_TRUE(queue.push(StatRow{"a", "info", 1, ""}));
  std::atomic<int> result{-1};
  std::thread producer([&] { result.store(queue.push(StatRow{"b", "info", 2, ""}) ? 1 : 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  queue.close();
  producer.join();
  EXPECT_EQ(result.load(), 0);
  // A sync marker never waits for room: flush() must always get through.
  detail::WriterQueue full(1);
  ASSERT_TRUE(full.push(StatRow{"a", "info", 1, ""}));
  EXPECT_NE(full.pushSync(true), 0u);
}

TEST(TraceWriterBackPressure, ASmallQueueKeepsEveryRowAndCountsTheWaits) {
  TempDir dir;
  const std::string path = dir.path("backpressure.sqlite");
  WriterOptions options;
  options.maxQueuedOps = 1;  // every add waits for the writer thread
  auto writer = TraceWriter::create(path, options);
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  TraceWriter& w = **writer;
  const TrackId track = w.addTrack({TrackId(), "t", "thread", 0, 1});
  constexpr int kThreads = 4, kSlices = 3000;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kSlices; ++i) w.addSlice(makeSlice(track, "s", t * kSlices + i, 1));
    });
  }
  for (std::thread& p : producers) p.join();
  ASSERT_TRUE(w.close().isOk());
  EXPECT_EQ(queryCsv(path, "SELECT count(*) FROM slice"),
            std::vector<std::string>{std::to_string(kThreads * kSlices)});
  const std::vector<std::string> waits =
      queryCsv(path, "SELECT value FROM stats WHERE name = 'trace_writer_waits'");
  ASSERT_EQ(waits.size(), 1u) << "no stats row for the waits";
  EXPECT_GT(std::stoll(waits[0]), 0);
  EXPECT_EQ(queryCsv(path,
                     "SELECT count(*) FROM stats WHERE name = 'trace_writer_wait_ms' "
                     "AND severity = 'info' AND value >= 0"),
            std::vector<std::string>{"1"});
}

}  // namespace
}  // namespace moewb::storage
