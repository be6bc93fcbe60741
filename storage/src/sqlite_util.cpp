// Error translation and the RAII wrappers declared in sqlite_util.h.
#include "sqlite_util.h"

#include <fmt/format.h>

#include <cstdlib>
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

// MOEWB_SQLITE_DEBUG set (to anything) appends the failed call and source line to messages.
bool debugDetails() {
  static const bool enabled = std::getenv("MOEWB_SQLITE_DEBUG") != nullptr;
  return enabled;
}

// What went wrong with trace `path`, in words for its user.
std::string plainSqliteMessage(int rc, const char* sqliteMessage, const std::string& path) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return fmt::format("trace file '{}' is corrupt or truncated ({})", path, sqliteMessage);
    case SQLITE_FULL:
      return fmt::format("trace file '{}' could not be written: the disk is full", path);
    case SQLITE_NOMEM:
      return fmt::format("trace file '{}' could not be read: out of memory", path);
    case SQLITE_TOOBIG:
      return fmt::format(
          "trace file '{}' holds a value larger than this build reads ({}); the file may be "
          "damaged or hostile",
          path, sqliteMessage);
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      return fmt::format("trace file '{}' could not be opened: {}", path, sqliteMessage);
    default:
      return fmt::format("trace file '{}' could not be accessed: {}", path, sqliteMessage);
  }
}

}  // namespace

StatusCode statusCodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_TOOBIG:
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
  std::string message = plainSqliteMessage(rc, sqliteMessage, path);
  if (debugDetails()) {
    message += fmt::format(" [{} failed at {}:{}, SQLite code {}]", call, baseName(file), line, rc);
  }
  return Status(statusCodeForSqlite(rc), std::move(message));
}

namespace {

// SQLite's progress handler: nonzero interrupts the running statement.
int stepClockHandler(void* context) {
  auto* clock = static_cast<Database::StepClock*>(context);
  if (std::chrono::steady_clock::now() - clock->start < clock->limit) return 0;
  clock->expired = true;
  return 1;
}

constexpr int kProgressInstructions = 4096;

}  // namespace

void Database::setStepTimeLimit(std::chrono::milliseconds limit) {
  if (limit.count() <= 0) {
    sqlite3_progress_handler(m_db, 0, nullptr, nullptr);
    m_clock.reset();
    return;
  }
  if (!m_clock) m_clock = std::make_unique<StepClock>();
  m_clock->limit = limit;
  m_clock->start = std::chrono::steady_clock::now();
  sqlite3_progress_handler(m_db, kProgressInstructions, stepClockHandler, m_clock.get());
}

void Database::startStepClock() {
  if (!m_clock) return;
  m_clock->start = std::chrono::steady_clock::now();
  m_clock->expired = false;
}

Status Database::stepTimeLimitError(int rc) const {
  if ((rc & 0xff) != SQLITE_INTERRUPT || !m_clock || !m_clock->expired) return Status::ok();
  const double seconds = std::chrono::duration<double>(m_clock->limit).count();
  return resourceExhausted(
      fmt::format("trace file '{}': the trace's query took longer than {:g} s; the file may be "
                  "damaged or hostile",
                  m_path, seconds));
}

Database::Database(Database&& other) noexcept
    : m_db(std::exchange(other.m_db, nullptr)),
      m_path(std::move(other.m_path)),
      m_clock(std::move(other.m_clock)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    (void)close();
    m_db = std::exchange(other.m_db, nullptr);
    m_path = std::move(other.m_path);
    m_clock = std::move(other.m_clock);
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

Result<Database> Database::open(const std::string& path, int flags, const std::string& uri) {
  configureSqliteOnce();
  Database db;
  db.m_path = path;
  const std::string& name = uri.empty() ? path : uri;
  if (!uri.empty()) flags |= SQLITE_OPEN_URI;
  const int rc = sqlite3_open_v2(name.c_str(), &db.m_db, flags, nullptr);
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
  startStepClock();
  const int rc = sqlite3_exec(m_db, sql, nullptr, nullptr, nullptr);
  if (Status timedOut = stepTimeLimitError(rc); !timedOut.isOk()) return timedOut;
  MOEWB_SQLITE_CHECK(m_db, m_path, rc);
  return Status::ok();
}

Status Database::close() {
  if (!m_db) return Status::ok();
  sqlite3* db = std::exchange(m_db, nullptr);
  if (m_clock) sqlite3_progress_handler(db, 0, nullptr, nullptr);  // before the clock goes away
  m_clock.reset();
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
  db.startStepClock();  // preparing may (re)read the schema, which runs under the limit too
  const int rc = sqlite3_prepare_v3(db.handle(), sql.data(), int(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &statement.m_stmt, nullptr);
  if (Status timedOut = db.stepTimeLimitError(rc); !timedOut.isOk()) return timedOut;
  MOEWB_SQLITE_CHECK(db.handle(), db.path(), rc);
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
  m_db->startStepClock();
  const int rc = sqlite3_step(m_stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status status = m_db->stepTimeLimitError(rc);
  if (status.isOk()) {
    status = sqliteError(m_db->handle(), rc, "sqlite3_step", __FILE__, __LINE__, m_db->path());
  }
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

Result<bool> tableExists(Database& db, const char* name) {
  MOEWB_ASSIGN_OR_RETURN(
      Statement query,
      Statement::prepare(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1"));
  MOEWB_RETURN_IF_ERROR(query.bindAll(std::string(name)));
  return query.step();
}

}  // namespace moewb::storage::detail
