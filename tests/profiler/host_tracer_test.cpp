// HostTracer maps engine events to the right rows: slice names and depths, step rows, one
// expert_load row per expert, counters, and the run's final status.
#include "moewb/profiler/host_tracer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler {
namespace {

using engine::Pass;
using engine::Phase;

std::string tempTrace(const std::string& name) {
  auto path = std::filesystem::temp_directory_path() /
              ("moewb-tracer-" + name + "-" + std::to_string(getpid()) + ".sqlite");
  return path.string();
}

TEST(HostTracer, WritesRowsForEveryEvent) {
  std::string path = tempTrace("rows");
  {
    auto writer = storage::TraceWriter::create(path, {.overwrite = true});
    ASSERT_TRUE(writer.isOk()) << writer.status().toString();
    HostTracer tracer(writer->get());
    tracer.onRunStart({.name = "t", .configToml = "[run]\n", .backend = "cpu", .worldSize = 1,
                       .numLayers = 1, .numExperts = 3, .startNs = 1000});
    tracer.onPhase({.step = 0, .layer = -1, .phase = Phase::kForward, .pass = Pass::kForward,
                    .startNs = 1000, .endNs = 5000});
    tracer.onPhase({.step = 0, .layer = 0, .phase = Phase::kExperts, .pass = Pass::kForward,
                    .startNs = 2000, .endNs = 3000});
    tracer.onPhase({.step = 0, .layer = 0, .phase = Phase::kExperts, .pass = Pass::kBackward,
                    .startNs = 6000, .endNs = 6500});
    tracer.onExpertLoad({.step = 0, .layer = 0, .rank = 0, .tokensPerExpert = {5, 0, 3},
                         .droppedPerExpert = {}});
    tracer.onCounter({.name = "lr", .tsNs = 7000, .value = 0.5});
    tracer.onStep({.step = 0, .rank = 0, .startNs = 1000, .endNs = 8000, .loss = 2.5,
                   .auxLoss = 0.01, .tokens = 4, .tokensPerSecond = 4e9 / 7000.0});
    tracer.onConfigChange({.step = 1, .tsNs = 8500, .key = "optim.lr", .oldValue = "0.003",
                           .newValue = "0.001", .source = "gui"});
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 9000, .stepsDone = 1});
    ASSERT_TRUE((*writer)->close().isOk());
  }
  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto slices = (*reader)->slices({0, 100'000});
  ASSERT_TRUE(slices.isOk());
  ASSERT_EQ(slices->size(), 4u);
  std::map<std::string, storage::SliceRow> byName;
  for (const auto& s : *slices) byName[s.name] = s;
  EXPECT_EQ(byName["step"].depth, 0);
  EXPECT_EQ(byName["step"].durNs, 7000);
  EXPECT_EQ(byName["forward"].depth, 1);
  EXPECT_EQ(byName["experts.fwd"].depth, 2);
  EXPECT_EQ(byName["experts.fwd"].layer, 0);
  EXPECT_EQ(byName["experts.bwd"].durNs, 500);

  auto load = (*reader)->expertLoad(0, 0);
  ASSERT_TRUE(load.isOk());
  ASSERT_EQ(load->size(), 3u);
  EXPECT_EQ((*load)[0].tokens, 5);
  EXPECT_EQ((*load)[1].tokens, 0);
  EXPECT_EQ((*load)[2].tokens, 3);

  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, "completed");
  EXPECT_EQ(runs->front().endNs, 9000);
  auto steps = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_DOUBLE_EQ(steps->front().loss, 2.5);

  auto changes = (*reader)->configChanges();
  ASSERT_TRUE(changes.isOk());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ(changes->front().key, "optim.lr");
  EXPECT_EQ(changes->front().newValue, "0.001");
  EXPECT_EQ(changes->front().source, "gui");
  EXPECT_EQ(changes->front().step, 1);

  auto counters = (*reader)->counters({0, 100'000});
  ASSERT_TRUE(counters.isOk());
  ASSERT_EQ(counters->size(), 1u);
  EXPECT_EQ(counters->front().name, "lr");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::profiler
