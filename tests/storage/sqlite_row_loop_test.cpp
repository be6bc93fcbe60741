// The row loop of sqlite_util.h (forEachRow, collectRows, firstRow and the query* forms that
// prepare and bind): every column type read through a map, empty results, a failure of the
// callback or of SQLite in the middle of the rows, early stops, the step time limit, and the
// statement's state afterwards. Runs on an in-memory database.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "sqlite_util.h"

namespace moewb::storage::detail {
namespace {

// i: 1, 2, 3; big: beyond int32 both ways; r: reals; s: text (one with a NUL inside); n: NULL
// on the first row only.
Database sampleDatabase() {
  Result<Database> db = Database::open(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  EXPECT_TRUE(db.isOk()) << db.status().toString();
  Database out = std::move(db).value();
  const Status made = out.exec(
      "CREATE TABLE t (i INTEGER, big INTEGER, r REAL, s TEXT, n INTEGER);"
      "INSERT INTO t VALUES (1, 5000000000, 2.5, 'one', NULL);"
      "INSERT INTO t VALUES (2, -5000000000, -0.25, CAST(X'610062' AS TEXT), 7);"
      "INSERT INTO t VALUES (3, 12, 1e300, '', 8);");
  EXPECT_TRUE(made.isOk()) << made.toString();
  return out;
}

struct AllTypes {
  int64_t i = 0;
  int32_t big32 = 0;  // saturated
  int64_t big = 0;
  double r = 0;
  std::string s;
  bool nIsNull = false;
};

AllTypes allTypesFromColumns(const Statement& q) {
  return AllTypes{q.columnInt(0),    q.columnInt32(1), q.columnInt(1),
                  q.columnDouble(2), q.columnText(3),  q.columnIsNull(4)};
}

TEST(SqliteRowLoop, MapReadsEveryColumnTypeInOrder) {
  Database db = sampleDatabase();
  Result<std::vector<AllTypes>> rows =
      queryRows(db, "SELECT i, big, r, s, n FROM t ORDER BY i DESC", allTypesFromColumns);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 3u);
  const AllTypes& third = (*rows)[0];
  const AllTypes& second = (*rows)[1];
  const AllTypes& first = (*rows)[2];
  EXPECT_EQ(third.i, 3);
  EXPECT_EQ(second.i, 2);
  EXPECT_EQ(first.i, 1);
  EXPECT_EQ(first.big, 5000000000);
  EXPECT_EQ(first.big32, INT32_MAX);  // saturated, not wrapped
  EXPECT_EQ(second.big32, INT32_MIN);
  EXPECT_EQ(third.big32, 12);
  EXPECT_DOUBLE_EQ(first.r, 2.5);
  EXPECT_DOUBLE_EQ(second.r, -0.25);
  EXPECT_DOUBLE_EQ(third.r, 1e300);
  EXPECT_EQ(first.s, "one");
  EXPECT_EQ(second.s, std::string("a\0b", 3));  // the whole text, NUL included
  EXPECT_EQ(third.s, "");
  EXPECT_TRUE(first.nIsNull);
  EXPECT_FALSE(second.nIsNull);
}

TEST(SqliteRowLoop, BindsParametersInOrder) {
  Database db = sampleDatabase();
  Result<std::vector<std::string>> texts =
      queryRows(db, "SELECT s FROM t WHERE i >= ?1 AND r < ?2 AND s != ?3 ORDER BY i", column0Text,
                int64_t{2}, 1e301, std::string(""));
  ASSERT_TRUE(texts.isOk()) << texts.status().toString();
  EXPECT_EQ(*texts, std::vector<std::string>{std::string("a\0b", 3)});
}

TEST(SqliteRowLoop, EmptyResult) {
  Database db = sampleDatabase();
  Result<std::vector<int64_t>> none = queryRows(db, "SELECT i FROM t WHERE i > 3", column0Int);
  ASSERT_TRUE(none.isOk()) << none.status().toString();
  EXPECT_TRUE(none->empty());

  int calls = 0;
  const Status visited = queryEachRow(
      db, "SELECT i FROM t WHERE i > ?1", [&](const Statement&) { ++calls; }, 3);
  EXPECT_TRUE(visited.isOk()) << visited.toString();
  EXPECT_EQ(calls, 0);

  Result<std::optional<int64_t>> noRow = queryFirstRow(db, "SELECT i FROM t WHERE 0", column0Int);
  ASSERT_TRUE(noRow.isOk());
  EXPECT_FALSE(noRow->has_value());
  // An aggregate over no rows gives one row of NULL: a map returning an optional reads it as
  // nullopt too, without a second level of optional.
  Result<std::optional<int64_t>> nullRow =
      queryFirstRow(db, "SELECT min(i) FROM t WHERE 0", column0IntOrNull);
  ASSERT_TRUE(nullRow.isOk());
  EXPECT_FALSE(nullRow->has_value());
  Result<std::optional<int64_t>> valueRow =
      queryFirstRow(db, "SELECT max(i) FROM t", column0IntOrNull);
  ASSERT_TRUE(valueRow.isOk());
  EXPECT_EQ(*valueRow, std::optional<int64_t>(3));
}

TEST(SqliteRowLoop, CallbackFailureStopsTheLoopAndIsReturned) {
  Database db = sampleDatabase();
  Result<Statement> query = Statement::prepare(db, "SELECT i FROM t WHERE i >= ?1 ORDER BY i");
  ASSERT_TRUE(query.isOk());
  ASSERT_TRUE(query->bindInt(1, 1).isOk());
  std::vector<int64_t> seen;
  const Status status = forEachRow(*query, [&](const Statement& s) -> Status {
    seen.push_back(s.columnInt(0));
    if (s.columnInt(0) == 2) return dataLoss("row 2 is bad");
    return Status::ok();
  });
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "row 2 is bad");
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));  // row 3 was never read
  // Reset with its bindings cleared: ?1 is NULL now, so no row matches; bound again, all do.
  Result<std::vector<int64_t>> unbound = collectRows(*query, column0Int);
  ASSERT_TRUE(unbound.isOk());
  EXPECT_TRUE(unbound->empty());
  ASSERT_TRUE(query->bindInt(1, 1).isOk());
  Result<std::vector<int64_t>> again = collectRows(*query, column0Int);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(*again, (std::vector<int64_t>{1, 2, 3}));
}

TEST(SqliteRowLoop, SqliteErrorMidLoopStopsAndIsReturned) {
  Database db = sampleDatabase();
  // abs(INT64_MIN) fails with "integer overflow" when the third row is computed (the argument
  // depends on the row, so SQLite cannot evaluate it once before the first row; no ORDER BY, as
  // a sort would compute every row in the first step: the scan goes in rowid order, 1, 2, 3).
  const char* sql = "SELECT CASE WHEN i < 3 THEN i ELSE abs(-9223372036854775805 - i) END FROM t";
  std::vector<int64_t> seen;
  const Status status =
      queryEachRow(db, sql, [&](const Statement& s) { seen.push_back(s.columnInt(0)); });
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("integer overflow"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(":memory:"), std::string::npos) << status.message();
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));

  Result<std::vector<int64_t>> rows = queryRows(db, sql, column0Int);
  ASSERT_FALSE(rows.isOk());  // the rows read before the error are not returned
  EXPECT_EQ(rows.status().message(), status.message());
}

TEST(SqliteRowLoop, FalseStopsEarlyWithoutError) {
  Database db = sampleDatabase();
  std::vector<int64_t> seen;
  const Status status = queryEachRow(db, "SELECT i FROM t ORDER BY i", [&](const Statement& s) {
    seen.push_back(s.columnInt(0));
    return s.columnInt(0) < 2;
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));

  Result<std::optional<std::string>> first =
      queryFirstRow(db, "SELECT s FROM t ORDER BY i", column0Text);
  ASSERT_TRUE(first.isOk());
  EXPECT_EQ(*first, std::optional<std::string>("one"));
}

TEST(SqliteRowLoop, PrepareErrorIsReturned) {
  Database db = sampleDatabase();
  Result<std::vector<int64_t>> rows = queryRows(db, "SELECT nope FROM t", column0Int);
  ASSERT_FALSE(rows.isOk());
  EXPECT_NE(rows.status().message().find("no such column"), std::string::npos)
      << rows.status().message();
}

TEST(SqliteRowLoop, StepTimeLimitStillApplies) {
  Database db = sampleDatabase();
  db.setStepTimeLimit(std::chrono::milliseconds(50));
  int calls = 0;
  const Status status = queryEachRow(
      db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
      [&](const Statement&) { ++calls; });
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.toString();
  EXPECT_NE(status.message().find("took longer than"), std::string::npos) << status.message();
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace moewb::storage::detail
