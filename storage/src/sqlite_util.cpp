// Error translation and the RAII wrappers declared in sqlite_util.h.
#include "sqlite_util.h"

#include <fmt/format.h>

#include <mutex>
#include <utility>

namespace moewb::storage::detail {

namespace {
const char* baseName(const char* file) {
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}
}  // namespace

StatusCode statusCodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kDataLoss;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return StatusCode::kResourceExhausted;
    default:
      return StatusCode::kInternal;
  }
}

Status sqliteError(sqlite3* db, int rc, const char* call, const char* file, int line,
                   const std::string& path) {
  const char* sqliteMessage = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int primary = rc & 0xff;
  const char* what = (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
                         ? "is corrupt or truncated"
                         : "could not be accessed";
  return Status(statusCodeForSqlite(rc),
                fmt::format("trace file '{}' {}: {} failed at {}:{}: {} (SQLite code {})", path,
                            what, call, baseName(file), line, sqliteMessage, rc));
}

Database::Database(Database&& other) noexcept
    : m_db(std::exchange(other.m_db, nullptr)), m_path(std::move(other.m_path)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    (void)close();
    m_db = std::exchange(other.m_db, nullptr);
    m_path = std::move(other.m_path);
  }
  return *this;
}

Database::~Database() {
  (void)close();
}

void configureSqliteOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Memory statistics make every sqlite3_malloc/free take a global mutex (a few % of the
    // writer's time). SQLITE_MISUSE here means SQLite was already initialized by someone else:
    // then it keeps its defaults, which only costs speed.
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  });
}

Result<Database> Database::open(const std::string& path, int flags) {
  configureSqliteOnce();
  Database db;
  db.m_path = path;
  const int rc = sqlite3_open_v2(path.c_str(), &db.m_db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status status = sqliteError(db.m_db, rc, "sqlite3_open_v2", __FILE__, __LINE__, path);
    sqlite3_close(db.m_db);  // a failed open still allocates a handle
    db.m_db = nullptr;
    return status;
  }
  sqlite3_extended_result_codes(db.m_db, 1);
  return db;
}

Status Database::exec(const char* sql) {
  MOEWB_SQLITE_CHECK(m_db, m_path, sqlite3_exec(m_db, sql, nullptr, nullptr, nullptr));
  return Status::ok();
}

Status Database::close() {
  if (!m_db) return Status::ok();
  sqlite3* db = std::exchange(m_db, nullptr);
  const int rc = sqlite3_close(db);
  if (rc != SQLITE_OK) {
    Status status = sqliteError(db, rc, "sqlite3_close", __FILE__, __LINE__, m_path);
    sqlite3_close_v2(db);  // defers the close until the last statement is finalized
    return status;
  }
  return Status::ok();
}

Statement::Statement(Statement&& other) noexcept
    : m_stmt(std::exchange(other.m_stmt, nullptr)), m_db(other.m_db) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(m_stmt);
    m_stmt = std::exchange(other.m_stmt, nullptr);
    m_db = other.m_db;
  }
  return *this;
}

// sqlite3_finalize repeats the error of the last step, which step() already reported.
Statement::~Statement() {
  sqlite3_finalize(m_stmt);
}

Result<Statement> Statement::prepare(Database& db, std::string_view sql) {
  Statement statement;
  statement.m_db = &db;
  MOEWB_SQLITE_CHECK(db.handle(), db.path(),
                     sqlite3_prepare_v3(db.handle(), sql.data(), int(sql.size()),
                                        SQLITE_PREPARE_PERSISTENT, &statement.m_stmt, nullptr));
  return statement;
}

Status Statement::bindInt(int index, int64_t value) {
  MOEWB_SQLITE_CHECK(m_db->handle(), m_db->path(), sqlite3_bind_int64(m_stmt, index, value));
  return Status::ok();
}

Status Statement::bindDouble(int index, double value) {
  MOEWB_SQLITE_CHECK(m_db->handle(), m_db->path(), sqlite3_bind_double(m_stmt, index, value));
  return Status::ok();
}

Status Statement::bindText(int index, std::string_view value) {
  MOEWB_SQLITE_CHECK(
      m_db->handle(), m_db->path(),
      sqlite3_bind_text(m_stmt, index, value.data(), int(value.size()), SQLITE_TRANSIENT));
  return Status::ok();
}

Result<bool> Statement::step() {
  const int rc = sqlite3_step(m_stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status status = sqliteError(m_db->handle(), rc, "sqlite3_step", __FILE__, __LINE__, m_db->path());
  reset();
  return status;
}

Status Statement::run() {
  Result<bool> row = step();
  while (row.isOk() && row.value()) row = step();
  if (!row.isOk()) return row.status();
  reset();
  return Status::ok();
}

// sqlite3_reset's return value repeats the error of the previous sqlite3_step, which step()
// already reported, so it is not checked again here.
void Statement::reset() {
  sqlite3_reset(m_stmt);
  sqlite3_clear_bindings(m_stmt);
}

std::string Statement::columnText(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, column));
  if (!text) return {};
  return std::string(text, size_t(sqlite3_column_bytes(m_stmt, column)));
}

}  // namespace moewb::storage::detail
