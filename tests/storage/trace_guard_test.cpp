// The guards readers put around untrusted files: the per-step query time limit (a query that
// would run forever stops with a plain message; a slow consumer of many rows is not stopped),
// the defensive settings of a hardened connection, the export's repair counts, and the sparse
// per-rank expert loads (same answers as the dense scan they replace).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "sqlite_util.h"
#include "test_util.h"
#include "trace_open.h"

namespace moewb::storage {
namespace {

using namespace std::chrono_literals;
using detail::Database;
using detail::Statement;
using testing::execSql;
using testing::makeSlice;
using testing::TempDir;

constexpr const char* kEndlessSql =
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r";

Database openScratch(const TempDir& dir) {
  const std::string path = dir.path("scratch.db");
  execSql(path, "CREATE TABLE t(x)");
  auto db = Database::open(path, SQLITE_OPEN_READONLY);
  EXPECT_TRUE(db.isOk()) << db.status().toString();
  return std::move(db).value();
}

void expectTimedOut(const Status& status, const std::string& path) {
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.toString();
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("the trace's query took longer than 0.2 s; the file may be "
                                  "damaged or hostile"),
            std::string::npos)
      << status.message();
}

TEST(QueryTimeLimit, AStepThatWouldRunForeverStopsWithAPlainMessage) {
  TempDir dir;
  Database db = openScratch(dir);
  db.setStepTimeLimit(200ms);
  auto query = Statement::prepare(db, kEndlessSql);
  ASSERT_TRUE(query.isOk()) << query.status().toString();
  const auto start = std::chrono::steady_clock::now();
  auto row = query->step();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  expectTimedOut(row.status(), db.path());
  expectTimedOut(db.exec(kEndlessSql), db.path());
}

TEST(QueryTimeLimit, TheLimitIsPerStepSoASlowConsumerOfManyRowsIsNotStopped) {
  TempDir dir;
  Database db = openScratch(dir);
  db.setStepTimeLimit(200ms);
  auto query = Statement::prepare(
      db, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 6) "
          "SELECT n FROM r");
  ASSERT_TRUE(query.isOk()) << query.status().toString();
  int rows = 0;
  while (true) {
    auto row = query->step();
    ASSERT_TRUE(row.isOk()) << row.status().toString();
    if (!*row) break;
    ++rows;
    std::this_thread::sleep_for(60ms);  // 6 rows: 360 ms in all, far under the limit per step
  }
  EXPECT_EQ(rows, 6);
}

TEST(HardenedConnection, HasTheDefensiveSettingsAndLimits) {
  TempDir dir;
  Database db = openScratch(dir);
  ASSERT_TRUE(detail::hardenConnection(db, 0).isOk());
  int defensive = -1, trustedSchema = -1, triggers = -1;
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive);
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1, &trustedSchema);
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_ENABLE_TRIGGER, -1, &triggers);
  EXPECT_EQ(defensive, 1);
  EXPECT_EQ(trustedSchema, 0);
  EXPECT_EQ(triggers, 0);
  EXPECT_EQ(sqlite3_limit(db.handle(), SQLITE_LIMIT_LENGTH, -1), detail::kMaxValueBytes);
  EXPECT_EQ(sqlite3_limit(db.handle(), SQLITE_LIMIT_ATTACHED, -1), 0);
  EXPECT_LE(sqlite3_limit(db.handle(), SQLITE_LIMIT_EXPR_DEPTH, -1), 100);
}

// The reader takes its list of table and view names from the schema's DDL: every table of a
// fresh trace replaced by a view must be refused (a name the parse missed would open).
TEST(SchemaObjects, EveryTableOfTheSchemaReplacedByAViewIsRefused) {
  TempDir dir;
  const std::string fresh = dir.path("fresh.moewb");
  ASSERT_TRUE(TraceWriter::create(fresh).value()->close().isOk());
  const std::vector<std::string> tables =
      testing::queryCsv(fresh, "SELECT name FROM sqlite_master WHERE type = 'table'");
  ASSERT_GE(tables.size(), 20u);
  for (const std::string& table : tables) {
    const std::string path = dir.path(table + ".moewb");
    std::filesystem::copy_file(fresh, path);
    execSql(path, "DROP TABLE " + table + "; CREATE VIEW " + table + " AS SELECT 1 AS x");
    auto reader = TraceReader::open(path);
    ASSERT_FALSE(reader.isOk()) << "a view named " << table << " was accepted";
    EXPECT_NE(reader.status().message().find("'" + table + "' is a view"), std::string::npos)
        << reader.status().message();
  }
}

TEST(ReaderOptions, TheQueryTimeLimitReachesTheReader) {
  TempDir dir;
  const std::string path = dir.path("t.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  const TrackId track = (*created)->addTrack({TrackId(), "t", "thread", 0, 0});
  (*created)->addSlice(makeSlice(track, "s", 0, 10));
  ASSERT_TRUE((*created)->close().isOk());
  ReaderOptions options;
  options.queryTimeLimit = 200ms;
  auto reader = TraceReader::open(path, options);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto slices = (*reader)->slices(TimeWindow::all());
  ASSERT_TRUE(slices.isOk()) << slices.status().toString();
  EXPECT_EQ(slices->size(), 1u);
}

TEST(ChromeExportRepairs, CountsInvalidTextsAndClampedTimes) {
  TempDir dir;
  const std::string path = dir.path("t.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  const TrackId track = (*created)->addTrack({TrackId(), "t", "thread", 0, 0});
  (*created)->addSlice(makeSlice(track, "bad name", 1000, 10));
  (*created)->addSlice(makeSlice(track, "good name", 2000, 10));
  (*created)->addCounter({track, "counter", 3000, 1.0});
  ASSERT_TRUE((*created)->close().isOk());
  execSql(path,
          "UPDATE string SET text = CAST(X'62FE' AS TEXT) WHERE text = 'bad name';"
          "UPDATE counter SET ts_ns = -9223372036854775807;");
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  ChromeExportStats stats;
  const Status status = exportChromeTrace(**reader, dir.path("t.json"), &stats);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(stats.invalidUtf8Strings, 1);
  EXPECT_EQ(stats.clampedTimes, 1);
}

// Two ranks in one EP group over 4 experts: rank 0 hosts experts 0-1, rank 1 hosts 2-3.
TEST(RankLoadsSparse, MatchTheDenseAnswerIncludingExpertsWithoutRows) {
  TempDir dir;
  const std::string path = dir.path("loads.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto& writer = **created;
  RunRow run;
  run.worldSize = 2;
  writer.addRun(run);
  for (int32_t rank = 0; rank < 2; ++rank) {
    const TrackId comm = writer.addTrack({TrackId(), "collectives", "comm", rank, 0});
    writer.addCollective(
        {comm, 100, 10, 0, 0, rank, "all_to_all_v", "ep", "dispatch", 0, 0, 0, "0,1", true});
  }
  writer.addA2aTraffic({0, 0, 0, 1, 8, "dispatch"});
  writer.addExpertLoad({0, 0, 1, 0, 5, 0, 0.0});  // rank 0 -> expert 1 (on rank 0)
  writer.addExpertLoad({0, 0, 2, 0, 7, 1, 0.0});  // rank 0 -> expert 2 (on rank 1)
  writer.addExpertLoad({0, 0, 3, 1, 0, 0, 0.0});  // rank 1 -> expert 3, nothing routed
  ASSERT_TRUE(writer.close().isOk());
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto loads = (*reader)->rankLoads({});
  ASSERT_TRUE(loads.isOk()) << loads.status().toString();
  ASSERT_EQ(loads->numExperts, 4);
  ASSERT_EQ(loads->ranks.size(), 2u);
  const RankLoad& r0 = loads->ranks[0];
  EXPECT_EQ(r0.hottestExpert, 1);  // expert 0 has no rows (0), expert 1 has 5
  EXPECT_EQ(r0.maxExpertRows, 5);
  EXPECT_DOUBLE_EQ(r0.meanExpertRows, 2.5);
  EXPECT_EQ(r0.routedRows, 12);
  EXPECT_EQ(r0.droppedRows, 1);
  EXPECT_EQ(r0.sentRows, 6);
  const RankLoad& r1 = loads->ranks[1];
  EXPECT_EQ(r1.hottestExpert, 2);
  EXPECT_EQ(r1.maxExpertRows, 6);
  EXPECT_DOUBLE_EQ(r1.meanExpertRows, 3.0);
  EXPECT_EQ(r1.receivedRows, 6);
  // [src, dst] rows: rank 0 kept 5 and sent 6 to rank 1.
  EXPECT_EQ(loads->rowsMatrix, (std::vector<int64_t>{5, 6, 0, 0}));
}

}  // namespace
}  // namespace moewb::storage
