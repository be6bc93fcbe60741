// Untrusted traces must never crash or hang a reader (issue 19 item 6): each test edits a real
// trace with plain SQL the way a damaged or hostile file could look, then reads, exports or
// merges it. Expected: the documented error naming the file and what is accepted, or the bad
// value repaired and counted in a stats row, never an abort, a bad_alloc or a wait forever.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "moewb/storage/trace_merge.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using nlohmann::json;
using testing::execSql;
using testing::makeSlice;
using testing::TempDir;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Rank `rank`'s file of a 2-rank run: a thread and a comm track, one step, one collective, two
// expert_load rows and one a2a row.
std::string writeRankTrace(const TempDir& dir, const std::string& name, int32_t rank) {
  const std::string path = dir.path(name);
  auto created = TraceWriter::create(path);
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  if (!created.isOk()) return path;
  auto writer = std::move(created).value();
  RunRow runRow;
  runRow.name = "hostile";
  runRow.backend = "cpu";
  runRow.worldSize = 2;
  const RunId run = writer->addRun(runRow);
  const TrackId thread = writer->addTrack({TrackId(), "trainer", "thread", rank, 1});
  const TrackId comm = writer->addTrack({TrackId(), "collectives", "comm", rank, 1});
  writer->addSlice(makeSlice(thread, "attention.fwd", 1000, 500, 0, 0));
  writer->addSlice(makeSlice(comm, "all_to_all_v", 2000, 100, 0, 0, kCategoryCollective));
  writer->addCollective(
      {comm, 2000, 100, 0, 0, rank, "all_to_all_v", "ep", "dispatch", 0, 64, 64, "0,1", true});
  writer->addExpertLoad({0, 0, 0, rank, 10, 1, 0.0});
  writer->addExpertLoad({0, 0, 1, rank, 20, 2, 0.0});
  writer->addA2aTraffic({0, 0, rank, 1 - rank, 32, "dispatch"});
  StepRow step;
  step.run = run;
  step.rank = rank;
  step.step = 0;
  writer->addStep(step);
  EXPECT_TRUE(writer->close().isOk());
  return path;
}

std::unique_ptr<TraceReader> openOrFail(const std::string& path) {
  auto reader = TraceReader::open(path);
  EXPECT_TRUE(reader.isOk()) << reader.status().toString();
  return reader.isOk() ? std::move(reader).value() : nullptr;
}

const StatRow* findStat(const std::vector<StatRow>& stats, const std::string& name) {
  for (const StatRow& row : stats) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

void expectRefused(const std::string& path, const std::string& phrase) {
  auto reader = TraceReader::open(path);
  ASSERT_FALSE(reader.isOk()) << path << " opened; a reader could hang or run its SQL";
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().toString();
  EXPECT_NE(reader.status().message().find(path), std::string::npos) << reader.status().message();
  EXPECT_NE(reader.status().message().find(phrase), std::string::npos)
      << reader.status().message();
}

TEST(HostileTrace, InvalidUtf8InTextColumnsIsExportedWithReplacementCharacters) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "utf8.moewb", 0);
  execSql(path,
          "UPDATE string SET text = CAST(X'61FF62' AS TEXT) WHERE text = 'attention.fwd';"
          "UPDATE track SET name = CAST(X'C0AF' AS TEXT) WHERE kind = 'thread';"
          "UPDATE run SET name = CAST(X'EDA080' AS TEXT);"
          "INSERT INTO meta VALUES (CAST(X'F880808080' AS TEXT), CAST(X'E282' AS TEXT));");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  const std::string out = dir.path("utf8.json");
  const Status status = exportChromeTrace(*reader, out);
  ASSERT_TRUE(status.isOk()) << status.toString();
  std::ifstream in(out);
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << "the export is not valid JSON";
  bool found = false;
  for (const json& event : doc["traceEvents"]) {
    if (event["ph"] == "X" && event["cat"] == "phase") {
      EXPECT_EQ(event["name"], "a\xEF\xBF\xBD" "b");  // U+FFFD in place of 0xFF
      found = true;
    }
  }
  EXPECT_TRUE(found) << "the slice with the invalid name is missing";
}

TEST(HostileTrace, MergeRefusesAHugeWorldSizeNamingItAndTheAcceptedRange) {
  TempDir dir;
  const std::string rank0 = writeRankTrace(dir, "r0.moewb", 0);
  const std::string rank1 = writeRankTrace(dir, "r1.moewb", 1);
  execSql(rank0, "UPDATE run SET world_size = 2147483647");
  execSql(rank1, "UPDATE run SET world_size = 2147483647");
  auto merged = mergeTraces({rank0, rank1}, dir.path("merged.moewb"));
  ASSERT_FALSE(merged.isOk()) << "a world size of 2^31-1 was merged";
  const std::string& message = merged.status().message();
  EXPECT_NE(message.find("2147483647"), std::string::npos) << message;
  EXPECT_NE(message.find("1 to " + std::to_string(kMaxWorldSize)), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir.path("merged.moewb")));
}

TEST(HostileTrace, ReadersBoundAHugeWorldSizeAndCountIt) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "world.moewb", 0);
  execSql(path, "UPDATE run SET world_size = 2147483647");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  auto runs = reader->runs();
  ASSERT_TRUE(runs.isOk()) << runs.status().toString();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().worldSize, kMaxWorldSize);
  auto overview = reader->parallelOverview();
  ASSERT_TRUE(overview.isOk()) << overview.status().toString();
  EXPECT_LE(overview->worldSize, kMaxWorldSize);
  auto matrix = reader->a2aTrafficMatrix({});
  ASSERT_TRUE(matrix.isOk()) << matrix.status().toString();
  EXPECT_LE(matrix->worldSize, kMaxWorldSize);
  auto stats = reader->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().toString();
  const StatRow* stat = findStat(*stats, "world_size_out_of_range");
  ASSERT_NE(stat, nullptr) << "the bad world size was not counted";
  EXPECT_EQ(stat->value, 1);
  EXPECT_NE(stat->description.find("2147483647"), std::string::npos) << stat->description;
}

TEST(HostileTrace, SliceTableReplacedByARecursiveViewIsRefusedAtOpen) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "recursive.moewb", 0);
  execSql(path,
          "DROP TABLE slice;"
          "CREATE VIEW slice AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
          "SELECT n AS id, 1 AS track, n AS start_ns, 1 AS dur_ns, 1 AS name, 1 AS category, "
          "-1 AS step, -1 AS layer, 0 AS correlation_id, 0 AS depth FROM r;");
  expectRefused(path, "'slice' is a view");
}

TEST(HostileTrace, TriggersAndUndeclaredViewsAreRefusedButTheSchemasOwnViewsAreNot) {
  TempDir dir;
  const std::string trigger = writeRankTrace(dir, "trigger.moewb", 0);
  execSql(trigger, "CREATE TRIGGER grow AFTER INSERT ON meta BEGIN SELECT 1; END;");
  expectRefused(trigger, "trigger 'grow'");
  const std::string view = writeRankTrace(dir, "view.moewb", 0);
  execSql(view, "CREATE VIEW loop AS SELECT * FROM slice");
  expectRefused(view, "view 'loop'");
  // writeRankTrace's files hold the Nsight-named views of the schema and open (openOrFail).
  EXPECT_TRUE(openOrFail(writeRankTrace(dir, "plain.moewb", 0)));
}

TEST(HostileTrace, AnOversizedValueIsAPlainErrorNotAnAllocation) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "big.moewb", 0);
  execSql(path, "UPDATE run SET config_toml = hex(zeroblob(12000000))");  // 24 MB of text
  auto reader = TraceReader::open(path);
  Status status = reader.status();
  if (reader.isOk()) status = (*reader)->runs().status();
  ASSERT_FALSE(status.isOk()) << "a 24 MB value was read";
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.toString();
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("larger than this build reads"), std::string::npos)
      << status.message();
}

TEST(HostileTrace, ErrorMessagesSayWhatIsWrongWithoutSqliteCallsOrSourceLines) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "scribbled.moewb", 0);
  execSql(path, "UPDATE run SET config_toml = hex(zeroblob(100000))");  // a few more pages
  std::string bytes = testing::readFile(path);
  ASSERT_GT(bytes.size(), 3u * 4096u);
  for (size_t i = 2 * 4096; i < bytes.size(); i += 97) bytes[i] = char(0xA5);
  testing::writeFile(path, bytes);
  auto reader = TraceReader::open(path);
  Status status = reader.status();
  if (reader.isOk()) status = (*reader)->runs().status();
  if (status.isOk()) status = (*reader)->slices(TimeWindow::all()).status();
  ASSERT_FALSE(status.isOk()) << "scribbled pages went unnoticed";
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find("sqlite3_"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find(".cpp:"), std::string::npos) << status.message();
}

TEST(HostileTrace, CollectiveTimesThatOverflowAreClampedAndCounted) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "times.moewb", 0);
  execSql(path,
          "UPDATE collective SET start_ns = 9223372036854775797, dur_ns = 100;"
          "INSERT INTO collective(track, start_ns, dur_ns, step, layer, rank, op, comm_group, "
          "phase, seq, bytes_sent, bytes_received, peers, ok) VALUES (2, -100, 10, 0, 0, 1, "
          "'all_to_all_v', 'ep', 'dispatch', 0, 9223372036854775807, 0, '0,1', 1);");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  auto collectives = reader->stepCollectives(0);
  ASSERT_TRUE(collectives.isOk()) << collectives.status().toString();
  ASSERT_EQ(collectives->size(), 1u);
  const MatchedCollective& c = collectives->front();
  EXPECT_EQ(c.endNs, kMax);  // start + dur overflows
  EXPECT_EQ(c.totalWaitNs, kMax);  // the early rank waited longer than int64 can say
  EXPECT_EQ(c.bytesSent, kMax);
  EXPECT_EQ(c.skewNs(), kMax);
  auto stats = reader->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().toString();
  const StatRow* clamped = findStat(*stats, "values_clamped");
  ASSERT_NE(clamped, nullptr) << "the overflows were not counted";
  EXPECT_GE(clamped->value, 3);
}

TEST(HostileTrace, LoadAndTrafficSumsThatOverflowAreClampedNotAnError) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "sums.moewb", 0);
  execSql(path,
          "UPDATE expert_load SET dropped = 9223372036854775807;"
          "INSERT INTO a2a_traffic VALUES (1, 0, 0, 1, 9223372036854775807, 'dispatch');"
          "INSERT INTO a2a_traffic VALUES (2, 0, 0, 1, 9223372036854775807, 'dispatch');");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  auto loads = reader->rankLoads({});
  ASSERT_TRUE(loads.isOk()) << loads.status().toString();
  ASSERT_GE(loads->ranks.size(), 1u);
  EXPECT_EQ(loads->ranks[0].droppedRows, kMax);
  auto matrix = reader->a2aTrafficMatrix({});
  ASSERT_TRUE(matrix.isOk()) << matrix.status().toString();
  EXPECT_EQ(matrix->at(0, 1), kMax);
  EXPECT_EQ(matrix->totalBytes(), kMax);
  auto stats = reader->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().toString();
  EXPECT_NE(findStat(*stats, "values_clamped"), nullptr) << "the overflows were not counted";
}

TEST(HostileTrace, ExportClampsTimesWhoseDistanceFromTheOriginOverflows) {
  TempDir dir;
  const std::string path = writeRankTrace(dir, "origin.moewb", 0);
  execSql(path,
          "INSERT INTO string(text) VALUES ('hostile.counter');"
          "INSERT INTO counter(track, name, ts_ns, value) VALUES (1, "
          "(SELECT id FROM string WHERE text = 'hostile.counter'), -9223372036854775808, 1.0);");
  auto reader = openOrFail(path);
  ASSERT_TRUE(reader);
  const std::string out = dir.path("origin.json");
  const Status status = exportChromeTrace(*reader, out);
  ASSERT_TRUE(status.isOk()) << status.toString();
  std::ifstream in(out);
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded());
  bool found = false;
  for (const json& event : doc["traceEvents"]) {
    if (event["ph"] == "C" && event["name"] == "hostile.counter") {
      found = true;
      EXPECT_LT(event["ts"].get<double>(), -9.2e12) << "ts - origin wrapped around";
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace moewb::storage
