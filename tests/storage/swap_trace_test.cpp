// Swap rows in the trace store: writer -> reader round trip of every field of plans (with the
// free lag, ops and min_bytes; plans of files from before those columns read 1, "" and 0; the
// recompute ops and per-layer recompute times with their source, unknown in files from before
// them or when written without a source),
// copies and step rows; swapLayerSummary (stalls of both directions: reload stalls and offload
// waits) and swapEvents(window) on a golden tiny trace; files without swap tables (a committed
// fuzz-corpus trace from before swap, and one with only the early placeholder table) read as "no
// swap"; corrupt rows are repaired and counted, never fatal; the Chrome export's swap threads,
// late marks (late reloads and offloads compute waited for) and watermark counters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../source_dir.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using nlohmann::json;
using testing::execSql;
using testing::TempDir;

SwapPlanRow goldenPlan() {
  SwapPlanRow p;
  p.step = 0;
  p.rank = 0;
  p.mode = "auto";
  p.hbmTargetBytes = 12'000;
  p.pinnedBudgetBytes = 8'192;
  p.prefetchLayers = 2;
  p.freeLagLayers = 3;
  p.ops = "expert_fc1,moe_act";
  p.minBytes = 100;
  p.d2hGbps = 55.5;
  p.h2dGbps = 54.25;
  p.bidirGbps = 36.125;
  p.fixedBytes = 7'000;
  p.turnMs = 0.75;
  p.layerForwardMs = {1.5, 2.5};
  p.layerBackwardMs = {3.5, 4.5};
  p.layerOtherBytes = {100, 200};
  p.recomputeOps = "moe_act,expert_fc2";
  p.layerRecomputeMs = {0.25, 0.375};
  p.recomputeMsSource = "measured";
  p.tensors = {{0, "expert_fc1", 1000, true, "picked"},
               {1, "moe_act", 2000, true, "picked"},
               {1, "moe_norm", 10, false, "below swap.min_bytes"},
               {1, "expert_fc2", 1000, false, "listed in swap.recompute_ops", true}};
  p.predictedPeakBytes = 10'000;
  p.predictedPeakNoSwapBytes = 13'000;
  p.predictedExposedMs = 0.5;
  p.summary = "swap 2 of 3 tensors: peak 13.0 kB -> 10.0 kB, exposed 0.5 ms";
  return p;
}

SwapEventRow copy(int64_t step, int32_t rank, int32_t layer, const std::string& op,
                  int64_t bytes, bool toHost, int64_t startNs, int64_t endNs,
                  int64_t neededNs = 0, int64_t stallNs = 0) {
  return {0, step, rank, layer, op, bytes, toHost, startNs, endNs, neededNs, stallNs, true};
}

// The golden copies: rank 0 offloads layers 0 and 1 (compute waited 300 ns at 1200 for layer
// 0's to free its memory) and reloads them (layer 1 late by 500 ns); rank 1 offloads layer 0 in
// step 1.
std::vector<SwapEventRow> goldenCopies() {
  return {copy(0, 0, 0, "expert_fc1", 1000, true, 1000, 1500, 1200, 300),
          copy(0, 0, 1, "moe_act", 2000, true, 1500, 2500),
          copy(0, 0, 1, "moe_act", 2000, false, 3000, 4000, 3500, 500),
          copy(0, 0, 0, "expert_fc1", 1000, false, 4000, 4500, 5000, 0),
          copy(1, 1, 0, "expert_fc1", 4000, true, 6000, 7000)};
}

SwapStepRow goldenStep() {
  return {0, 0, 10'000, 13'000, 3'000, 8'192, 2, 2, 1, 3'000, 0.003, 0.0005, true};
}

// Writes the golden trace: a run, step slices and rows of ranks 0 and 1, the plan, the copies
// and rank 0's step-0 watermarks.
void writeGolden(const std::string& path) {
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  TraceWriter& w = **created;
  RunRow run;
  run.name = "swap";
  run.worldSize = 2;
  const RunId id = w.addRun(run);
  for (int32_t rank = 0; rank < 2; ++rank) {
    const TrackId thread = w.addTrack({TrackId(), "trainer thread", "thread", rank, 1});
    for (int64_t s = 0; s < 2; ++s) {
      w.addSlice(testing::makeSlice(thread, "step", s * 5000, 5000, s, -1, "step"));
      w.addStep({id, rank, s, s * 5000, s * 5000 + 5000, 1.0, 0.0, 8, 1.0, 0, 0.0, 0.0});
    }
  }
  w.addSwapPlan(id, goldenPlan());
  for (const SwapEventRow& row : goldenCopies()) w.addSwapEvent(id, row);
  w.addSwapStep(id, goldenStep());
  ASSERT_TRUE(w.close().isOk());
}

std::unique_ptr<TraceReader> openOrFail(const std::string& path) {
  auto reader = TraceReader::open(path);
  EXPECT_TRUE(reader.isOk()) << reader.status().toString();
  return reader.isOk() ? std::move(reader).value() : nullptr;
}

void expectSameCopy(const SwapEventRow& got, const SwapEventRow& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.layer, want.layer);
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(got.toHost, want.toHost);
  EXPECT_EQ(got.startNs, want.startNs);
  EXPECT_EQ(got.endNs, want.endNs);
  EXPECT_EQ(got.neededNs, want.neededNs);
  EXPECT_EQ(got.stallNs, want.stallNs);
  EXPECT_EQ(got.simulated, want.simulated);
}

const StatRow* findStat(const std::vector<StatRow>& stats, const std::string& name) {
  for (const StatRow& s : stats) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

class SwapTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("swap.sqlite");
    writeGolden(m_path);
  }
  TempDir m_dir;
  std::string m_path;
};

TEST_F(SwapTrace, EveryFieldRoundTrips) {
  auto reader = openOrFail(m_path);
  ASSERT_TRUE(reader);
  auto plans = reader->swapPlans();
  ASSERT_TRUE(plans.isOk()) << plans.status().toString();
  ASSERT_EQ(plans->size(), 1u);
  const SwapPlanRow& p = plans->front();
  const SwapPlanRow want = goldenPlan();
  EXPECT_GT(p.id, 0);
  EXPECT_EQ(p.step, want.step);
  EXPECT_EQ(p.rank, want.rank);
  EXPECT_EQ(p.mode, want.mode);
  EXPECT_EQ(p.hbmTargetBytes, want.hbmTargetBytes);
  EXPECT_EQ(p.pinnedBudgetBytes, want.pinnedBudgetBytes);
  EXPECT_EQ(p.prefetchLayers, want.prefetchLayers);
  EXPECT_EQ(p.freeLagLayers, 3);
  EXPECT_EQ(p.ops, "expert_fc1,moe_act");
  EXPECT_EQ(p.minBytes, 100);
  EXPECT_EQ(p.d2hGbps, want.d2hGbps);
  EXPECT_EQ(p.h2dGbps, want.h2dGbps);
  EXPECT_EQ(p.bidirGbps, want.bidirGbps);
  EXPECT_EQ(p.fixedBytes, want.fixedBytes);
  EXPECT_EQ(p.turnMs, want.turnMs);
  EXPECT_EQ(p.layerForwardMs, want.layerForwardMs);
  EXPECT_EQ(p.layerBackwardMs, want.layerBackwardMs);
  EXPECT_EQ(p.layerOtherBytes, want.layerOtherBytes);
  EXPECT_EQ(p.recomputeOps, "moe_act,expert_fc2");
  EXPECT_EQ(p.layerRecomputeMs, (std::vector<double>{0.25, 0.375}));
  EXPECT_EQ(p.recomputeMsSource, "measured");
  ASSERT_EQ(p.tensors.size(), want.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    EXPECT_EQ(p.tensors[i].layer, want.tensors[i].layer) << i;
    EXPECT_EQ(p.tensors[i].op, want.tensors[i].op) << i;
    EXPECT_EQ(p.tensors[i].bytes, want.tensors[i].bytes) << i;
    EXPECT_EQ(p.tensors[i].swapped, want.tensors[i].swapped) << i;
    EXPECT_EQ(p.tensors[i].recomputed, want.tensors[i].recomputed) << i;
    EXPECT_EQ(p.tensors[i].reason, want.tensors[i].reason) << i;
  }
  // As stored (docs/TRACE-FORMAT.md): the recompute columns and swapped = 2 for a recompute.
  EXPECT_EQ(testing::queryCsv(m_path, "SELECT recompute_ops, recompute_ms_source FROM swap_plan"),
            (std::vector<std::string>{"moe_act,expert_fc2,measured"}));
  EXPECT_EQ(testing::queryCsv(m_path, "SELECT layer, recompute_ms FROM swap_plan_layer"),
            (std::vector<std::string>{"0,0.25", "1,0.375"}));
  EXPECT_EQ(testing::queryCsv(m_path, "SELECT idx, swapped FROM swap_plan_tensor"),
            (std::vector<std::string>{"0,1", "1,1", "2,0", "3,2"}));
  EXPECT_EQ(p.predictedPeakBytes, want.predictedPeakBytes);
  EXPECT_EQ(p.predictedPeakNoSwapBytes, want.predictedPeakNoSwapBytes);
  EXPECT_EQ(p.predictedExposedMs, want.predictedExposedMs);
  EXPECT_EQ(p.summary, want.summary);

  auto steps = reader->swapSteps();
  ASSERT_TRUE(steps.isOk()) << steps.status().toString();
  ASSERT_EQ(steps->size(), 1u);
  const SwapStepRow& s = steps->front();
  const SwapStepRow ws = goldenStep();
  EXPECT_EQ(s.step, ws.step);
  EXPECT_EQ(s.rank, ws.rank);
  EXPECT_EQ(s.hbmPeakBytes, ws.hbmPeakBytes);
  EXPECT_EQ(s.hbmPeakNoSwapBytes, ws.hbmPeakNoSwapBytes);
  EXPECT_EQ(s.pinnedPeakBytes, ws.pinnedPeakBytes);
  EXPECT_EQ(s.pinnedCapacityBytes, ws.pinnedCapacityBytes);
  EXPECT_EQ(s.offloads, ws.offloads);
  EXPECT_EQ(s.reloads, ws.reloads);
  EXPECT_EQ(s.lateReloads, ws.lateReloads);
  EXPECT_EQ(s.swappedBytes, ws.swappedBytes);
  EXPECT_EQ(s.copyMs, ws.copyMs);
  EXPECT_EQ(s.exposedMs, ws.exposedMs);
  EXPECT_EQ(s.simulated, ws.simulated);

  auto copies = reader->swapEvents(TimeWindow::all());
  ASSERT_TRUE(copies.isOk()) << copies.status().toString();
  const std::vector<SwapEventRow> wantCopies = goldenCopies();
  ASSERT_EQ(copies->size(), wantCopies.size());
  for (size_t i = 0; i < copies->size(); ++i) {
    SCOPED_TRACE(i);
    expectSameCopy((*copies)[i], wantCopies[i]);  // already in start order
    if (i > 0) {
      EXPECT_GT((*copies)[i].id, (*copies)[i - 1].id);
    }
  }
  auto stats = reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ(findStat(*stats, "swap_times_reversed"), nullptr);
  EXPECT_EQ(findStat(*stats, "swap_values_negative"), nullptr);
}

TEST_F(SwapTrace, LayerSummaryGolden) {
  auto reader = openOrFail(m_path);
  ASSERT_TRUE(reader);
  auto all = reader->swapLayerSummary();
  ASSERT_TRUE(all.isOk()) << all.status().toString();
  ASSERT_EQ(all->size(), 3u);
  struct Want {
    int32_t rank, layer;
    int64_t offloaded, reloaded;
    int32_t offloads, reloads, late, waits;
    double copyMs, exposedMs, worstMs, waitMs;
  };
  // Exposed and worst stall take both directions (layer 0's offload wait, layer 1's reload
  // stall); late counts reloads only, waits offloads only.
  const Want want[] = {{0, 0, 1000, 1000, 1, 1, 0, 1, 0.001, 0.0003, 0.0003, 0.0003},
                       {0, 1, 2000, 2000, 1, 1, 1, 0, 0.002, 0.0005, 0.0005, 0.0},
                       {1, 0, 4000, 0, 1, 0, 0, 0, 0.001, 0.0, 0.0, 0.0}};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const SwapLayerSummary& g = (*all)[i];
    EXPECT_EQ(g.rank, want[i].rank);
    EXPECT_EQ(g.layer, want[i].layer);
    EXPECT_EQ(g.offloadedBytes, want[i].offloaded);
    EXPECT_EQ(g.reloadedBytes, want[i].reloaded);
    EXPECT_EQ(g.offloads, want[i].offloads);
    EXPECT_EQ(g.reloads, want[i].reloads);
    EXPECT_EQ(g.lateReloads, want[i].late);
    EXPECT_EQ(g.offloadWaits, want[i].waits);
    EXPECT_NEAR(g.copyMs, want[i].copyMs, 1e-12);
    EXPECT_NEAR(g.exposedMs, want[i].exposedMs, 1e-12);
    EXPECT_NEAR(g.worstStallMs, want[i].worstMs, 1e-12);
    EXPECT_NEAR(g.offloadWaitMs, want[i].waitMs, 1e-12);
  }
  // A longer offload wait than the reload stall of the same layer is its worst stall.
  execSql(m_path, "UPDATE swap_event SET stall_ns = 900 WHERE to_host = 1 AND layer = 1");
  auto reread = openOrFail(m_path);
  ASSERT_TRUE(reread);
  auto both = reread->swapLayerSummary(0, 0);
  ASSERT_TRUE(both.isOk()) << both.status().toString();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_NEAR((*both)[1].exposedMs, 0.0014, 1e-12);
  EXPECT_NEAR((*both)[1].worstStallMs, 0.0009, 1e-12);
  EXPECT_EQ((*both)[1].lateReloads, 1);
  EXPECT_EQ((*both)[1].offloadWaits, 1);
  auto stepOne = reader->swapLayerSummary(1, 1);
  ASSERT_TRUE(stepOne.isOk());
  ASSERT_EQ(stepOne->size(), 1u);
  EXPECT_EQ(stepOne->front().rank, 1);
  EXPECT_EQ(stepOne->front().offloadedBytes, 4000);
  auto none = reader->swapLayerSummary(5, 4);
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
}

TEST_F(SwapTrace, EventsOverlappingAWindow) {
  auto reader = openOrFail(m_path);
  ASSERT_TRUE(reader);
  auto starts = [&](TimeWindow window, std::optional<int32_t> rank = {}) {
    std::vector<int64_t> out;
    auto rows = reader->swapEvents(window, rank);
    EXPECT_TRUE(rows.isOk()) << rows.status().toString();
    if (rows.isOk()) {
      for (const SwapEventRow& r : *rows) out.push_back(r.startNs);
    }
    return out;
  };
  // The late reload (3000..4000) started before the window; the next one starts in it.
  EXPECT_EQ(starts({3600, 4200}), (std::vector<int64_t>{3000, 4000}));
  // A copy that ends where the window starts does not overlap it.
  EXPECT_EQ(starts({2500, 3000}), std::vector<int64_t>{});
  EXPECT_EQ(starts({0, 1001}), std::vector<int64_t>{1000});
  EXPECT_EQ(starts(TimeWindow::all(), 1), std::vector<int64_t>{6000});
  EXPECT_EQ(starts({0, 5000}, 1), std::vector<int64_t>{});
  EXPECT_EQ(starts({4000, 4000}), std::vector<int64_t>{});
}

// A plan of a file from before free_lag_layers, ops and min_bytes reads 1, "" and 0 (unknown),
// with every other field.
TEST(SwapTraceOlderFiles, PlanWithoutSettingsReadsDefaults) {
  TempDir dir;
  const std::string path = dir.path("old_plan.sqlite");
  writeGolden(path);
  execSql(path,
          "ALTER TABLE swap_plan DROP COLUMN free_lag_layers; "
          "ALTER TABLE swap_plan DROP COLUMN ops; ALTER TABLE swap_plan DROP COLUMN min_bytes;");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  auto plans = reader->swapPlans();
  ASSERT_TRUE(plans.isOk()) << plans.status().toString();
  ASSERT_EQ(plans->size(), 1u);
  const SwapPlanRow& p = plans->front();
  EXPECT_EQ(p.freeLagLayers, 1);
  EXPECT_EQ(p.ops, "");
  EXPECT_EQ(p.minBytes, 0);
  EXPECT_EQ(p.prefetchLayers, goldenPlan().prefetchLayers);
  EXPECT_EQ(p.summary, goldenPlan().summary);
  EXPECT_EQ(p.tensors.size(), goldenPlan().tensors.size());
}

// A plan of a file from before recompute_ops, recompute_ms_source and recompute_ms reads "" and
// no recompute times (unknown), with every other field; so does a plan written with times but
// no source (the writer stores times only with their source).
TEST(SwapTraceOlderFiles, PlanWithoutRecomputeReadsUnknown) {
  TempDir dir;
  const std::string path = dir.path("old_recompute.sqlite");
  writeGolden(path);
  execSql(path,
          "ALTER TABLE swap_plan DROP COLUMN recompute_ops; "
          "ALTER TABLE swap_plan DROP COLUMN recompute_ms_source; "
          "ALTER TABLE swap_plan_layer DROP COLUMN recompute_ms;");
  const std::string noSource = dir.path("no_source.sqlite");
  {
    auto created = TraceWriter::create(noSource);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    SwapPlanRow plan = goldenPlan();
    plan.recomputeMsSource = "";
    (*created)->addSwapPlan((*created)->addRun(RunRow{}), plan);
    ASSERT_TRUE((*created)->close().isOk());
  }
  EXPECT_EQ(testing::queryCsv(noSource, "SELECT recompute_ms FROM swap_plan_layer"),
            (std::vector<std::string>{"0", "0"}));
  for (const std::string& file : {path, noSource}) {
    SCOPED_TRACE(file);
    auto reader = openOrFail(file);
    ASSERT_TRUE(reader);
    auto plans = reader->swapPlans();
    ASSERT_TRUE(plans.isOk()) << plans.status().toString();
    ASSERT_EQ(plans->size(), 1u);
    const SwapPlanRow& p = plans->front();
    EXPECT_EQ(p.recomputeOps, file == path ? "" : goldenPlan().recomputeOps);
    EXPECT_TRUE(p.layerRecomputeMs.empty());
    EXPECT_EQ(p.recomputeMsSource, "");
    EXPECT_EQ(p.freeLagLayers, goldenPlan().freeLagLayers);
    EXPECT_EQ(p.layerBackwardMs, goldenPlan().layerBackwardMs);
    ASSERT_EQ(p.tensors.size(), goldenPlan().tensors.size());
    EXPECT_TRUE(p.tensors.back().recomputed);
  }
}

// A trace from before swap (committed fuzz seed; its swap_event is the early placeholder with
// other columns) and one with no swap tables at all: every swap query is empty, no error.
TEST(SwapTraceOlderFiles, ReadAsNoSwap) {
  TempDir dir;
  const std::string seed =
      test::sourceDir() + "/tests/fuzz/corpus/trace_reader/one_rank.sqlite";
  ASSERT_TRUE(std::filesystem::exists(seed)) << seed;
  const std::string copied = dir.path("seed.sqlite");
  std::filesystem::copy_file(seed, copied);
  const std::string dropped = dir.path("dropped.sqlite");
  writeGolden(dropped);
  execSql(dropped,
          "DROP TABLE swap_event; DROP TABLE swap_step; DROP TABLE swap_plan; "
          "DROP TABLE swap_plan_layer; DROP TABLE swap_plan_tensor;");
  const std::string placeholder = dir.path("placeholder.sqlite");
  writeGolden(placeholder);
  execSql(placeholder,
          "DROP TABLE swap_event; CREATE TABLE swap_event (id INTEGER PRIMARY KEY, tensor TEXT "
          "NOT NULL, bytes INTEGER NOT NULL, direction TEXT NOT NULL, start_ns INTEGER NOT NULL, "
          "end_ns INTEGER NOT NULL, stream INTEGER NOT NULL, late INTEGER NOT NULL); "
          "INSERT INTO swap_event(tensor, bytes, direction, start_ns, end_ns, stream, late) "
          "VALUES ('w', 10, 'to_host', 1, 2, 3, 0)");
  for (const std::string& path : {copied, dropped, placeholder}) {
    SCOPED_TRACE(path);
    auto reader = openOrFail(path);
    ASSERT_TRUE(reader);
    auto events = reader->swapEvents(TimeWindow::all());
    ASSERT_TRUE(events.isOk()) << events.status().toString();
    EXPECT_TRUE(events->empty());
    auto layers = reader->swapLayerSummary();
    ASSERT_TRUE(layers.isOk()) << layers.status().toString();
    EXPECT_TRUE(layers->empty());
    if (path != placeholder) {  // the placeholder file still has the plan and step tables
      auto plans = reader->swapPlans();
      ASSERT_TRUE(plans.isOk()) << plans.status().toString();
      EXPECT_TRUE(plans->empty());
      auto steps = reader->swapSteps();
      ASSERT_TRUE(steps.isOk()) << steps.status().toString();
      EXPECT_TRUE(steps->empty());
    }
  }
}

// Hostile or damaged rows: reversed and negative times, negative bytes, byte sums beyond int64,
// an unknown op, a plan whose layer rows have a gap: repaired and counted, never fatal.
TEST(SwapTraceCorrupt, BadValuesAreClampedAndCounted) {
  TempDir dir;
  const std::string path = dir.path("bad.sqlite");
  writeGolden(path);
  const std::string big = std::to_string(std::numeric_limits<int64_t>::max() - 10);
  execSql(path,
          "INSERT INTO swap_event(run, step, rank, layer, op, bytes, to_host, start_ns, end_ns, "
          "needed_ns, stall_ns, simulated) VALUES "
          "(1, 2, 0, 7, 'zzz', 64, 0, 9000, 8000, 9500, -3, 0),"
          "(1, 2, 0, 8, 'expert_fc1', -5, 1, -400, -100, 0, 0, 0),"
          "(1, 2, 0, 9, 'moe_act', " + big + ", 1, 9100, 9200, 0, 0, 0),"
          "(1, 2, 0, 9, 'moe_act', " + big + ", 1, 9300, 9400, 0, 0, 0);"
          "INSERT INTO swap_step VALUES (1, 2, 0, -1, 5, 5, 5, -2, 1, 0, 7, -1.5, 0.5, 0);"
          "INSERT INTO swap_plan_layer VALUES (1, 1000000000, 1.0, 1.0, 1, 0.5);");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  auto events = reader->swapEvents({8000, 10'000});
  ASSERT_TRUE(events.isOk()) << events.status().toString();
  ASSERT_EQ(events->size(), 3u);
  const SwapEventRow& reversed = events->front();
  EXPECT_EQ(reversed.op, "zzz");
  EXPECT_EQ(reversed.startNs, 9000);
  EXPECT_EQ(reversed.endNs, 9000);  // read as ending at its start
  EXPECT_EQ(reversed.stallNs, 0);
  auto early = reader->swapEvents({-1000, 0});
  ASSERT_TRUE(early.isOk());
  ASSERT_EQ(early->size(), 1u);
  EXPECT_EQ(early->front().bytes, 0);
  EXPECT_EQ(early->front().startNs, -400);  // negative times are data

  auto layers = reader->swapLayerSummary(2, 2);
  ASSERT_TRUE(layers.isOk()) << layers.status().toString();
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_EQ((*layers)[0].layer, 7);
  EXPECT_EQ((*layers)[0].lateReloads, 0);  // a negative stall is no stall
  EXPECT_EQ((*layers)[0].copyMs, 0.0);     // a reversed copy takes no time
  EXPECT_EQ((*layers)[1].offloadedBytes, 0);
  EXPECT_EQ((*layers)[2].offloadedBytes, std::numeric_limits<int64_t>::max());

  auto steps = reader->swapSteps();
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ(steps->back().hbmPeakBytes, 0);
  EXPECT_EQ(steps->back().offloads, 0);
  EXPECT_EQ(steps->back().copyMs, 0.0);
  auto plans = reader->swapPlans();
  ASSERT_TRUE(plans.isOk());
  ASSERT_EQ(plans->size(), 1u);
  EXPECT_EQ(plans->front().layerForwardMs.size(), 3u);  // appended, not indexed by 10^9

  auto stats = reader->stats();
  ASSERT_TRUE(stats.isOk());
  for (const char* name : {"swap_times_reversed", "swap_values_negative", "values_clamped",
                           "swap_plan_layer_gaps"}) {
    const StatRow* row = findStat(*stats, name);
    ASSERT_NE(row, nullptr) << name;
    EXPECT_GE(row->value, 1) << name;
    EXPECT_EQ(row->severity, "error") << name;
  }
}

json exportJson(const std::string& trace, const std::string& out) {
  auto reader = TraceReader::open(trace);
  EXPECT_TRUE(reader.isOk());
  if (!reader.isOk()) return json();
  const Status written = exportChromeTrace(**reader, out);
  EXPECT_TRUE(written.isOk()) << written.toString();
  std::ifstream in(out);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST_F(SwapTrace, ChromeExportHasSwapThreadsLateMarksAndWatermarks) {
  const json doc = exportJson(m_path, m_dir.path("swap.json"));
  ASSERT_TRUE(doc.is_object());
  const json& events = doc["traceEvents"];
  std::map<std::pair<int64_t, int64_t>, std::string> threadNames;  // (pid, tid) -> name
  for (const json& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      threadNames[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}] =
          e["args"]["name"].get<std::string>();
    }
  }
  int copies = 0, lateMarks = 0, counters = 0;
  // Late: the reload its consumer waited for and the offload compute waited for.
  const std::map<std::string, std::string> lateCopies = {
      {"layer 1 moe_act H2D", "late: layer 1 moe_act H2D (stall 0.001 ms)"},
      {"layer 0 expert_fc1 D2H", "late: layer 0 expert_fc1 D2H (compute waited 0.000 ms)"}};
  std::set<std::string> lateSeen;
  for (const json& e : events) {
    if (e.value("cat", "") != "swap") continue;
    const auto where = std::pair(e["pid"].get<int64_t>(), e.value("tid", int64_t(-1)));
    if (e["ph"] == "X") {
      ++copies;
      const bool toHost = e["name"].get<std::string>().ends_with("D2H");
      EXPECT_EQ(threadNames[where], toHost ? "swap D2H" : "swap H2D") << e.dump();
      EXPECT_TRUE(e["args"].contains("bytes"));
      EXPECT_TRUE(e["args"].contains("op"));
      EXPECT_TRUE(e["args"].contains("layer"));
      EXPECT_TRUE(e["args"].contains("stall_ms"));
      if (e["name"] == "layer 1 moe_act H2D") {
        EXPECT_EQ(e["args"]["late"], true);
        EXPECT_EQ(e["cname"], "terrible");
        EXPECT_DOUBLE_EQ(e["args"]["stall_ms"].get<double>(), 0.0005);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.0);  // 1000 ns
      } else if (e["name"] == "layer 0 expert_fc1 D2H" && e["pid"] == 0) {
        EXPECT_EQ(e["args"]["late"], true);
        EXPECT_EQ(e["cname"], "terrible");
        EXPECT_DOUBLE_EQ(e["args"]["stall_ms"].get<double>(), 0.0003);
      } else {
        EXPECT_EQ(e["args"]["late"], false) << e.dump();
        EXPECT_FALSE(e.contains("cname")) << e.dump();
      }
    } else if (e["ph"] == "i") {
      ++lateMarks;
      const std::string name = e["name"].get<std::string>();
      const bool reload = name.find("H2D") != std::string::npos;
      EXPECT_EQ(name, lateCopies.at(reload ? "layer 1 moe_act H2D" : "layer 0 expert_fc1 D2H"));
      lateSeen.insert(name);
      // needed_ns 3500 (reload) or 1200 (offload) from origin 0
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), reload ? 3.5 : 1.2);
      EXPECT_EQ(threadNames[where], reload ? "swap H2D" : "swap D2H");
    } else if (e["ph"] == "C") {
      ++counters;
      EXPECT_EQ(e["pid"], 0);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);  // at the start of step 0
      const int64_t bytes = e["args"]["bytes"].get<int64_t>();
      const std::map<std::string, int64_t> want = {{"swap.hbm_peak_bytes", 10'000},
                                                   {"swap.hbm_peak_no_swap_bytes", 13'000},
                                                   {"swap.pinned_peak_bytes", 3'000}};
      const auto it = want.find(e["name"].get<std::string>());
      ASSERT_NE(it, want.end()) << e.dump();
      EXPECT_EQ(bytes, it->second);
    }
  }
  EXPECT_EQ(copies, 5);
  EXPECT_EQ(lateMarks, 2);
  EXPECT_EQ(lateSeen.size(), 2u);
  EXPECT_EQ(counters, 3);
  // Both ranks have both swap threads named.
  for (int64_t pid : {0, 1}) {
    int named = 0;
    for (const auto& [key, name] : threadNames) {
      if (key.first == pid && name.starts_with("swap ")) ++named;
    }
    EXPECT_EQ(named, 2) << pid;
  }
}

}  // namespace
}  // namespace moewb::storage
