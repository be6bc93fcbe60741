// The flight recorder on synthetic data (no GPU): trigger evaluation on expert load, step time
// and peak memory; the window of steps each firing writes; and the row-holding writer, alone and
// driven step by step the way the capture's parser thread drives it, with the GpuTraceBuilder
// writing through it.
#include "gpu/flight_recorder.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "gpu/gpu_trace_builder.h"

namespace moewb::profiler::gpu {
namespace {

// A TraceWriter that remembers the steps of the GPU rows it gets, and counts the rest.
class RecordingWriter final : public storage::TraceWriter {
 public:
  std::multiset<int64_t> kernelSteps, apiSteps, memorySteps, sliceSteps;
  int64_t tracks = 0, stats = 0;
  std::map<std::string, std::string> meta;

  RunId addRun(const storage::RunRow&) override { return RunId(1); }
  void finishRun(RunId, const std::string&, const std::string&, int64_t) override {}
  TrackId addTrack(const storage::TrackRow&) override { return TrackId(++tracks); }
  void addSlice(const storage::SliceRow& s) override { sliceSteps.insert(s.step); }
  void addCounter(const storage::CounterRow&) override {}
  void addMemoryEvent(const storage::MemoryEventRow&) override {}
  void addExpertLoad(const storage::ExpertLoadRow&) override {}
  void addA2aTraffic(const storage::A2aTrafficRow&) override {}
  void addCollective(const storage::CollectiveRow&) override {}
  void addConfigChange(RunId, const storage::ConfigChangeRow&) override {}
  void addGpuKernel(const storage::SliceRow& s, const storage::GpuKernelRow&) override {
    kernelSteps.insert(s.step);
  }
  void addGpuMemcpy(const storage::SliceRow&, const storage::GpuMemcpyRow&) override {}
  void addGpuMemset(const storage::SliceRow&, const storage::GpuMemsetRow&) override {}
  void addGpuSync(const storage::SliceRow&, const storage::GpuSyncRow&) override {}
  void addCudaApi(const storage::SliceRow& s, const storage::CudaApiRow&) override {
    apiSteps.insert(s.step);
  }
  void addGpuMemory(const storage::GpuMemoryRow& m) override { memorySteps.insert(m.step); }
  void addSwapPlan(RunId, const storage::SwapPlanRow&) override {}
  void addSwapEvent(RunId, const storage::SwapEventRow&) override {}
  void addSwapStep(RunId, const storage::SwapStepRow&) override {}
  void addStat(const storage::StatRow&) override { ++stats; }
  void addStep(const storage::StepRow&) override {}
  void setMeta(const std::string& key, const std::string& value) override { meta[key] = value; }
  Status flush() override { return Status::ok(); }
  Status close() override { return Status::ok(); }
  const std::string& path() const override { return m_path; }

  std::set<int64_t> distinctKernelSteps() const { return {kernelSteps.begin(), kernelSteps.end()}; }

 private:
  std::string m_path = "recording";
};

engine::ExpertLoadEvent load(int64_t step, int32_t layer, std::vector<int64_t> tokens) {
  engine::ExpertLoadEvent e;
  e.step = step;
  e.layer = layer;
  e.tokensPerExpert = std::move(tokens);
  return e;
}

engine::StepEvent stepEvent(int64_t step, double ms, int64_t peakBytes = 0) {
  engine::StepEvent e;
  e.step = step;
  e.startNs = step * 1'000'000'000;
  e.endNs = e.startNs + int64_t(ms * 1e6);
  e.peakBytes = peakBytes;
  return e;
}

storage::SliceRow kernelSlice(int64_t step) {
  storage::SliceRow s;
  s.step = step;
  s.category = "kernel";
  return s;
}

TEST(FlightTriggers, ExpertLoadFiresOnTheWorstLayerAboveTheThreshold) {
  FlightTriggers triggers({.expertLoad = 3.0});
  triggers.addExpertLoad(load(0, 0, {10, 10, 10, 10}));  // 1.0
  triggers.addExpertLoad(load(0, 1, {25, 5, 5, 5}));     // 2.5
  EXPECT_FALSE(triggers.endStep(stepEvent(0, 5)).has_value());
  triggers.addExpertLoad(load(1, 0, {40, 0, 0, 0}));  // 4.0
  triggers.addExpertLoad(load(1, 1, {35, 5, 0, 0}));  // 3.5
  auto firing = triggers.endStep(stepEvent(1, 5));
  ASSERT_TRUE(firing.has_value());
  EXPECT_EQ(firing->step, 1);
  EXPECT_EQ(firing->reason, "step 1: expert max/mean load 4.00 > 3 in layer 0");
  // The per-step state resets; an all-zero layer (no tokens) never fires.
  triggers.addExpertLoad(load(2, 0, {0, 0, 0, 0}));
  EXPECT_FALSE(triggers.endStep(stepEvent(2, 5)).has_value());
}

TEST(FlightTriggers, StepTimeAndMemoryFireTogether) {
  FlightTriggers triggers({.stepMs = 20.0, .memoryGiB = 1.0});
  EXPECT_FALSE(triggers.endStep(stepEvent(0, 19.5, int64_t(1) << 29)).has_value());
  auto firing = triggers.endStep(stepEvent(1, 25.0, int64_t(3) << 29));
  ASSERT_TRUE(firing.has_value());
  EXPECT_EQ(firing->reason,
            "step 1: step time 25.000 ms > 20 ms; peak device memory 1.500 GiB > 1 GiB");
  // Without an expert-load threshold the load is ignored.
  triggers.addExpertLoad(load(2, 0, {100, 0}));
  EXPECT_FALSE(triggers.endStep(stepEvent(2, 1)).has_value());
}

TEST(FlightTriggers, CooldownSuppressesFiringsForKStepsAfterOne) {
  FlightTriggers triggers({.stepMs = 10.0, .cooldownSteps = 3});
  std::vector<int64_t> fired;
  for (int64_t step = 0; step < 10; ++step) {
    if (triggers.endStep(stepEvent(step, 50.0)).has_value()) fired.push_back(step);
  }
  EXPECT_EQ(fired, (std::vector<int64_t>{0, 4, 8}));  // steps 1-3, 5-7 and 9 cool down
  EXPECT_EQ(triggers.suppressed(), 7);
  FlightTriggers noCooldown({.stepMs = 10.0});
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_TRUE(noCooldown.endStep(stepEvent(step, 50.0)).has_value()) << step;
  }
  EXPECT_EQ(noCooldown.suppressed(), 0);
}

TEST(FlightWindow, AFiringWritesTheLastNStepsNotYetWritten) {
  FlightWindow window(4);
  EXPECT_EQ(window.onFiring(2), std::make_pair(int64_t(0), int64_t(2)));  // only 0..2 exist
  EXPECT_EQ(window.onFiring(10), std::make_pair(int64_t(7), int64_t(10)));
  EXPECT_EQ(window.onFiring(12), std::make_pair(int64_t(11), int64_t(12)));  // 9, 10 written
  EXPECT_EQ(window.onFiring(13), std::make_pair(int64_t(13), int64_t(13)));
  EXPECT_EQ(window.oldestKept(20), 17);
}

TEST(FlightRecorderWriter, HoldsGpuRowsByStepAndPassesTheRestThrough) {
  RecordingWriter sink;
  FlightRecorderWriter flight(&sink);
  for (int64_t step : {0, 1, 1, 2, -1}) flight.addGpuKernel(kernelSlice(step), {});
  storage::GpuMemoryRow memory;
  memory.step = 1;
  flight.addGpuMemory(memory);
  flight.addCudaApi(kernelSlice(2), {});
  EXPECT_TRUE(flight.addTrack({}).isValid());
  flight.addStat({"x", "info", 1, ""});
  flight.setMeta("k", "v");
  EXPECT_EQ(sink.tracks, 1);
  EXPECT_EQ(sink.stats, 1);
  EXPECT_EQ(sink.meta["k"], "v");
  EXPECT_TRUE(sink.kernelSteps.empty());
  EXPECT_EQ(flight.heldRows(), 6);
  EXPECT_EQ(flight.rowsDiscarded(), 1);  // the row outside any step

  EXPECT_EQ(flight.writeSteps(1, 1), 1);
  EXPECT_EQ(sink.kernelSteps, (std::multiset<int64_t>{1, 1}));
  EXPECT_EQ(sink.memorySteps, (std::multiset<int64_t>{1}));
  flight.dropBefore(3);
  EXPECT_EQ(flight.heldRows(), 0);
  EXPECT_EQ(flight.rowsWritten(), 3);
  EXPECT_EQ(flight.rowsDiscarded(), 4);
  EXPECT_TRUE(sink.apiSteps.empty());
}

// The capture's parser-thread loop on synthetic steps: every step has kernels, step 9 is slow,
// the recorder keeps 3 steps, so steps 7..9 are written and nothing else.
TEST(FlightRecorderWriter, DrivenLikeTheCaptureWritesOnlyTheStepsBeforeAFiring) {
  RecordingWriter sink;
  FlightRecorderWriter flight(&sink);
  FlightTriggers triggers({.stepMs = 50.0});
  FlightWindow window(3);
  std::vector<std::string> reasons;
  for (int64_t step = 0; step < 15; ++step) {
    for (int k = 0; k < 4; ++k) flight.addGpuKernel(kernelSlice(step), {});
    auto firing = triggers.endStep(stepEvent(step, step == 9 ? 80.0 : 10.0));
    if (firing) {
      reasons.push_back(firing->reason);
      const auto [first, last] = window.onFiring(firing->step);
      EXPECT_EQ(flight.writeSteps(first, last), 3);
    }
    flight.dropBefore(window.oldestKept(step));
    EXPECT_LE(flight.heldRows(), 3 * 4);
  }
  EXPECT_EQ(sink.distinctKernelSteps(), (std::set<int64_t>{7, 8, 9}));
  EXPECT_EQ(sink.kernelSteps.size(), 12u);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0], "step 9: step time 80.000 ms > 50 ms");
}

// The GpuTraceBuilder writing through the flight recorder: its rows carry their step, so the
// recorder can hold and write them per step.
TEST(FlightRecorderWriter, HoldsTheBuildersAttributedRows) {
  RecordingWriter sink;
  FlightRecorderWriter flight(&sink);
  GpuTraceBuilder builder(&flight, 0);
  for (int64_t step = 0; step < 3; ++step) {
    builder.addStep(step, step * 1000, step * 1000 + 900);
    KernelActivity k;
    k.startNs = step * 1000 + 100;
    k.endNs = k.startNs + 10;
    k.correlationId = uint32_t(step + 1);
    k.name = "void k<float>(int)";
    std::vector<Record> records;
    records.push_back(ApiCall{uint32_t(step + 1), step * 1000 + 50, step * 1000 + 60, 5, false, 211,
                              "cudaLaunchKernel", 0});
    records.push_back(k);
    builder.addRecords(std::move(records));
    builder.resolveThrough(step);
  }
  EXPECT_TRUE(sink.kernelSteps.empty());
  EXPECT_EQ(flight.writeSteps(1, 1), 1);
  EXPECT_EQ(sink.kernelSteps, (std::multiset<int64_t>{1}));
  EXPECT_EQ(sink.apiSteps, (std::multiset<int64_t>{1}));
  EXPECT_GT(sink.tracks, 0);  // tracks are not held
}

}  // namespace
}  // namespace moewb::profiler::gpu
