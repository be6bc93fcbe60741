// TrainingRun end to end on the CPU engine: a short run writes a readable trace and a summary that
// agrees with it; a stop request ends the run early with status "stopped"; a bad config creates
// no file.
#include "moewb/run/training_run.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "moewb/storage/trace_reader.h"

namespace moewb::run {
namespace {

engine::RunConfig smallConfig() {
  engine::RunConfig config;
  config.model.numLayers = 1;
  config.model.seqLen = 16;
  config.data.batchSize = 2;
  config.run.threads = 1;
  return config;
}

std::string tempTrace(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moewb-traced-" + name + "-" + std::to_string(getpid()) + ".sqlite"))
      .string();
}

TEST(TrainingRun, SummaryMatchesTheTrace) {
  std::string path = tempTrace("summary");
  auto run = TrainingRun::create(smallConfig(), {.outPath = path, .overwrite = true, .steps = 6});
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  auto summary = (*run)->run();
  ASSERT_TRUE(summary.isOk()) << summary.status().toString();
  EXPECT_EQ(summary->stepsDone, 6);
  EXPECT_FALSE(summary->stopped);
  EXPECT_GT(summary->meanTokensPerSecond, 0);
  ASSERT_EQ(summary->meanImbalancePerLayer.size(), 1u);
  EXPECT_GE(summary->meanImbalancePerLayer[0], 1.0);

  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, "completed");
  EXPECT_NE(runs->front().configToml.find("num_layers = 1"), std::string::npos);
  auto steps = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 6u);
  EXPECT_DOUBLE_EQ(steps->front().loss, summary->firstLoss);
  EXPECT_DOUBLE_EQ(steps->back().loss, summary->lastLoss);
  auto imbalance = (*reader)->layerImbalance();
  ASSERT_TRUE(imbalance.isOk());
  ASSERT_EQ(imbalance->size(), 1u);
  EXPECT_NEAR((*imbalance)[0].meanMaxOverMean, summary->meanImbalancePerLayer[0], 1e-9);
  std::filesystem::remove(path);
}

TEST(TrainingRun, StopRequestEndsRunWithStoppedStatus) {
  std::string path = tempTrace("stop");
  auto run = TrainingRun::create(smallConfig(), {.outPath = path, .overwrite = true, .steps = 1'000'000});
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  TrainingRun* raw = run->get();
  std::thread stopper([raw] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raw->requestStop();
  });
  auto summary = raw->run();
  stopper.join();
  ASSERT_TRUE(summary.isOk()) << summary.status().toString();
  EXPECT_TRUE(summary->stopped);
  EXPECT_GT(summary->stepsDone, 0);
  EXPECT_LT(summary->stepsDone, 1'000'000);
  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk());
  EXPECT_EQ(runs->front().status, "stopped");
  auto steps = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(int64_t(steps->size()), summary->stepsDone);
  std::filesystem::remove(path);
}

TEST(TrainingRun, BadConfigCreatesNoFile) {
  std::string path = tempTrace("bad");
  engine::RunConfig config = smallConfig();
  config.moe.topK = config.moe.numExperts + 1;
  auto run = TrainingRun::create(config, {.outPath = path});
  ASSERT_FALSE(run.isOk());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("moe.top_k"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace moewb::run
