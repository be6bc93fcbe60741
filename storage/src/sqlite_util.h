// A thin RAII layer over the SQLite C API, used by the trace writer and reader.
//
// Holds: MOEWB_SQLITE_CHECK, which turns a failed sqlite3_* call into a Status whose message says
// in plain words which trace file failed and how (the call and source line are appended only when
// the environment sets MOEWB_SQLITE_DEBUG); Database, an owned connection with an optional time
// limit per statement step; Statement, an owned prepared statement with checked bind/step and
// unchecked column reads; and the row loop that every reader query goes through, written once:
// forEachRow, collectRows and firstRow over a bound statement, and queryEachRow, queryRows and
// queryFirstRow that also prepare and bind it (prepareBound).
// Costs: preparing a statement parses SQL (microseconds); binding and reading columns are O(1);
// step() does the real work; a step time limit costs one clock read per 4096 VM instructions;
// the row loop adds nothing per row to the step and the caller's callback (templates, inlined).
// A Database or Statement is used by one thread at a time.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::storage::detail {

// The StatusCode for an SQLite result code: kDataLoss for a corrupt file or one that is not a
// database, kResourceExhausted for a full disk or no memory, kInternal otherwise.
StatusCode statusCodeForSqlite(int rc);

// Process-wide SQLite settings that must precede sqlite3_initialize (memory statistics off).
// Called by Database::open; later calls do nothing.
void configureSqliteOnce();

// The Status for a failed SQLite call `call` made at file:line on the connection `db` (may be
// null) of the trace at `path`. The message names `path` and says what went wrong in plain words
// (with sqlite3_errmsg); `call`, `file` and `line` are appended only under MOEWB_SQLITE_DEBUG.
Status sqliteError(sqlite3* db, int rc, const char* call, const char* file, int line,
                   const std::string& path);

// A copy of `value` narrowed to int32, saturating at the int32 bounds (values read from files
// must not wrap around into plausible ranks or sizes).
inline int32_t saturateToInt32(int64_t value) {
  if (value > INT32_MAX) return INT32_MAX;
  if (value < INT32_MIN) return INT32_MIN;
  return int32_t(value);
}

}  // namespace moewb::storage::detail

// Evaluates an sqlite3_* call; returns a Status (see sqliteError) from the enclosing function
// unless it gave SQLITE_OK, SQLITE_ROW or SQLITE_DONE.
#define MOEWB_SQLITE_CHECK(db, path, call)                                                  \
  do {                                                                                      \
    const int moewb_sqlite_rc_ = (call);                                                    \
    if (moewb_sqlite_rc_ != SQLITE_OK && moewb_sqlite_rc_ != SQLITE_ROW &&                  \
        moewb_sqlite_rc_ != SQLITE_DONE) {                                                  \
      return ::moewb::storage::detail::sqliteError((db), moewb_sqlite_rc_, #call, __FILE__, \
                                                   __LINE__, (path));                       \
    }                                                                                       \
  } while (0)

namespace moewb::storage::detail {

// An owned SQLite connection plus the path it was opened with (for error messages).
class Database {
 public:
  Database() = default;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  ~Database();

  // Opens `path` with sqlite3_open_v2 `flags`; with a non-empty `uri` ("file:...?..."), opens
  // that instead (adding SQLITE_OPEN_URI) while messages still name `path`.
  // Errors: the SQLite error naming the file.
  static Result<Database> open(const std::string& path, int flags, const std::string& uri = "");

  // From now on every Statement::prepare, step and exec on this connection that runs longer than
  // `limit` (counted from the start of that call) is interrupted and fails with
  // kResourceExhausted: "the trace's query took longer than N s; the file may be damaged or
  // hostile". A zero limit removes it. Errors: none (the connection must be open).
  void setStepTimeLimit(std::chrono::milliseconds limit);
  // Restarts the step clock (Statement::prepare, step and exec call this before they run).
  void startStepClock();
  // The Status for `rc` when it is SQLITE_INTERRUPT caused by the step time limit; ok otherwise.
  Status stepTimeLimitError(int rc) const;

  // Runs one or more SQL statements that return no rows (sqlite3_exec).
  Status exec(const char* sql);
  // Closes the connection (sqlite3_close); later calls do nothing. Errors: the SQLite error.
  Status close();

  sqlite3* handle() const { return m_db; }
  const std::string& path() const { return m_path; }

  // The step time limit's state (see setStepTimeLimit).
  struct StepClock {
    std::chrono::steady_clock::duration limit{};
    std::chrono::steady_clock::time_point start{};
    bool expired = false;  // the last interrupt came from this clock
  };

 private:
  sqlite3* m_db = nullptr;
  std::string m_path;
  std::unique_ptr<StepClock> m_clock;  // heap: SQLite's progress handler keeps its address
};

// An owned prepared statement. Bind indexes are 1-based, column indexes 0-based (as in SQLite).
class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  // Prepares `sql` on `db` (which must outlive the statement). Errors: the SQLite error.
  static Result<Statement> prepare(Database& db, std::string_view sql);

  Status bindInt(int index, int64_t value);
  Status bindDouble(int index, double value);
  Status bindText(int index, std::string_view value);
  // Binds `args` to parameters 1..n in order: integers, floating point values and strings.
  template <typename... Args>
  Status bindAll(const Args&... args);

  // Advances: true when a row is ready, false when done. Errors: the SQLite error.
  Result<bool> step();
  // Steps to completion (for statements that return no rows) and resets for the next use.
  Status run();
  // Resets the statement for the next use and clears its bindings.
  void reset();

  int64_t columnInt(int column) const { return sqlite3_column_int64(m_stmt, column); }
  double columnDouble(int column) const { return sqlite3_column_double(m_stmt, column); }
  bool columnIsNull(int column) const { return sqlite3_column_type(m_stmt, column) == SQLITE_NULL; }
  // Integer column narrowed to int32 with saturation (see saturateToInt32).
  int32_t columnInt32(int column) const { return saturateToInt32(columnInt(column)); }
  std::string columnText(int column) const;

  bool isPrepared() const { return m_stmt != nullptr; }
  // The raw statement, for hot paths that bind with sqlite3_bind_* directly (writer thread).
  sqlite3_stmt* handle() const { return m_stmt; }
  // Resets the statement for the next use but keeps its bindings (they are all rebound).
  void resetKeepBindings() { sqlite3_reset(m_stmt); }
  // The SQLite error of this statement's connection for a failed call `call` (see sqliteError).
  Status error(int rc, const char* call, const char* file, int line) const {
    return sqliteError(m_db->handle(), rc, call, file, line, m_db->path());
  }

 private:
  template <typename T>
  Status bindValue(int index, const T& value);

  sqlite3_stmt* m_stmt = nullptr;
  Database* m_db = nullptr;
};

template <typename T>
Status Statement::bindValue(int index, const T& value) {
  if constexpr (std::is_integral_v<T>) {
    return bindInt(index, int64_t(value));
  } else if constexpr (std::is_floating_point_v<T>) {
    return bindDouble(index, double(value));
  } else {
    return bindText(index, std::string_view(value));
  }
}

template <typename... Args>
Status Statement::bindAll(const Args&... args) {
  Status status;
  [[maybe_unused]] int index = 0;  // unused when there is nothing to bind
  ((status = status.isOk() ? bindValue(++index, args) : status), ...);
  return status;
}

// Whether the main schema of `db` has a table named `name`. Cost: one probe of sqlite_master.
Result<bool> tableExists(Database& db, const char* name);

// ---- The row loop ----
// Every loop over a statement's rows: step, read the row's columns, keep or visit the result.
// The callbacks get the statement as `const Statement&` (column reads only: they must not step,
// bind or reset it). Rows come in the statement's order. Each step runs under the connection's
// step time limit (see Database::setStepTimeLimit), as step() alone does, and a failed step is
// returned with step()'s message. The statement is reset with its bindings cleared when these
// return, on every path, so a cached statement can be bound again at once. Cost: one step per row
// plus the callback; the loops themselves allocate nothing (collectRows grows its vector).

// The type a row map returns when given the statement.
template <typename Map>
using RowOf = std::remove_cvref_t<std::invoke_result_t<Map&, const Statement&>>;

namespace row_loop {
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
// firstRow's value: the map's optional as it is, any other type wrapped in one.
template <typename Row>
using FirstRow = std::conditional_t<IsOptional<Row>::value, Row, std::optional<Row>>;
}  // namespace row_loop

// Steps the prepared, bound `statement` to its end, calling fn(statement) for each row. fn
// returns void (every row is visited), bool (false stops after that row; the result is still
// ok) or Status (a failure stops the loop and is returned as it is).
// Errors: the first failed step (SQLite error, or the step time limit), or fn's failure.
template <typename Fn>
Status forEachRow(Statement& statement, Fn&& fn) {
  using Returned = std::invoke_result_t<Fn&, const Statement&>;
  static_assert(std::is_void_v<Returned> || std::is_same_v<Returned, bool> ||
                    std::is_same_v<Returned, Status>,
                "forEachRow's fn returns void, bool or Status");
  const Statement& row = statement;
  while (true) {
    Result<bool> hasRow = statement.step();
    if (!hasRow.isOk()) return hasRow.status();  // step() has reset the statement
    if (!*hasRow) break;
    if constexpr (std::is_void_v<Returned>) {
      fn(row);
    } else if constexpr (std::is_same_v<Returned, bool>) {
      if (!fn(row)) break;
    } else {
      Status status = fn(row);
      if (!status.isOk()) {
        statement.reset();
        return status;
      }
    }
  }
  statement.reset();
  return Status::ok();
}

// Steps `statement` to its end and returns map(statement) of each row, in order.
// Errors: the first failed step; rows read before it are dropped.
template <typename Map>
Result<std::vector<RowOf<Map>>> collectRows(Statement& statement, Map&& map) {
  std::vector<RowOf<Map>> rows;
  MOEWB_RETURN_IF_ERROR(forEachRow(statement, [&](const Statement& s) { rows.push_back(map(s)); }));
  return rows;
}

// map(statement) of the statement's first row, nullopt when it has none (the rest is not
// stepped). A map that returns std::optional<T> gives that optional as it is, so "no row" and
// "a row the map declines" (e.g. a NULL aggregate) read alike. Errors: the failed step.
template <typename Map>
Result<row_loop::FirstRow<RowOf<Map>>> firstRow(Statement& statement, Map&& map) {
  row_loop::FirstRow<RowOf<Map>> out;
  MOEWB_RETURN_IF_ERROR(forEachRow(statement, [&](const Statement& s) {
    out = map(s);
    return false;
  }));
  return out;
}

// Row maps for one-column queries: column 0 as an integer, as text, and as an integer that is
// nullopt when NULL (e.g. min() over no rows).
inline int64_t column0Int(const Statement& s) {
  return s.columnInt(0);
}
inline std::string column0Text(const Statement& s) {
  return s.columnText(0);
}
inline std::optional<int64_t> column0IntOrNull(const Statement& s) {
  return s.columnIsNull(0) ? std::nullopt : std::optional<int64_t>(s.columnInt(0));
}

// `sql` prepared on `db` with `binds` bound to ?1..?n (as Statement::bindAll).
// Errors: the SQLite error of prepare or of a bind.
template <typename... Binds>
Result<Statement> prepareBound(Database& db, std::string_view sql, const Binds&... binds) {
  MOEWB_ASSIGN_OR_RETURN(Statement statement, Statement::prepare(db, sql));
  MOEWB_RETURN_IF_ERROR(statement.bindAll(binds...));
  return statement;
}

// forEachRow, collectRows and firstRow on prepareBound(db, sql, binds...); the statement is
// finalized on return. Errors: those of prepareBound, then those of the loop.
template <typename Fn, typename... Binds>
Status queryEachRow(Database& db, std::string_view sql, Fn&& fn, const Binds&... binds) {
  MOEWB_ASSIGN_OR_RETURN(Statement statement, prepareBound(db, sql, binds...));
  return forEachRow(statement, std::forward<Fn>(fn));
}

template <typename Map, typename... Binds>
Result<std::vector<RowOf<Map>>> queryRows(Database& db, std::string_view sql, Map&& map,
                                          const Binds&... binds) {
  MOEWB_ASSIGN_OR_RETURN(Statement statement, prepareBound(db, sql, binds...));
  return collectRows(statement, std::forward<Map>(map));
}

template <typename Map, typename... Binds>
Result<row_loop::FirstRow<RowOf<Map>>> queryFirstRow(Database& db, std::string_view sql, Map&& map,
                                                     const Binds&... binds) {
  MOEWB_ASSIGN_OR_RETURN(Statement statement, prepareBound(db, sql, binds...));
  return firstRow(statement, std::forward<Map>(map));
}

}  // namespace moewb::storage::detail
