// Durability and visibility: a reader sees each step as soon as the writer commits it (WAL) and
// never an unfinished step; batches commit early at maxBatchRows; and a writer process killed
// with SIGKILL leaves a readable file holding every step that was committed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "sqlite_trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::TempDir;
using namespace std::chrono_literals;

constexpr int kSlicesPerStep = 4;

void addStepWithSlices(TraceWriter& writer, RunId run, TrackId track, int64_t step,
                       bool finishStep = true) {
  for (int i = 0; i < kSlicesPerStep; ++i) {
    writer.addSlice(makeSlice(track, "phase" + std::to_string(i), step * 1000 + i * 100, 50, step));
  }
  if (!finishStep) return;
  StepRow row;
  row.run = run;
  row.step = step;
  row.startNs = step * 1000;
  row.endNs = step * 1000 + 900;
  writer.addStep(row);
}

// Step number -> number of slices tagged with it.
std::map<int64_t, int> slicesPerStep(TraceReader& reader) {
  std::map<int64_t, int> counts;
  auto slices = reader.slices(TimeWindow::all());
  EXPECT_TRUE(slices.isOk()) << slices.status().toString();
  if (slices.isOk()) {
    for (const SliceRow& s : *slices) ++counts[s.step];
  }
  return counts;
}

detail::SqliteTraceWriter& impl(TraceWriter& writer) {
  return dynamic_cast<detail::SqliteTraceWriter&>(writer);
}

TEST(TraceWal, ReaderSeesCommittedStepsButNotAnUnfinishedOne) {
  TempDir dir;
  const std::string path = dir.path("live.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const RunId run = writer->addRun({});
  const TrackId track = writer->addTrack({TrackId(), "trainer", "thread", 0, 0});
  addStepWithSlices(*writer, run, track, 0);
  impl(*writer).waitApplied();

  auto opened = TraceReader::open(path);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  auto reader = std::move(opened).value();
  auto steps = reader->steps(run);
  ASSERT_TRUE(steps.isOk()) << steps.status().toString();
  EXPECT_EQ(steps->size(), 1u);
  EXPECT_EQ(slicesPerStep(*reader), (std::map<int64_t, int>{{0, kSlicesPerStep}}));

  // Step 1's slices reach SQLite but stay in the open transaction until its step row arrives.
  addStepWithSlices(*writer, run, track, 1, /*finishStep=*/false);
  impl(*writer).waitApplied();
  steps = reader->steps(run);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->size(), 1u);
  EXPECT_EQ(slicesPerStep(*reader), (std::map<int64_t, int>{{0, kSlicesPerStep}}));

  StepRow step1;
  step1.run = run;
  step1.step = 1;
  writer->addStep(step1);
  impl(*writer).waitApplied();
  steps = reader->steps(run);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->size(), 2u);
  EXPECT_EQ(slicesPerStep(*reader),
            (std::map<int64_t, int>{{0, kSlicesPerStep}, {1, kSlicesPerStep}}));
  EXPECT_TRUE(writer->close().isOk());
  // The reader keeps working after the writer closed.
  steps = reader->steps(run);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->size(), 2u);
}

TEST(TraceWal, FlushCommitsWithoutAStep) {
  TempDir dir;
  const std::string path = dir.path("flush.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk());
  auto writer = std::move(created).value();
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});
  writer->addSlice(makeSlice(track, "x", 0, 10));
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  impl(*writer).waitApplied();
  EXPECT_TRUE(slicesPerStep(**reader).empty());
  ASSERT_TRUE(writer->flush().isOk());
  EXPECT_EQ(slicesPerStep(**reader), (std::map<int64_t, int>{{-1, 1}}));
}

TEST(TraceWal, LargeBatchesCommitEarly) {
  TempDir dir;
  const std::string path = dir.path("batch.moewb");
  WriterOptions options;
  options.maxBatchRows = 10;
  auto created = TraceWriter::create(path, options);
  ASSERT_TRUE(created.isOk());
  auto writer = std::move(created).value();
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});  // row 1
  for (int i = 0; i < 25; ++i) writer->addSlice(makeSlice(track, "s", i * 10, 5));
  impl(*writer).waitApplied();
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto slices = (*reader)->slices(TimeWindow::all());
  ASSERT_TRUE(slices.isOk());
  EXPECT_EQ(slices->size(), 19u);  // commits after rows 10 and 20 (the track is row 1)
}

// Child process: writes steps until killed (or a minute passes). Never returns.
[[noreturn]] void runWriterUntilKilled(const std::string& path) {
  auto created = TraceWriter::create(path);
  if (!created.isOk()) _exit(3);
  auto writer = std::move(created).value();
  const RunId run = writer->addRun({});
  const TrackId track = writer->addTrack({TrackId(), "trainer", "thread", 0, 0});
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int64_t step = 0; std::chrono::steady_clock::now() < deadline; ++step) {
    addStepWithSlices(*writer, run, track, step);
    // The kill lands anywhere, often while a step's rows sit in an open transaction.
    std::this_thread::sleep_for(200us);
  }
  _exit(4);
}

// Kills and reaps the child if the test ends early.
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Polls `path` until some run has at least `want` committed steps; returns how many it saw.
size_t waitForCommittedSteps(const std::string& path, size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::unique_ptr<TraceReader> reader;
  size_t seen = 0;
  while (seen < want && std::chrono::steady_clock::now() < deadline) {
    if (!reader) {
      auto opened = TraceReader::open(path);  // fails until the child created the schema
      if (opened.isOk()) reader = std::move(opened).value();
    }
    if (reader) {
      auto steps = reader->steps(RunId(1));
      if (steps.isOk()) seen = steps->size();
    }
    std::this_thread::sleep_for(2ms);
  }
  return seen;
}

TEST(TraceCrash, SigkilledWriterLeavesEveryCommittedStep) {
  TempDir dir;
  const std::string path = dir.path("killed.moewb");
  constexpr size_t kWantSteps = 25;
  // No thread exists in this process yet: fork before any writer is created.
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) runWriterUntilKilled(path);
  ChildGuard guard{child};

  const size_t seen = waitForCommittedSteps(path, kWantSteps);
  ASSERT_GE(seen, kWantSteps) << "the child did not commit steps in time";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int waitStatus = 0;
  ASSERT_EQ(waitpid(child, &waitStatus, 0), child);
  guard.pid = -1;
  ASSERT_TRUE(WIFSIGNALED(waitStatus) && WTERMSIG(waitStatus) == SIGKILL)
      << "the child exited on its own with status " << waitStatus;

  auto opened = TraceReader::open(path);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  auto reader = std::move(opened).value();
  auto steps = reader->steps(RunId(1));
  ASSERT_TRUE(steps.isOk()) << steps.status().toString();
  ASSERT_GE(steps->size(), seen);
  for (size_t i = 0; i < steps->size(); ++i) {
    ASSERT_EQ((*steps)[i].step, int64_t(i)) << "steps must be contiguous from 0";
  }
  const std::map<int64_t, int> counts = slicesPerStep(*reader);
  for (const StepRow& step : *steps) {
    auto it = counts.find(step.step);
    ASSERT_NE(it, counts.end()) << "step " << step.step << " lost its slices";
    EXPECT_EQ(it->second, kSlicesPerStep) << "step " << step.step;
  }
  // Slices of an unfinished step may be missing, but never of a committed one; nothing beyond
  // the next step can exist.
  EXPECT_LE(counts.rbegin()->first, int64_t(steps->size()));
}

}  // namespace
}  // namespace moewb::storage
