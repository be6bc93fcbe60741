// Golden tests of the device-memory store: memory_event rows written through TraceWriter, the
// reader's downsampled series (values before the window, max per bucket, ties at one time), the
// per-category totals, the Nsight-named view, the query plans, and files whose memory_event
// table predates the in_use_bytes column.
#include <gtest/gtest.h>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "sqlite_trace_reader.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::queryCsv;
using testing::TempDir;
using Rows = std::vector<std::string>;

// Track m0 (memory, rank 0):
//   weights 100: +1000 (baseline, address 0) -> 1000;  grads 100: +500 (baseline) -> 500
//   activations 200: +64 -> 64, 210: +32 -> 96, 220: -64 -> 32, 230: +128 -> 160,
//               400: -32 -> 128, 410: -128 -> 0, 410: +40 -> 40 (same ts, later row)
//   workspace 500: +256 -> 256, 505: -256 -> 0
// Track m1 (memory, rank 1): weights 150: +2000 (baseline) -> 2000; activations 300: +16 -> 16.
class MemoryGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("memory.moewb");
    auto created = TraceWriter::create(m_path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    m_thread = writer->addTrack({TrackId(), "trainer thread", "thread", 0, 7});
    m_m0 = writer->addTrack({TrackId(), "device memory", kTrackKindMemory, 0, 0});
    m_m1 = writer->addTrack({TrackId(), "device memory", kTrackKindMemory, 1, 0});
    auto add = [&](TrackId track, int64_t ts, bool alloc, int64_t bytes, int64_t address,
                   const char* category, int64_t inUse) {
      writer->addMemoryEvent({track, ts, ts / 100, alloc, bytes, address, category, inUse});
    };
    const int64_t a = 0x7f0000000000;
    add(m_m0, 100, true, 1000, 0, "weights", 1000);
    add(m_m0, 100, true, 500, 0, "grads", 500);
    add(m_m1, 150, true, 2000, 0, "weights", 2000);
    add(m_m0, 200, true, 64, a, "activations", 64);
    add(m_m0, 210, true, 32, a + 64, "activations", 96);
    add(m_m0, 220, false, 64, a, "activations", 32);
    add(m_m0, 230, true, 128, a + 128, "activations", 160);
    add(m_m1, 300, true, 16, a, "activations", 16);
    add(m_m0, 400, false, 32, a + 64, "activations", 128);
    add(m_m0, 410, false, 128, a + 128, "activations", 0);
    add(m_m0, 410, true, 40, a, "activations", 40);
    add(m_m0, 500, true, 256, a + 4096, "workspace", 256);
    add(m_m0, 505, false, 256, a + 4096, "workspace", 0);
    ASSERT_TRUE(writer->close().isOk());
    reopen();
  }

  void reopen() {
    m_reader.reset();
    auto reader = TraceReader::open(m_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  // "track/category: ts=bytes ts=bytes ..." per series.
  Rows series(TimeWindow window, int32_t buckets, std::optional<TrackId> track = {}) {
    auto result = m_reader->memorySeries(window, buckets, track);
    EXPECT_TRUE(result.isOk()) << result.status().toString();
    Rows rows;
    if (!result.isOk()) return rows;
    for (const MemorySeries& s : *result) {
      std::string row = std::to_string(s.track.value) + "/" + s.category + ":";
      for (const MemoryPoint& p : s.points) {
        row += " " + std::to_string(p.tsNs) + "=" + std::to_string(p.bytes);
      }
      rows.push_back(row);
    }
    return rows;
  }

  TempDir m_dir;
  std::string m_path;
  TrackId m_thread, m_m0, m_m1;
  std::unique_ptr<TraceReader> m_reader;
};

TEST_F(MemoryGolden, FullResolutionSeriesKeepEveryChange) {
  // 406 ns of events over 1000 buckets: one bucket per ns, so only same-ts rows merge (410: the
  // bucket's peak and last value are both 40).
  EXPECT_EQ(series(TimeWindow::all(), 1000),
            (Rows{"2/activations: 200=64 210=96 220=32 230=160 400=128 410=40",
                  "2/grads: 100=500", "2/weights: 100=1000", "2/workspace: 500=256 505=0",
                  "3/activations: 300=16", "3/weights: 150=2000"}));
}

TEST_F(MemoryGolden, DownsamplingKeepsPeaksAndTheLevelAfterEachBucket) {
  // Two buckets over [100, 506): [100, 303) and [303, 506).
  EXPECT_EQ(series({0, 1000}, 2),
            (Rows{"2/activations: 200=160 400=128 410=40", "2/grads: 100=500",
                  "2/weights: 100=1000", "2/workspace: 500=256 505=0", "3/activations: 300=16",
                  "3/weights: 150=2000"}));
  // One bucket: each series collapses to its peak plus its final level.
  EXPECT_EQ(series({0, 1000}, 1)[0], "2/activations: 200=160 410=40");
}

TEST_F(MemoryGolden, WindowStartsWithTheLevelBeforeIt) {
  EXPECT_EQ(series({215, 405}, 1000),
            (Rows{"2/activations: 215=96 220=32 230=160 400=128", "2/grads: 215=500",
                  "2/weights: 215=1000", "2/workspace:", "3/activations: 300=16",
                  "3/weights: 215=2000"}));
  // The last of two rows at the same time wins: 40 after ts 410, not 0.
  EXPECT_EQ(series({411, 420}, 10)[0], "2/activations: 411=40");
  EXPECT_EQ(series({215, 405}, 1000, m_m1), (Rows{"3/activations: 300=16", "3/weights: 215=2000"}));
  EXPECT_EQ(series({600, 700}, 10, m_m1), (Rows{"3/activations: 600=16", "3/weights: 600=2000"}));
  EXPECT_EQ(series({215, 405}, 1000, m_thread), Rows{});
}

TEST_F(MemoryGolden, TotalsPerCategory) {
  auto totals = m_reader->memoryTotals();
  ASSERT_TRUE(totals.isOk()) << totals.status().toString();
  Rows rows;
  for (const MemoryCategoryTotals& t : *totals) {
    rows.push_back(std::to_string(t.track.value) + "," + t.category + "," +
                   std::to_string(t.allocations) + "," + std::to_string(t.frees) + "," +
                   std::to_string(t.peakBytes));
  }
  // Baseline rows (address 0) are not allocations.
  EXPECT_EQ(rows, (Rows{"2,activations,4,3,160", "2,grads,0,0,500", "2,weights,0,0,1000",
                        "2,workspace,1,1,256", "3,activations,1,0,16", "3,weights,0,0,2000"}));
}

TEST_F(MemoryGolden, StreamingVisitsEveryEventInTimeOrder) {
  std::vector<MemoryEventRow> seen;
  ASSERT_TRUE(m_reader->forEachMemoryEvent([&](const MemoryEventRow& r) {
    seen.push_back(r);
    return true;
  }).isOk());
  ASSERT_EQ(seen.size(), 13u);
  EXPECT_EQ(seen[2].category, "weights");
  EXPECT_EQ(seen[2].track, m_m1);
  EXPECT_EQ(seen[5].tsNs, 220);
  EXPECT_FALSE(seen[5].isAllocation);
  EXPECT_EQ(seen[5].address, 0x7f0000000000);
  EXPECT_EQ(seen[5].inUseBytes, 32);
  EXPECT_EQ(seen[5].step, 2);
  EXPECT_EQ(seen[10].inUseBytes, 40);
}

TEST_F(MemoryGolden, NsightNamedMemoryView) {
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT e.start, e.globalPid, e.deviceId, e.bytes, e.memoryOperationType, "
                     "s.value, e.inUseBytes FROM ALLOCATOR_MEMORY_USAGE_EVENTS e "
                     "JOIN StringIds s ON s.id = e.name WHERE e.start BETWEEN 290 AND 410 "
                     "ORDER BY e.start, e.bytes"),
            (Rows{"300,1,0,16,0,activations,16", "400,0,0,32,1,activations,128",
                  "410,0,0,40,0,activations,40", "410,0,0,128,1,activations,0"}));
  // Peak per category straight from SQL, as a user would write it.
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT s.value, max(m.in_use_bytes) FROM memory_event m JOIN StringIds s "
                     "ON s.id = m.category WHERE m.track = 2 GROUP BY s.value ORDER BY s.value"),
            (Rows{"activations,160", "grads,500", "weights,1000", "workspace,256"}));
}

TEST_F(MemoryGolden, SeriesQueriesUseTheCoveringIndexWithoutASort) {
  auto plan = [&](const std::string& sql) {
    std::string all;
    for (const std::string& row : queryCsv(m_path, "EXPLAIN QUERY PLAN " + sql)) all += row + "\n";
    return all;
  };
  for (const char* sql : {detail::kMemoryInWindowSql, detail::kMemoryBeforeWindowSql,
                          detail::kMemoryNextSeriesSql}) {
    const std::string p = plan(sql);
    EXPECT_NE(p.find("USING COVERING INDEX memory_event_series_idx"), std::string::npos)
        << sql << "\n" << p;
    EXPECT_EQ(p.find("TEMP B-TREE"), std::string::npos) << sql << "\n" << p;
  }
}

TEST_F(MemoryGolden, OlderMemoryTableReadsAsNoEvents) {
  m_reader.reset();
  // The memory_event table as the first schema v1 declared it (no step, no in_use_bytes).
  testing::execSql(m_path,
                   "DROP VIEW ALLOCATOR_MEMORY_USAGE_EVENTS; DROP TABLE memory_event; "
                   "CREATE TABLE memory_event (id INTEGER PRIMARY KEY, track INTEGER NOT NULL, "
                   "ts_ns INTEGER NOT NULL, kind TEXT NOT NULL, bytes INTEGER NOT NULL, "
                   "address INTEGER NOT NULL, category INTEGER NOT NULL); "
                   "INSERT INTO memory_event(track, ts_ns, kind, bytes, address, category) "
                   "VALUES (2, 100, 'alloc', 64, 4096, 1);");
  reopen();
  auto s = m_reader->memorySeries(TimeWindow::all(), 100);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_TRUE(s->empty());
  auto totals = m_reader->memoryTotals();
  ASSERT_TRUE(totals.isOk()) << totals.status().toString();
  EXPECT_TRUE(totals->empty());
  int visited = 0;
  ASSERT_TRUE(m_reader->forEachMemoryEvent([&](const MemoryEventRow&) { return ++visited > 0; })
                  .isOk());
  EXPECT_EQ(visited, 0);
}

TEST(MemoryGoldenEmpty, TraceWithoutMemoryEventsHasNoSeries) {
  TempDir dir;
  const std::string path = dir.path("cpu.moewb");
  {
    auto writer = TraceWriter::create(path);
    ASSERT_TRUE(writer.isOk());
    (*writer)->addTrack({TrackId(), "trainer thread", "thread", 0, 1});
    ASSERT_TRUE((*writer)->close().isOk());
  }
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto s = (*reader)->memorySeries({0, 1000}, 10);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_TRUE(s->empty());
  auto totals = (*reader)->memoryTotals();
  ASSERT_TRUE(totals.isOk());
  EXPECT_TRUE(totals->empty());
}

}  // namespace
}  // namespace moewb::storage
