// HostTracer maps engine events to the right rows: slice names and depths, step rows, one
// expert_load row per expert, counters, and the run's final status; its helper thread queues a
// step's rows before the step row, in event order, and nothing is lost at the end.
#include "moewb/profiler/host_tracer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "host_trace_batch.h"
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

namespace moewb::profiler {
namespace {

using engine::Pass;
using engine::Phase;

// A TraceWriter that logs the calls the tracer makes, in order ("slice experts.fwd 0",
// "memory 1500", "step 0", ...). Thread-safe: the tracer's helper thread calls it.
class CallLog final : public storage::TraceWriter {
 public:
  RunId addRun(const storage::RunRow&) override { return RunId(1); }
  void finishRun(RunId, const std::string& status, const std::string&, int64_t) override {
    log("finish " + status);
  }
  TrackId addTrack(const storage::TrackRow& track) override {
    log("track " + track.kind);
    return TrackId(++m_tracks);
  }
  void addSlice(const storage::SliceRow& s) override {
    log("slice " + s.name + " " + std::to_string(s.step));
  }
  void addCounter(const storage::CounterRow& c) override {
    log("counter " + c.name + " " + std::to_string(int64_t(c.value)));
  }
  void addMemoryEvent(const storage::MemoryEventRow& m) override {
    log("memory " + std::to_string(m.tsNs) + " " + m.category + " " + std::to_string(m.step));
  }
  void addExpertLoad(const storage::ExpertLoadRow& l) override {
    log("load " + std::to_string(l.step) + " " + std::to_string(l.layer) + " " +
        std::to_string(l.expert) + " " + std::to_string(l.tokens));
  }
  void addA2aTraffic(const storage::A2aTrafficRow&) override {}
  void addCollective(const storage::CollectiveRow&) override {}
  void addConfigChange(RunId, const storage::ConfigChangeRow&) override {}
  void addGpuKernel(const storage::SliceRow&, const storage::GpuKernelRow&) override {}
  void addGpuMemcpy(const storage::SliceRow&, const storage::GpuMemcpyRow&) override {}
  void addGpuMemset(const storage::SliceRow&, const storage::GpuMemsetRow&) override {}
  void addGpuSync(const storage::SliceRow&, const storage::GpuSyncRow&) override {}
  void addCudaApi(const storage::SliceRow&, const storage::CudaApiRow&) override {}
  void addGpuMemory(const storage::GpuMemoryRow&) override {}
  void addSwapPlan(RunId run, const storage::SwapPlanRow& p) override {
    log("swap_plan " + std::to_string(run.value) + " " + std::to_string(p.step) + " " + p.mode +
        " " + std::to_string(p.tensors.size()));
  }
  void addSwapEvent(RunId, const storage::SwapEventRow& e) override {
    log("swap " + std::to_string(e.step) + " " + std::to_string(e.layer) + " " + e.op +
        (e.toHost ? " d2h" : " h2d"));
  }
  void addSwapStep(RunId, const storage::SwapStepRow& s) override {
    log("swap_step " + std::to_string(s.step) + " " + std::to_string(s.offloads));
  }
  void addStat(const storage::StatRow&) override {}
  void addStep(const storage::StepRow& step) override {
    {
      std::unique_lock lock(m_mutex);
      m_released.wait(lock, [&] { return !m_holdSteps; });
    }
    log("step " + std::to_string(step.step));
  }
  void addBackPressureWait(int64_t ns) override {
    std::lock_guard lock(m_mutex);
    ++m_waits;
    m_waitNs += ns;
  }
  void setMeta(const std::string&, const std::string&) override {}
  Status flush() override { return Status::ok(); }
  Status close() override { return Status::ok(); }
  const std::string& path() const override { return m_path; }

  std::vector<std::string> calls() {
    std::lock_guard lock(m_mutex);
    return m_calls;
  }
  // true: addStep blocks (a writer that cannot keep up) until called with false.
  void holdSteps(bool hold) {
    {
      std::lock_guard lock(m_mutex);
      m_holdSteps = hold;
    }
    m_released.notify_all();
  }
  int64_t waits() {
    std::lock_guard lock(m_mutex);
    return m_waits;
  }
  int64_t waitNs() {
    std::lock_guard lock(m_mutex);
    return m_waitNs;
  }

 private:
  void log(std::string call) {
    std::lock_guard lock(m_mutex);
    m_calls.push_back(std::move(call));
  }
  std::mutex m_mutex;
  std::condition_variable m_released;
  bool m_holdSteps = false;
  int64_t m_waits = 0;
  int64_t m_waitNs = 0;
  std::vector<std::string> m_calls;
  int64_t m_tracks = 0;
  std::string m_path = "call-log";
};

// Index of `call` in `calls`, or -1.
int64_t indexOf(const std::vector<std::string>& calls, const std::string& call) {
  auto it = std::find(calls.begin(), calls.end(), call);
  return it == calls.end() ? -1 : int64_t(it - calls.begin());
}

void traceStep(HostTracer& tracer, int64_t step, const std::string& counterName) {
  tracer.onPhase({.step = step, .layer = 0, .phase = Phase::kExperts, .pass = Pass::kForward,
                  .startNs = 10, .endNs = 20});
  for (int i = 0; i < 3; ++i) {
    tracer.onMemory({.tsNs = step * 100 + i, .step = step, .rank = 0, .isAllocation = i != 1,
                     .bytes = 512, .address = 4096,
                     .category = i == 2 ? "workspace" : "activations", .categoryInUseBytes = 512});
  }
  tracer.onExpertLoad({.step = step, .layer = 1, .rank = 0, .tokensPerExpert = {7, int64_t(step)},
                       .droppedPerExpert = {}});
  tracer.onCounter({.name = counterName, .tsNs = 30, .value = double(step)});
  tracer.onStep({.step = step, .rank = 0, .startNs = 0, .endNs = 40});
}

TEST(HostTracer, QueuesEveryRowOfAStepBeforeItsStepRowInEventOrder) {
  CallLog writer;
  {
    HostTracer tracer(&writer);
    tracer.onRunStart({.name = "t", .backend = "cuda", .worldSize = 1, .startNs = 0});
    // A counter name longer than the small-string buffer, then a short one: the batch reuses
    // the kept counter's storage and must not leak the old name.
    traceStep(tracer, 0, "memory.activations_bytes_of_the_step");
    traceStep(tracer, 1, "lr");
    traceStep(tracer, 2, "grad_norm");
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 50, .stepsDone = 3});
    const std::vector<std::string> calls = writer.calls();
    EXPECT_EQ(calls.back(), "finish completed") << "the run is finished after every row";
    int64_t previousStep = -1;
    for (int64_t step = 0; step < 3; ++step) {
      const int64_t stepRow = indexOf(calls, "step " + std::to_string(step));
      ASSERT_GE(stepRow, 0) << step;
      const std::string s = std::to_string(step);
      for (const std::string& row :
           {"slice experts.fwd " + s, "memory " + std::to_string(step * 100) + " activations " + s,
            "memory " + std::to_string(step * 100 + 1) + " activations " + s,
            "memory " + std::to_string(step * 100 + 2) + " workspace " + s,
            "load " + s + " 1 0 7", "load " + s + " 1 1 " + s, "slice step " + s}) {
        const int64_t at = indexOf(calls, row);
        EXPECT_GT(at, previousStep) << row;
        EXPECT_LT(at, stepRow) << row;
      }
      EXPECT_LT(indexOf(calls, "memory " + std::to_string(step * 100) + " activations " + s),
                indexOf(calls, "memory " + std::to_string(step * 100 + 1) + " activations " + s))
          << "memory rows keep the order of their events";
      EXPECT_LT(indexOf(calls, "memory " + std::to_string(step * 100 + 1) + " activations " + s),
                indexOf(calls, "memory " + std::to_string(step * 100 + 2) + " workspace " + s));
      previousStep = stepRow;
    }
    EXPECT_GE(indexOf(calls, "counter memory.activations_bytes_of_the_step 0"), 0);
    EXPECT_LT(indexOf(calls, "counter lr 1"), indexOf(calls, "step 1"));
    EXPECT_LT(indexOf(calls, "counter grad_norm 2"), indexOf(calls, "step 2"));
    EXPECT_EQ(std::count(calls.begin(), calls.end(), "track memory"), 1);
  }
}

// Issue 19, item 7: the tracer's queue to its helper thread is bounded, so an engine faster than
// the writer waits (and the wait is reported to the writer's stats) instead of running ahead of
// the trace without limit.
TEST(HostTracer, ASlowWriterHoldsTheEngineWithinAFewSteps) {
  CallLog writer;
  writer.holdSteps(true);
  HostTracer tracer(&writer);
  tracer.onRunStart({.name = "t", .backend = "cpu", .worldSize = 1, .startNs = 0});
  std::atomic<int> traced{0};
  std::thread engine([&] {
    for (int64_t step = 0; step < 6; ++step) {
      traceStep(tracer, step, "lr");
      traced.fetch_add(1);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Step 0 is with the (blocked) helper, the next kMaxPendingBatches wait for it, and the
  // engine's next onStep waits for room.
  EXPECT_EQ(traced.load(), 1 + int(detail::RowPump::kMaxPendingBatches));
  writer.holdSteps(false);
  engine.join();
  EXPECT_EQ(traced.load(), 6);
  EXPECT_GE(writer.waits(), 1);
  EXPECT_GE(writer.waitNs(), 100'000'000);
  tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 50, .stepsDone = 6});
  const std::vector<std::string> calls = writer.calls();
  for (int64_t step = 0; step < 6; ++step) {
    EXPECT_GE(indexOf(calls, "step " + std::to_string(step)), 0) << step;
  }
}

TEST(HostTracer, DestructorQueuesTheEventsOfAnUnfinishedStep) {
  CallLog writer;
  {
    HostTracer tracer(&writer);
    tracer.onRunStart({.name = "t", .backend = "cuda", .worldSize = 1, .startNs = 0});
    tracer.onPhase({.step = 4, .layer = -1, .phase = Phase::kForward, .pass = Pass::kForward,
                    .startNs = 1, .endNs = 2});
    tracer.onMemory({.tsNs = 3, .step = 4, .category = "weights"});
  }
  const std::vector<std::string> calls = writer.calls();
  EXPECT_GE(indexOf(calls, "slice forward 4"), 0);
  EXPECT_GE(indexOf(calls, "memory 3 weights 4"), 0);
  EXPECT_EQ(indexOf(calls, "step 4"), -1) << "no step row for a step that never ended";
}

TEST(HostTracer, WithoutMemoryEventsWritesNoMemoryRowsOrTrack) {
  CallLog writer;
  {
    HostTracer tracer(&writer);
    tracer.setMemoryEvents(false);
    tracer.onRunStart({.name = "t", .backend = "cuda", .worldSize = 1, .startNs = 0});
    traceStep(tracer, 0, "lr");
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 50, .stepsDone = 1});
  }
  const std::vector<std::string> calls = writer.calls();
  EXPECT_EQ(indexOf(calls, "track memory"), -1);
  for (const std::string& call : calls) EXPECT_NE(call.rfind("memory ", 0), 0u) << call;
  EXPECT_GE(indexOf(calls, "slice experts.fwd 0"), 0);
  EXPECT_GE(indexOf(calls, "step 0"), 0);
}

}  // namespace
}  // namespace moewb::profiler

namespace moewb::profiler {
namespace {

engine::SwapPlanEvent swapPlanEvent() {
  engine::SwapPlanEvent plan;
  plan.step = 1;
  plan.rank = 0;
  plan.mode = "auto";
  plan.hbmTargetBytes = 4096;
  plan.pinnedBudgetBytes = 2048;
  plan.prefetchLayers = 1;
  plan.freeLagLayers = 2;
  plan.ops = "expert_fc1,moe_act";
  plan.minBytes = 512;
  plan.d2hGbps = 55;
  plan.h2dGbps = 54;
  plan.bidirGbps = 36;
  plan.fixedBytes = 100;
  plan.turnMs = 0.25;
  plan.layerForwardMs = {1.0, 2.0};
  plan.layerBackwardMs = {3.0, 4.0};
  plan.layerOtherBytes = {5, 6};
  plan.tensorLayer = {0, 1};
  plan.tensorOp = {"expert_fc1", "a_long_op_name_beyond_the_small_string_buffer"};
  plan.tensorBytes = {700, 800};
  plan.tensorSwapped = {true, false};
  plan.tensorReason = {"picked", "op not in swap.ops"};
  plan.predictedPeakBytes = 3000;
  plan.predictedPeakNoSwapBytes = 3700;
  plan.predictedExposedMs = 0.125;
  plan.summary = "swap 1 of 2";
  return plan;
}

// Swap plans, copies and step rows are queued with their step, before its step row, and land
// in the swap tables with every field (the op string of a reused batch slot included).
TEST(HostTracerSwap, WritesSwapRowsWithTheirStep) {
  std::string path = tempTrace("swap");
  {
    auto writer = storage::TraceWriter::create(path, {.overwrite = true});
    ASSERT_TRUE(writer.isOk()) << writer.status().toString();
    HostTracer tracer(writer->get());
    tracer.onRunStart({.name = "t", .backend = "cpu", .worldSize = 1, .startNs = 0});
    for (int64_t step = 0; step < 3; ++step) {
      if (step == 1) tracer.onSwapPlan(swapPlanEvent());
      if (step >= 1) {
        const std::string op =
            step == 1 ? "a_long_op_name_beyond_the_small_string_buffer" : "expert_fc1";
        tracer.onSwap({.step = step, .rank = 0, .layer = 0, .op = op, .bytes = 700,
                       .toHost = true, .startNs = step * 100 + 10, .endNs = step * 100 + 20,
                       .simulated = true});
        tracer.onSwap({.step = step, .rank = 0, .layer = 0, .op = "expert_fc1", .bytes = 700,
                       .toHost = false, .startNs = step * 100 + 50, .endNs = step * 100 + 70,
                       .neededNs = step * 100 + 60, .stallNs = 10, .simulated = true});
        tracer.onSwapStep({.step = step, .rank = 0, .hbmPeakBytes = 3000,
                           .hbmPeakNoSwapBytes = 3700, .pinnedPeakBytes = 700,
                           .pinnedCapacityBytes = 2048, .offloads = 1, .reloads = 1,
                           .lateReloads = 1, .swappedBytes = 700, .copyMs = 3e-5,
                           .exposedMs = 1e-5, .simulated = true});
      }
      tracer.onStep({.step = step, .rank = 0, .startNs = step * 100, .endNs = step * 100 + 90});
    }
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 400, .stepsDone = 3});
    ASSERT_TRUE((*writer)->close().isOk());
  }
  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto plans = (*reader)->swapPlans();
  ASSERT_TRUE(plans.isOk());
  ASSERT_EQ(plans->size(), 1u);
  const storage::SwapPlanRow& p = plans->front();
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.mode, "auto");
  EXPECT_EQ(p.hbmTargetBytes, 4096);
  EXPECT_EQ(p.pinnedBudgetBytes, 2048);
  EXPECT_EQ(p.freeLagLayers, 2);
  EXPECT_EQ(p.ops, "expert_fc1,moe_act");
  EXPECT_EQ(p.minBytes, 512);
  EXPECT_EQ(p.d2hGbps, 55);
  EXPECT_EQ(p.turnMs, 0.25);
  EXPECT_EQ(p.layerBackwardMs, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(p.layerOtherBytes, (std::vector<int64_t>{5, 6}));
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors[1].op, "a_long_op_name_beyond_the_small_string_buffer");
  EXPECT_EQ(p.tensors[1].reason, "op not in swap.ops");
  EXPECT_FALSE(p.tensors[1].swapped);
  EXPECT_EQ(p.tensors[0].bytes, 700);
  EXPECT_EQ(p.predictedPeakNoSwapBytes, 3700);
  EXPECT_EQ(p.predictedExposedMs, 0.125);
  EXPECT_EQ(p.summary, "swap 1 of 2");
  auto copies = (*reader)->swapEvents(storage::TimeWindow::all());
  ASSERT_TRUE(copies.isOk());
  ASSERT_EQ(copies->size(), 4u);
  EXPECT_EQ((*copies)[0].op, "a_long_op_name_beyond_the_small_string_buffer");
  EXPECT_EQ((*copies)[2].op, "expert_fc1");  // the reused slot holds the new, shorter name
  EXPECT_FALSE((*copies)[3].toHost);
  EXPECT_EQ((*copies)[3].neededNs, 260);
  EXPECT_EQ((*copies)[3].stallNs, 10);
  EXPECT_TRUE((*copies)[3].simulated);
  auto steps = (*reader)->swapSteps();
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ(steps->back().step, 2);
  EXPECT_EQ(steps->back().lateReloads, 1);
  EXPECT_EQ(steps->back().exposedMs, 1e-5);
  std::filesystem::remove(path);
}

TEST(HostTracerSwap, SwapRowsPrecedeTheirStepRow) {
  CallLog writer;
  {
    HostTracer tracer(&writer);
    tracer.onRunStart({.name = "t", .backend = "cpu", .worldSize = 1, .startNs = 0});
    tracer.onSwapPlan(swapPlanEvent());
    tracer.onSwap({.step = 0, .rank = 0, .layer = 1, .op = "moe_act", .bytes = 8});
    tracer.onSwapStep({.step = 0, .rank = 0, .offloads = 1});
    tracer.onStep({.step = 0, .rank = 0, .startNs = 0, .endNs = 40});
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = 50, .stepsDone = 1});
  }
  const std::vector<std::string> calls = writer.calls();
  const int64_t plan = indexOf(calls, "swap_plan 1 1 auto 2");
  const int64_t copy = indexOf(calls, "swap 0 1 moe_act d2h");
  const int64_t swapStep = indexOf(calls, "swap_step 0 1");
  const int64_t step = indexOf(calls, "step 0");
  ASSERT_GE(plan, 0);
  EXPECT_LT(plan, copy);
  EXPECT_LT(copy, swapStep);
  EXPECT_LT(swapStep, step);
}

}  // namespace
}  // namespace moewb::profiler
