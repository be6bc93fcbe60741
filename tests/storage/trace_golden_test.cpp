// Golden query tests in Perfetto's diff-test style: a tiny trace written through TraceWriter, a
// reader call or an SQL query, and the expected rows spelled out by hand. Also pins the schema
// (tables, indexes, views) and checks that window queries use their indexes.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "sqlite_trace_reader.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::queryCsv;
using testing::TempDir;
using Rows = std::vector<std::string>;

// Track 1 ("main", rank 0):  long [10, 1010) step, a [0,100) b [100,150) c [110,120)
//                            d [200,210) e [300,305); track 2 ("side", rank 1): a [130, 170).
// Track 3 (counter, rank 0): memory samples at 0, 150, 300.
class TraceGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("golden.moewb");
    auto created = TraceWriter::create(m_path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    m_main = writer->addTrack({TrackId(), "main", "thread", 0, 1});
    m_side = writer->addTrack({TrackId(), "side", "thread", 1, 2});
    m_memory = writer->addTrack({TrackId(), "memory", "counter", 0, 0});
    writer->addSlice(makeSlice(m_main, "a", 0, 100, 0, -1));
    writer->addSlice(makeSlice(m_main, "long", 10, 1000, 0, -1, "step"));
    writer->addSlice(makeSlice(m_main, "b", 100, 50, 0, 0));
    writer->addSlice(makeSlice(m_main, "c", 110, 10, 0, 1));
    writer->addSlice(makeSlice(m_side, "a", 130, 40, 0, 0));
    writer->addSlice(makeSlice(m_main, "d", 200, 10, 0, 1, "kernel"));
    writer->addSlice(makeSlice(m_main, "e", 300, 5, 0, 1));
    for (int64_t ts : {0, 150, 300}) writer->addCounter({m_memory, "mem", ts, double(ts) * 2});
    addExpertLoads(*writer);
    ASSERT_TRUE(writer->close().isOk());
    auto reader = TraceReader::open(m_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  // Layer 0, 4 experts, 2 ranks. Step 0: rank0 [10,0,5,5] + rank1 [10,10,0,0] = [20,10,5,5]:
  // max/mean = 20/10 = 2. Step 1: [10,10,10,10] -> 1. Mean 1.5, last 1, totals [30,20,15,15]:
  // hottest expert 0 with 30/80 = 0.375.
  // Layer 1, 4 experts, 1 rank. Step 0: [0,8,0,0] -> 8/2 = 4. Step 1: [2,2,2,2] -> 1. Step 2:
  // all zero -> left out. Mean 2.5, last 1, totals [2,10,2,2]: expert 1 with 10/16 = 0.625.
  static void addExpertLoads(TraceWriter& writer) {
    const int64_t layer0[2][2][4] = {{{10, 0, 5, 5}, {10, 10, 0, 0}}, {{5, 5, 5, 5}, {5, 5, 5, 5}}};
    for (int64_t step = 0; step < 2; ++step) {
      for (int32_t rank = 0; rank < 2; ++rank) {
        for (int32_t e = 0; e < 4; ++e) {
          writer.addExpertLoad({step, 0, e, rank, layer0[step][rank][e], 0, 0.0});
        }
      }
    }
    const int64_t layer1[3][4] = {{0, 8, 0, 0}, {2, 2, 2, 2}, {0, 0, 0, 0}};
    for (int64_t step = 0; step < 3; ++step) {
      for (int32_t e = 0; e < 4; ++e)
        writer.addExpertLoad({step, 1, e, 0, layer1[step][e], 1, 0.5});
    }
  }

  std::vector<std::string> sliceNames(TimeWindow window, std::optional<TrackId> track = {}) {
    auto slices = m_reader->slices(window, track);
    EXPECT_TRUE(slices.isOk()) << slices.status().toString();
    std::vector<std::string> names;
    if (!slices.isOk()) return names;
    for (const SliceRow& s : *slices) names.push_back(s.name + "@" + std::to_string(s.track.value));
    return names;
  }

  TempDir m_dir;
  std::string m_path;
  TrackId m_main, m_side, m_memory;
  std::unique_ptr<TraceReader> m_reader;
};

TEST_F(TraceGolden, SlicesInWindowUseOverlapSemantics) {
  // [120, 300): b overlaps, c ends exactly at 120 (out), e starts at 300 (out), long started
  // 110 ns before the window.
  EXPECT_EQ(sliceNames({120, 300}), (Rows{"long@1", "b@1", "a@2", "d@1"}));
  EXPECT_EQ(sliceNames({120, 300}, m_main), (Rows{"long@1", "b@1", "d@1"}));
  EXPECT_EQ(sliceNames({120, 300}, m_side), (Rows{"a@2"}));
  EXPECT_EQ(sliceNames({500, 600}), (Rows{"long@1"}));
  EXPECT_EQ(sliceNames({1010, 2000}), Rows{});
  EXPECT_EQ(sliceNames({-50, 1}), (Rows{"a@1"}));
  EXPECT_EQ(sliceNames({300, 300}), Rows{});
  EXPECT_EQ(sliceNames(TimeWindow::all()).size(), 7u);
}

TEST_F(TraceGolden, SlicesInWindowStillFindLongSlicesWithoutTheMetaHint) {
  // Files from other tools may lack max_slice_dur_ns; the reader then scans for it.
  m_reader.reset();
  testing::execSql(m_path, "DELETE FROM meta WHERE key = 'max_slice_dur_ns'");
  auto reader = TraceReader::open(m_path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  m_reader = std::move(reader).value();
  EXPECT_EQ(sliceNames({500, 600}), (Rows{"long@1"}));
}

TEST_F(TraceGolden, WindowQueriesUseTheirIndexes) {
  auto plan = [&](const std::string& sql) {
    std::string all;
    for (const std::string& row : queryCsv(m_path, "EXPLAIN QUERY PLAN " + sql)) all += row + "\n";
    return all;
  };
  const std::string slicePlan = plan(detail::kSliceWindowSql);
  EXPECT_NE(slicePlan.find("USING INDEX slice_start_idx"), std::string::npos) << slicePlan;
  EXPECT_EQ(slicePlan.find("TEMP B-TREE"), std::string::npos) << slicePlan;
  const std::string trackPlan = plan(detail::kSliceWindowTrackSql);
  EXPECT_NE(trackPlan.find("USING INDEX slice_track_start_idx"), std::string::npos) << trackPlan;
  const std::string counterPlan = plan(detail::kCounterWindowSql);
  EXPECT_NE(counterPlan.find("counter_track_ts_idx"), std::string::npos) << counterPlan;
}

TEST_F(TraceGolden, TimeBoundsSpanFirstStartToLastEnd) {
  auto bounds = m_reader->timeBounds();
  ASSERT_TRUE(bounds.isOk());
  EXPECT_EQ(bounds->startNs, 0);
  EXPECT_EQ(bounds->endNs, 1010);
}

TEST_F(TraceGolden, PhaseTotalsGroupByNameLargestFirst) {
  auto totals = m_reader->phaseTotals();
  ASSERT_TRUE(totals.isOk());
  Rows rows;
  for (const PhaseTotal& t : *totals) {
    rows.push_back(t.name + "," + t.category + "," + std::to_string(t.count) + "," +
                   std::to_string(t.totalNs) + "," + std::to_string(t.maxNs));
  }
  EXPECT_EQ(rows, (Rows{"long,step,1,1000,1000", "a,phase,2,140,100", "b,phase,1,50,50",
                        "c,phase,1,10,10", "d,kernel,1,10,10", "e,phase,1,5,5"}));
  EXPECT_DOUBLE_EQ((*totals)[1].meanNs(), 70.0);

  auto phases = m_reader->phaseTotals("kernel");
  ASSERT_TRUE(phases.isOk());
  ASSERT_EQ(phases->size(), 1u);
  EXPECT_EQ(phases->front().name, "d");
}

TEST_F(TraceGolden, LayerImbalanceMatchesHandComputedValues) {
  auto layers = m_reader->layerImbalance();
  ASSERT_TRUE(layers.isOk()) << layers.status().toString();
  ASSERT_EQ(layers->size(), 2u);
  const LayerImbalance& l0 = (*layers)[0];
  EXPECT_EQ(l0.layer, 0);
  EXPECT_DOUBLE_EQ(l0.meanMaxOverMean, 1.5);
  EXPECT_DOUBLE_EQ(l0.lastMaxOverMean, 1.0);
  EXPECT_EQ(l0.hottestExpert, 0);
  EXPECT_DOUBLE_EQ(l0.hottestShare, 0.375);
  const LayerImbalance& l1 = (*layers)[1];
  EXPECT_EQ(l1.layer, 1);
  EXPECT_DOUBLE_EQ(l1.meanMaxOverMean, 2.5);
  EXPECT_DOUBLE_EQ(l1.lastMaxOverMean, 1.0);
  EXPECT_EQ(l1.hottestExpert, 1);
  EXPECT_DOUBLE_EQ(l1.hottestShare, 0.625);
}

TEST_F(TraceGolden, ExpertLoadIsOrderedAndRangeLimited) {
  auto rows = m_reader->expertLoad(1, 1);
  ASSERT_TRUE(rows.isOk());
  ASSERT_EQ(rows->size(), 12u);  // layer 0: 4 experts x 2 ranks, layer 1: 4 experts
  EXPECT_EQ((*rows)[0].layer, 0);
  EXPECT_EQ((*rows)[0].expert, 0);
  EXPECT_EQ((*rows)[1].rank, 1);
  EXPECT_EQ((*rows)[8].layer, 1);
  for (const ExpertLoadRow& row : *rows) EXPECT_EQ(row.step, 1);
}

TEST_F(TraceGolden, CountersInWindow) {
  auto counters = m_reader->counters({100, 300});
  ASSERT_TRUE(counters.isOk());
  ASSERT_EQ(counters->size(), 1u);
  EXPECT_EQ((*counters)[0].tsNs, 150);
  EXPECT_DOUBLE_EQ((*counters)[0].value, 300.0);
  EXPECT_EQ((*counters)[0].name, "mem");
}

TEST_F(TraceGolden, SqlOverTheRawTables) {
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT n.text, s.start_ns, s.dur_ns FROM slice s JOIN string n ON n.id = "
                     "s.name WHERE s.layer = 1 ORDER BY s.start_ns"),
            (Rows{"c,110,10", "d,200,10", "e,300,5"}));
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT layer, expert, sum(tokens), sum(dropped) FROM expert_load "
                     "WHERE step = 0 GROUP BY layer, expert ORDER BY layer, expert"),
            (Rows{"0,0,20,0", "0,1,10,0", "0,2,5,0", "0,3,5,0", "1,0,0,1", "1,1,8,1", "1,2,0,1",
                  "1,3,0,1"}));
}

TEST_F(TraceGolden, NsightNamedViews) {
  EXPECT_EQ(queryCsv(m_path, "SELECT value FROM StringIds ORDER BY id"),
            (Rows{"a", "phase", "long", "step", "b", "c", "d", "kernel", "e", "mem"}));
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT s.value, e.start, e.\"end\", e.globalTid FROM NVTX_EVENTS e "
                     "JOIN StringIds s ON s.id = e.textId WHERE e.start < 120 ORDER BY e.start"),
            (Rows{"a,0,100,1", "long,10,1010,1", "b,100,150,1", "c,110,120,1"}));
}

TEST_F(TraceGolden, SchemaV1TablesIndexesAndViews) {
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                     "ORDER BY type, name"),
            (Rows{"index,a2a_traffic_step_layer_idx",
                  "index,collective_step_rank_idx",
                  "index,counter_track_ts_idx",
                  "index,expert_load_step_layer_idx",
                  "index,gpu_memory_ts_idx",
                  "index,memory_event_series_idx",
                  "index,memory_event_ts_idx",
                  "index,slice_correlation_idx",
                  "index,slice_start_idx",
                  "index,slice_track_start_idx",
                  "index,swap_event_start_idx",
                  "index,swap_event_step_rank_idx",
                  "table,a2a_traffic",
                  "table,collective",
                  "table,config_change",
                  "table,counter",
                  "table,cuda_api",
                  "table,expert_load",
                  "table,gpu_kernel",
                  "table,gpu_memcpy",
                  "table,gpu_memory",
                  "table,gpu_memset",
                  "table,gpu_sync",
                  "table,memory_event",
                  "table,meta",
                  "table,run",
                  "table,slice",
                  "table,stats",
                  "table,step",
                  "table,string",
                  "table,swap_event",
                  "table,swap_plan",
                  "table,swap_plan_layer",
                  "table,swap_plan_tensor",
                  "table,swap_step",
                  "table,track",
                  "table,tuner_trial",
                  "view,ALLOCATOR_MEMORY_USAGE_EVENTS",
                  "view,CUPTI_ACTIVITY_KIND_DRIVER",
                  "view,CUPTI_ACTIVITY_KIND_KERNEL",
                  "view,CUPTI_ACTIVITY_KIND_MEMCPY",
                  "view,CUPTI_ACTIVITY_KIND_MEMSET",
                  "view,CUPTI_ACTIVITY_KIND_RUNTIME",
                  "view,CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                  "view,NVTX_EVENTS",
                  "view,StringIds"}));
  // Columns added to existing tables keep version 1 (docs/TRACE-FORMAT.md, Versioning).
  EXPECT_EQ(queryCsv(m_path, "PRAGMA user_version"), (Rows{"1"}));
  // A finished trace leaves WAL mode so that no -wal/-shm sit beside it (issue 19 item 5).
  EXPECT_EQ(queryCsv(m_path, "PRAGMA journal_mode"), (Rows{"delete"}));
}

// The swap plan tables' columns, in order, with their defaults (the what-if re-plans from them;
// readers of files from before the later ones read these defaults).
TEST_F(TraceGolden, SwapPlanColumns) {
  const std::string columns =
      "SELECT name || ' ' || type || coalesce(' = ' || dflt_value, '') FROM pragma_table_info";
  EXPECT_EQ(queryCsv(m_path, columns + "('swap_plan')"),
            (Rows{"id INTEGER", "run INTEGER", "step INTEGER", "rank INTEGER", "mode TEXT",
                  "hbm_target_bytes INTEGER", "pinned_budget_bytes INTEGER",
                  "prefetch_layers INTEGER", "d2h_gbps REAL", "h2d_gbps REAL", "bidir_gbps REAL",
                  "fixed_bytes INTEGER", "turn_ms REAL", "predicted_peak_bytes INTEGER",
                  "predicted_peak_no_swap_bytes INTEGER", "predicted_exposed_ms REAL",
                  "summary TEXT", "free_lag_layers INTEGER = 1", "ops TEXT = ''",
                  "min_bytes INTEGER = 0", "recompute_ops TEXT = ''",
                  "recompute_ms_source TEXT = ''"}));
  EXPECT_EQ(queryCsv(m_path, columns + "('swap_plan_layer')"),
            (Rows{"plan INTEGER", "layer INTEGER", "forward_ms REAL", "backward_ms REAL",
                  "other_bytes INTEGER", "recompute_ms REAL = 0"}));
  EXPECT_EQ(queryCsv(m_path, "SELECT name FROM pragma_table_info('swap_plan_tensor')"),
            (Rows{"plan", "idx", "layer", "op", "bytes", "swapped", "reason"}));
}

}  // namespace
}  // namespace moewb::storage
