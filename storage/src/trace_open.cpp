// Hardened read-only opening of trace files (see trace_open.h). The schema objects a trace may
// hold are read from schemaSql() itself, so a view added to schema v1 is accepted without a
// second list to keep in step (a test checks the names found against the schema's objects).
#include "trace_open.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <string_view>
#include <utility>

#include "schema.h"

namespace moewb::storage::detail {

namespace {

namespace fs = std::filesystem;

constexpr int kReaderBusyTimeoutMs = 5000;

std::string lowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// The names (lower case) of the tables and of the views that schemaSql() creates.
struct DeclaredNames {
  std::set<std::string> tables;
  std::set<std::string> views;
};

const DeclaredNames& declaredNames() {
  static const DeclaredNames names = [] {
    DeclaredNames out;
    const std::string_view sql = schemaSql();
    // The DDL writes "CREATE TABLE name (" and "CREATE VIEW name AS", one space apart.
    for (const auto& [prefix, names] : {std::pair<std::string_view, std::set<std::string>*>{
                                            "CREATE TABLE ", &out.tables},
                                        {"CREATE VIEW ", &out.views}}) {
      for (size_t at = sql.find(prefix); at != std::string_view::npos;
           at = sql.find(prefix, at + 1)) {
        const size_t begin = at + prefix.size();
        size_t end = begin;
        while (end < sql.size() && (std::isalnum(static_cast<unsigned char>(sql[end])) ||
                                    sql[end] == '_')) {
          ++end;
        }
        names->insert(lowerCase(std::string(sql.substr(begin, end - begin))));
      }
    }
    return out;
  }();
  return names;
}

std::string joinNames(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Status setDbConfig(Database& db, int option, int value) {
  MOEWB_SQLITE_CHECK(db.handle(), db.path(),
                     sqlite3_db_config(db.handle(), option, value, static_cast<int*>(nullptr)));
  return Status::ok();
}

// A primary SQLite code that means "SQLite had to write beside the file and could not".
bool placeNotWritable(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN;
}

bool walHoldsData(const std::string& path) {
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(path + "-wal", ec);
  return !ec && bytes > 0;
}

// Opens `uri` hardened, with the busy timeout and step time limit; *probeRc receives the SQLite
// code of the first read of the schema (SQLITE_OK when it worked, then the result is ok too).
Result<Database> openHardened(const std::string& path, const std::string& uri,
                              std::chrono::milliseconds stepTimeLimit, int* probeRc) {
  *probeRc = SQLITE_OK;
  MOEWB_ASSIGN_OR_RETURN(Database db,
                         Database::open(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, uri));
  MOEWB_RETURN_IF_ERROR(hardenConnection(db, /*maxAttached=*/0));
  MOEWB_SQLITE_CHECK(db.handle(), path, sqlite3_busy_timeout(db.handle(), kReaderBusyTimeoutMs));
  db.setStepTimeLimit(stepTimeLimit);
  db.startStepClock();
  const int rc =
      sqlite3_exec(db.handle(), "SELECT count(*) FROM main.sqlite_master", nullptr, nullptr, nullptr);
  *probeRc = rc;
  if (Status timedOut = db.stepTimeLimitError(rc); !timedOut.isOk()) return timedOut;
  MOEWB_SQLITE_CHECK(db.handle(), path, rc);
  return db;
}

}  // namespace

std::string sqliteFileUri(const std::string& path, const std::string& query) {
  std::error_code ec;
  const std::string absolute = fs::absolute(path, ec).string();
  std::string uri = "file:";
  for (unsigned char c : ec ? path : absolute) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      uri.push_back(char(c));
    } else {
      uri += fmt::format("%{:02X}", c);
    }
  }
  return query.empty() ? uri : uri + "?" + query;
}

Status hardenConnection(Database& db, int maxAttached) {
  MOEWB_RETURN_IF_ERROR(setDbConfig(db, SQLITE_DBCONFIG_DEFENSIVE, 1));
  MOEWB_RETURN_IF_ERROR(setDbConfig(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0));
  MOEWB_RETURN_IF_ERROR(setDbConfig(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0));
  MOEWB_RETURN_IF_ERROR(setDbConfig(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0));
  sqlite3* h = db.handle();
  sqlite3_limit(h, SQLITE_LIMIT_LENGTH, kMaxValueBytes);
  sqlite3_limit(h, SQLITE_LIMIT_SQL_LENGTH, 1 << 20);
  sqlite3_limit(h, SQLITE_LIMIT_EXPR_DEPTH, 100);
  sqlite3_limit(h, SQLITE_LIMIT_COMPOUND_SELECT, 64);
  sqlite3_limit(h, SQLITE_LIMIT_VDBE_OP, 250'000);
  sqlite3_limit(h, SQLITE_LIMIT_FUNCTION_ARG, 32);
  sqlite3_limit(h, SQLITE_LIMIT_ATTACHED, maxAttached);
  sqlite3_limit(h, SQLITE_LIMIT_TRIGGER_DEPTH, 1);
  sqlite3_limit(h, SQLITE_LIMIT_WORKER_THREADS, 0);
  return db.exec("PRAGMA cell_size_check = ON");
}

Status checkSchemaObjects(Database& db) {
  const DeclaredNames& declared = declaredNames();
  auto refuse = [&](const std::string& what) {
    return dataLoss(fmt::format(
        "trace file '{}' is not read: {}; a trace holds only the tables and views of its schema "
        "(views: {}), so the file was altered and may be damaged or hostile",
        db.path(), what, joinNames(declared.views)));
  };
  return queryEachRow(
      db, "SELECT type, name, tbl_name, coalesce(sql, '') FROM main.sqlite_master",
      [&](const Statement& objects) -> Status {
        const std::string type = objects.columnText(0), name = objects.columnText(1);
        const std::string lowerName = lowerCase(name);
        const bool ourTable = declared.tables.contains(lowerName);
        if (type == "trigger") {
          return refuse(
              fmt::format("it holds a trigger '{}' on '{}'", name, objects.columnText(2)));
        }
        if (type == "view" && ourTable) {
          return refuse(fmt::format("'{}' is a view, where a trace has a table", name));
        }
        if (type == "view" && !declared.views.contains(lowerName)) {
          return refuse(fmt::format("it holds a view '{}' that its schema does not declare", name));
        }
        if (type == "table" && ourTable &&
            lowerCase(objects.columnText(3)).starts_with("create virtual")) {
          return refuse(fmt::format("'{}' is a virtual table, where a trace has a table", name));
        }
        return Status::ok();
      });
}

Result<UntrustedTrace> openUntrustedTrace(const std::string& path,
                                          std::chrono::milliseconds stepTimeLimit) {
  UntrustedTrace trace;
  trace.uri = sqliteFileUri(path, "mode=ro");
  int probeRc = SQLITE_OK;
  Result<Database> opened = openHardened(path, trace.uri, stepTimeLimit, &probeRc);
  if (!opened.isOk() && placeNotWritable(probeRc)) {
    // A WAL-mode file whose -shm SQLite may not create here. Immutable mode reads the main file
    // alone, which holds everything when the -wal is absent or empty.
    if (walHoldsData(path)) {
      return failedPrecondition(fmt::format(
          "trace file '{}' cannot be read here: '{}-wal' beside it holds changes that were never "
          "merged into it (its run is live or did not finish), and reading them needs a "
          "directory that can be written; copy both files to a writable directory and open the "
          "copy",
          path, path));
    }
    trace.uri = sqliteFileUri(path, "mode=ro&immutable=1");
    trace.immutable = true;
    opened = openHardened(path, trace.uri, stepTimeLimit, &probeRc);
  }
  if (!opened.isOk()) return opened.status();
  trace.db = std::move(opened).value();
  MOEWB_RETURN_IF_ERROR(checkSchemaObjects(trace.db));
  return trace;
}

}  // namespace moewb::storage::detail
