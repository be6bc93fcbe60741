// BackgroundRun: a run trained on a worker thread, its live commands, its end and its errors.
#include "moewb/run/background_run.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "../source_dir.h"

namespace moewb::run {
namespace {

namespace fs = std::filesystem;
using Kind = engine::TrainerCommand::Kind;

std::string tinyConfig() { return moewb::test::sourceDir() + "/samples/configs/tiny.toml"; }

fs::path tempTrace(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "moewb-background-run-test";
  fs::create_directories(dir);
  fs::remove(dir / name);
  return dir / name;
}

bool waitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

TEST(BackgroundRun, PauseThenStopEndsWithAStoppedSummary) {
  BackgroundRun run;
  std::atomic<bool> done{false};
  bool ok = false, stopped = false;
  const fs::path trace = tempTrace("pause-stop.sqlite");
  ASSERT_TRUE(run.start(tinyConfig(), {.outPath = trace.string(), .steps = 1'000'000},
                        [&](const Result<RunSummary>& summary) {
                          ok = summary.isOk();
                          stopped = ok && summary->stopped;
                          done.store(true);
                        })
                  .isOk());
  EXPECT_TRUE(run.running());
  EXPECT_EQ(run.plannedSteps(), 1'000'000);
  EXPECT_TRUE(run.post({Kind::kPause}).get().isOk());
  EXPECT_TRUE(waitFor([&] { return run.paused(); }));
  // A second run cannot start while this one is not joined.
  EXPECT_EQ(run.start(tinyConfig(), {.outPath = tempTrace("second.sqlite").string()}, {}).code(),
            StatusCode::kFailedPrecondition);
  run.requestStop();
  ASSERT_TRUE(waitFor([&] { return done.load(); }));
  run.join();
  EXPECT_FALSE(run.running());
  EXPECT_TRUE(ok);
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(fs::exists(trace));
  EXPECT_EQ(run.post({Kind::kResume}).get().code(), StatusCode::kFailedPrecondition);
}

TEST(BackgroundRun, BadConfigFailsAtStartAndCreatesNothing) {
  BackgroundRun run;
  const fs::path trace = tempTrace("never.sqlite");
  Status status = run.start(moewb::test::sourceDir() + "/samples/configs/missing.toml",
                            {.outPath = trace.string()}, {});
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.toString();
  EXPECT_NE(status.message().find("missing.toml"), std::string::npos) << status.toString();
  EXPECT_FALSE(run.running());
  EXPECT_FALSE(fs::exists(trace));
}

TEST(BackgroundRun, DestroyingARunningRunStopsIt) {
  std::atomic<bool> done{false};
  {
    BackgroundRun run;
    ASSERT_TRUE(run.start(tinyConfig(),
                          {.outPath = tempTrace("destroyed.sqlite").string(), .steps = 1'000'000},
                          [&](const Result<RunSummary>&) { done.store(true); })
                    .isOk());
  }
  EXPECT_TRUE(done.load());
}

}  // namespace
}  // namespace moewb::run
