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

TEST(HostTracer, MemoryEventsGoToOneDeviceMemoryTrackPerRank) {
  std::string path = tempTrace("memory");
  {
    auto writer = storage::TraceWriter::create(path, {.overwrite = true});
    ASSERT_TRUE(writer.isOk()) << writer.status().toString();
    HostTracer tracer(writer->get(), 1);
    tracer.onRunStart({.name = "m", .configToml = "", .backend = "cuda", .worldSize = 1,
                       .numLayers = 1, .numExperts = 2, .startNs = 1000});
    tracer.onMemory({.tsNs = 1000, .step = 0, .rank = 1, .isAllocation = true, .bytes = 4096,
                     .address = 0, .category = "weights", .categoryInUseBytes = 4096});
    tracer.onMemory({.tsNs = 1500, .step = 0, .rank = 1, .isAllocation = true, .bytes = 512,
                     .address = 0xffff800000000000ull, .category = "activations",
                     .categoryInUseBytes = 512});
    tracer.onMemory({.tsNs = 1700, .step = 0, .rank = 1, .isAllocation = false, .bytes = 512,
                     .address = 0xffff800000000000ull, .category = "activations",
                     .categoryInUseBytes = 0});
    tracer.onStep({.step = 0, .rank = 1, .startNs = 1000, .endNs = 2000});
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 2000, .stepsDone = 1});
    ASSERT_TRUE((*writer)->close().isOk());
  }
  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto tracks = (*reader)->tracks();
  ASSERT_TRUE(tracks.isOk());
  std::vector<storage::TrackRow> memoryTracks;
  for (const auto& t : *tracks) {
    if (t.kind == storage::kTrackKindMemory) memoryTracks.push_back(t);
  }
  ASSERT_EQ(memoryTracks.size(), 1u);  // one track, created at the first event
  EXPECT_EQ(memoryTracks[0].name, "device memory");
  EXPECT_EQ(memoryTracks[0].rank, 1);
  std::vector<storage::MemoryEventRow> rows;
  ASSERT_TRUE((*reader)->forEachMemoryEvent([&](const storage::MemoryEventRow& r) {
    rows.push_back(r);
    return true;
  }).isOk());
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) EXPECT_EQ(r.track, memoryTracks[0].id);
  EXPECT_EQ(rows[0].category, "weights");
  EXPECT_EQ(rows[0].inUseBytes, 4096);
  EXPECT_TRUE(rows[1].isAllocation);
  EXPECT_EQ(uint64_t(rows[1].address), 0xffff800000000000ull);  // the full 64-bit pattern
  EXPECT_FALSE(rows[2].isAllocation);
  EXPECT_EQ(rows[2].tsNs, 1700);
  EXPECT_EQ(rows[2].inUseBytes, 0);
  auto series = (*reader)->memorySeries({0, 10'000}, 100);
  ASSERT_TRUE(series.isOk());
  ASSERT_EQ(series->size(), 2u);
  EXPECT_EQ(series->at(0).category, "activations");
  EXPECT_EQ(series->at(0).points,
            (std::vector<storage::MemoryPoint>{{1500, 512}, {1700, 0}}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::profiler
