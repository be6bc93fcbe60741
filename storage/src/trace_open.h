// Opening trace files that may come from anywhere (a colleague, a shared archive, an attacker):
// read-only, with SQLite's defensive settings, a time limit per query, and a fallback to
// `immutable=1` where the place cannot be written.
//
// Operations: openUntrustedTrace() opens and checks one file (cost: one read of sqlite_schema);
// hardenConnection() applies the defensive settings to any connection (O(1)); checkSchemaObjects()
// refuses schema objects a trace never holds (one scan of sqlite_schema); sqliteFileUri() builds
// the "file:" URI SQLite opens. Nothing here writes to the trace or creates files beside it,
// except the -shm/-wal that SQLite itself needs to read a WAL-mode trace in a writable place.
#pragma once

#include <chrono>
#include <string>

#include "moewb/base/status.h"
#include "sqlite_util.h"

namespace moewb::storage::detail {

// The longest string, blob or row a hardened connection reads (SQLITE_LIMIT_LENGTH); a longer
// one fails that query with kDataLoss ("holds a value larger than this build reads").
inline constexpr int kMaxValueBytes = 16 << 20;

// "file:<absolute path, %-escaped>?<query>" for sqlite3_open_v2 with SQLITE_OPEN_URI or ATTACH.
std::string sqliteFileUri(const std::string& path, const std::string& query);

// Applies the settings SQLite recommends for untrusted files (https://sqlite.org/security.html)
// to `db`: SQLITE_DBCONFIG_DEFENSIVE on, TRUSTED_SCHEMA off, triggers and extension loading off,
// cell_size_check on, and sqlite3_limit bounds on value length, expression depth, compound
// selects, VDBE program size, function arguments and attached databases (`maxAttached`).
// Errors: the SQLite error naming db.path().
Status hardenConnection(Database& db, int maxAttached);

// Ok when every view in db's main schema is one that schema v1 declares (schemaSql()), no trigger
// exists, and each of schema v1's table names that is present is an ordinary table (not a view
// or virtual table). Errors: kDataLoss naming db.path(), the object and what is accepted.
Status checkSchemaObjects(Database& db);

// An open, hardened, read-only connection to a trace file and the URI it was opened with.
struct UntrustedTrace {
  Database db;
  std::string uri;         // "file:...?mode=ro" or "file:...?mode=ro&immutable=1"
  bool immutable = false;  // opened with immutable=1 (the place cannot be written)
};

// Opens `path` read-only and hardened (hardenConnection, no attached databases), sets a busy
// timeout and the step time limit `stepTimeLimit` (0 = none), reads and checks its schema
// objects (checkSchemaObjects). When SQLite cannot read it because the place cannot be written
// (a WAL-mode file without its -shm in a read-only directory or mount), reopens it with
// immutable=1, but only when no -wal with data sits beside it (immutable would ignore that data).
// Does not check that the file is a MoE Workbench trace (the reader's verifyIsTrace does).
// Errors: kFailedPrecondition naming the file and its -wal when the -wal holds data that cannot
// be read in place; checkSchemaObjects' errors; other SQLite errors naming the file.
Result<UntrustedTrace> openUntrustedTrace(const std::string& path,
                                          std::chrono::milliseconds stepTimeLimit);

}  // namespace moewb::storage::detail
