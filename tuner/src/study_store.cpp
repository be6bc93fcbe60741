// StudyStore over SQLite (see study_store.h). Every SQLite call goes through checkSql, which turns
// a failure into a Status naming the call, the file and SQLite's message.
#include "moewb/tuner/study_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace moewb::tuner {
namespace {

constexpr const char* kFormat = "moewb-tuner-study";

const char* const kSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tuner_study(
  id INTEGER PRIMARY KEY CHECK (id = 1), config_path TEXT NOT NULL, config_toml TEXT NOT NULL,
  objective TEXT NOT NULL, budget TEXT NOT NULL, knobs TEXT NOT NULL, strategy TEXT NOT NULL,
  trial_steps INTEGER NOT NULL, gate_steps INTEGER NOT NULL, gate_loss_rel REAL NOT NULL,
  gate_grad_norm_rel REAL NOT NULL, started_at TEXT NOT NULL, git_commit TEXT NOT NULL,
  host TEXT NOT NULL);
CREATE TABLE tuner_trial(
  id INTEGER PRIMARY KEY, settings TEXT NOT NULL, rung INTEGER NOT NULL, steps INTEGER NOT NULL,
  step_time_ms REAL, tokens_per_s REAL, peak_bytes INTEGER, final_loss REAL,
  verdict TEXT NOT NULL CHECK (verdict IN ('ok','invalid','failed','precision_fail','pruned')),
  message TEXT NOT NULL, trace_path TEXT NOT NULL, started_at TEXT NOT NULL,
  ended_at TEXT NOT NULL, predicted_step_time_ms REAL, predicted_peak_bytes INTEGER,
  UNIQUE (settings, rung));
CREATE TABLE tuner_trial_step(
  trial_id INTEGER NOT NULL REFERENCES tuner_trial(id), step INTEGER NOT NULL,
  loss REAL NOT NULL, grad_norm REAL NOT NULL, step_ms REAL NOT NULL,
  PRIMARY KEY (trial_id, step));
)sql";

Status sqlError(sqlite3* db, const char* call, const std::string& path) {
  return internalError(std::string("SQLite ") + call + " on " + path + ": " +
                       (db ? sqlite3_errmsg(db) : "out of memory"));
}

#define MOEWB_SQL(db, path, call)                                                        \
  do {                                                                                   \
    int moewb_rc_ = (call);                                                              \
    if (moewb_rc_ != SQLITE_OK && moewb_rc_ != SQLITE_DONE && moewb_rc_ != SQLITE_ROW) { \
      return sqlError(db, #call, path);                                                  \
    }                                                                                    \
  } while (0)

// A prepared statement finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { m_rc = sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr); }
  ~Stmt() { sqlite3_finalize(m_stmt); }
  bool ok() const { return m_rc == SQLITE_OK; }
  sqlite3_stmt* get() const { return m_stmt; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(m_stmt, i, v.c_str(), int(v.size()), SQLITE_TRANSIENT);
  }
  void i64(int i, int64_t v) { sqlite3_bind_int64(m_stmt, i, v); }
  void real(int i, double v) { sqlite3_bind_double(m_stmt, i, v); }
  std::string col(int i) const {
    const unsigned char* t = sqlite3_column_text(m_stmt, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  sqlite3_stmt* m_stmt = nullptr;
  int m_rc = SQLITE_ERROR;
};

bool hasSqliteHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char header[16] = {};
  in.read(header, sizeof header);
  return in.gcount() == 16 && std::memcmp(header, "SQLite format 3", 16) == 0;
}

// "file:PATH?immutable=1" with the characters a URI reserves percent-encoded.
std::string immutableUri(const std::string& path) {
  std::string out = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x21 || c >= 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "?immutable=1";
}

}  // namespace

struct StudyStore::Db {
  sqlite3* handle = nullptr;
  ~Db() { sqlite3_close(handle); }
};

const char* verdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kInvalid:
      return "invalid";
    case Verdict::kFailed:
      return "failed";
    case Verdict::kPrecisionFail:
      return "precision_fail";
    case Verdict::kPruned:
      return "pruned";
  }
  return "ok";
}

Result<Verdict> parseVerdict(const std::string& name) {
  for (Verdict v : {Verdict::kOk, Verdict::kInvalid, Verdict::kFailed, Verdict::kPrecisionFail,
                    Verdict::kPruned}) {
    if (name == verdictName(v)) return v;
  }
  return dataLoss("unknown trial verdict '" + name + "'");
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

StudyStore::StudyStore(std::string path, std::unique_ptr<Db> db, StudyInfo info)
    : m_path(std::move(path)), m_db(std::move(db)), m_info(std::move(info)) {}
StudyStore::~StudyStore() = default;

namespace {

Status writeStudy(sqlite3* db, const std::string& path, const StudyInfo& s) {
  MOEWB_SQL(db, path, sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr));
  MOEWB_SQL(db, path, sqlite3_exec(db, kSchema, nullptr, nullptr, nullptr));
  Stmt meta(db, "INSERT INTO meta(key, value) VALUES (?, ?)");
  if (!meta.ok()) return sqlError(db, "prepare meta", path);
  const std::pair<const char*, std::string> rows[] = {
      {"format", kFormat},
      {"schema_version", std::to_string(kStudySchemaVersion)},
      {"tool_version", MOEWB_TOOL_VERSION},
      {"created_at", utcNow()}};
  for (const auto& [k, v] : rows) {
    meta.text(1, k);
    meta.text(2, v);
    MOEWB_SQL(db, path, sqlite3_step(meta.get()));
    sqlite3_reset(meta.get());
  }
  Stmt st(db, "INSERT INTO tuner_study VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st.ok()) return sqlError(db, "prepare tuner_study", path);
  st.text(1, s.configPath);
  st.text(2, s.configToml);
  st.text(3, s.objective);
  st.text(4, s.budget);
  st.text(5, s.knobs);
  st.text(6, s.strategy);
  st.i64(7, s.trialSteps);
  st.i64(8, s.gateSteps);
  st.real(9, s.gateLossRel);
  st.real(10, s.gateGradNormRel);
  st.text(11, s.startedAt);
  st.text(12, s.gitCommit);
  st.text(13, s.host);
  MOEWB_SQL(db, path, sqlite3_step(st.get()));
  MOEWB_SQL(db, path, sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr));
  return Status::ok();
}

// Reads and checks the meta rows and the study row; kDataLoss when the file is not a study.
Result<StudyInfo> readStudy(sqlite3* db, const std::string& path) {
  const std::string notStudy = path + " is not a moewb tuner study";
  Stmt quick(db, "PRAGMA quick_check");
  if (!quick.ok() || sqlite3_step(quick.get()) != SQLITE_ROW || quick.col(0) != "ok") {
    return dataLoss(path + " is damaged (SQLite integrity check failed: " +
                    std::string(sqlite3_errmsg(db)) + "); it was not modified");
  }
  Stmt meta(db, "SELECT key, value FROM meta WHERE key IN ('format', 'schema_version')");
  if (!meta.ok()) return dataLoss(notStudy + " (no meta table); it was not modified");
  std::string format, version;
  int rc;
  while ((rc = sqlite3_step(meta.get())) == SQLITE_ROW) {
    (meta.col(0) == "format" ? format : version) = meta.col(1);
  }
  if (rc != SQLITE_DONE) return dataLoss(path + " is damaged: " + sqlite3_errmsg(db));
  if (format != kFormat) {
    return dataLoss(notStudy + " (meta.format = '" + format + "', expected '" + kFormat +
                    "'); it was not modified");
  }
  if (version != "1" && version != std::to_string(kStudySchemaVersion)) {
    return invalidArgument(path + " is a study of schema version " + version +
                           "; this moewb reads versions 1 to " +
                           std::to_string(kStudySchemaVersion));
  }
  Stmt st(db,
          "SELECT config_path, config_toml, objective, budget, knobs, strategy, trial_steps, "
          "gate_steps, gate_loss_rel, gate_grad_norm_rel, started_at, git_commit, host "
          "FROM tuner_study WHERE id = 1");
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) {
    return dataLoss(notStudy + " (no tuner_study row); it was not modified");
  }
  StudyInfo s;
  s.configPath = st.col(0);
  s.configToml = st.col(1);
  s.objective = st.col(2);
  s.budget = st.col(3);
  s.knobs = st.col(4);
  s.strategy = st.col(5);
  s.trialSteps = sqlite3_column_int64(st.get(), 6);
  s.gateSteps = sqlite3_column_int64(st.get(), 7);
  s.gateLossRel = sqlite3_column_double(st.get(), 8);
  s.gateGradNormRel = sqlite3_column_double(st.get(), 9);
  s.startedAt = st.col(10);
  s.gitCommit = st.col(11);
  s.host = st.col(12);
  s.schemaVersion = std::stoi(version);
  Stmt device(db, "SELECT value FROM meta WHERE key = 'device'");
  if (device.ok() && sqlite3_step(device.get()) == SQLITE_ROW) s.device = device.col(0);
  return s;
}

// Version 1 -> 2: the predicted columns of tuner_trial (NULL for the trials already there), in
// one transaction.
Status migrateToV2(sqlite3* db, const std::string& path) {
  MOEWB_SQL(db, path, sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr));
  const char* sql =
      "ALTER TABLE tuner_trial ADD COLUMN predicted_step_time_ms REAL;"
      "ALTER TABLE tuner_trial ADD COLUMN predicted_peak_bytes INTEGER;"
      "UPDATE meta SET value = '2' WHERE key = 'schema_version';";
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    Status s = sqlError(db, "migrate to schema version 2", path);
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  MOEWB_SQL(db, path, sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr));
  return Status::ok();
}

// Opens `name` (a path, or a URI with SQLITE_OPEN_URI); messages name `path`.
Result<sqlite3*> openHandle(const std::string& path, int flags, const std::string& name = "") {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2((name.empty() ? path : name).c_str(), &db, flags, nullptr) != SQLITE_OK) {
    Status s = dataLoss("cannot open " + path +
                        " as a study: " + std::string(db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 2000);
  return db;
}

}  // namespace

Result<std::unique_ptr<StudyStore>> StudyStore::create(const std::string& path,
                                                       const StudyInfo& info) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || ec) {
    return alreadyExists(path + " exists; a new study needs a new file");
  }
  auto db = std::make_unique<Db>();
  MOEWB_ASSIGN_OR_RETURN(db->handle, openHandle(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  Status written = writeStudy(db->handle, path, info);
  if (!written.isOk()) {
    db.reset();
    std::filesystem::remove(path, ec);
    return written;
  }
  return std::unique_ptr<StudyStore>(new StudyStore(path, std::move(db), info));
}

Result<std::unique_ptr<StudyStore>> StudyStore::open(const std::string& path, bool writable) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return notFound(path + " does not exist or is not a regular file");
  }
  if (!hasSqliteHeader(path)) {
    return dataLoss(path +
                    " is not a SQLite file, so not a moewb tuner study; it was not modified");
  }
  StudyInfo info;
  std::error_code journalEc;
  const std::string journal = path + "-journal";
  if (std::filesystem::is_regular_file(journal, journalEc) &&
      std::filesystem::file_size(journal, journalEc) > 0) {
    // A study killed inside a commit leaves a hot journal: SQLite's own recovery (a read-write
    // open rolls the file back to its last commit) has to run before the file can be read.
    Db check;
    MOEWB_ASSIGN_OR_RETURN(check.handle, openHandle(path, SQLITE_OPEN_READWRITE));
    MOEWB_ASSIGN_OR_RETURN(info, readStudy(check.handle, path));
  } else {
    // Read-only and immutable first (no locks, no journal or -wal/-shm side files): a refused
    // file is never opened for writing.
    Db check;
    MOEWB_ASSIGN_OR_RETURN(
        check.handle, openHandle(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, immutableUri(path)));
    MOEWB_ASSIGN_OR_RETURN(info, readStudy(check.handle, path));
  }
  auto db = std::make_unique<Db>();
  MOEWB_ASSIGN_OR_RETURN(db->handle,
                         openHandle(path, writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY));
  if (writable && info.schemaVersion < 2) {
    MOEWB_RETURN_IF_ERROR(migrateToV2(db->handle, path));
    info.schemaVersion = 2;
  }
  return std::unique_ptr<StudyStore>(new StudyStore(path, std::move(db), std::move(info)));
}

Result<std::vector<TrialRecord>> StudyStore::trials() const {
  sqlite3* db = m_db->handle;
  const std::string predicted = m_info.schemaVersion >= 2
                                    ? "predicted_step_time_ms, predicted_peak_bytes"
                                    : "NULL, NULL";  // version 1: no predictions
  const std::string sql =
      "SELECT id, settings, rung, steps, step_time_ms, tokens_per_s, peak_bytes, final_loss, "
      "verdict, message, trace_path, started_at, ended_at, " +
      predicted + " FROM tuner_trial ORDER BY id";
  Stmt st(db, sql.c_str());
  if (!st.ok()) return sqlError(db, "prepare tuner_trial", m_path);
  std::vector<TrialRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    TrialRecord t;
    t.id = sqlite3_column_int64(st.get(), 0);
    t.settings = st.col(1);
    t.rung = sqlite3_column_int(st.get(), 2);
    t.steps = sqlite3_column_int64(st.get(), 3);
    t.stepTimeMs = sqlite3_column_double(st.get(), 4);
    t.tokensPerSecond = sqlite3_column_double(st.get(), 5);
    t.peakBytes = sqlite3_column_int64(st.get(), 6);
    t.finalLoss = sqlite3_column_double(st.get(), 7);
    MOEWB_ASSIGN_OR_RETURN(t.verdict, parseVerdict(st.col(8)));
    t.message = st.col(9);
    t.tracePath = st.col(10);
    t.startedAt = st.col(11);
    t.endedAt = st.col(12);
    t.predictedStepTimeMs = sqlite3_column_double(st.get(), 13);  // NULL reads 0
    t.predictedPeakBytes = sqlite3_column_int64(st.get(), 14);
    out.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return sqlError(db, "step tuner_trial", m_path);
  Stmt steps(db,
             "SELECT trial_id, loss, grad_norm, step_ms FROM tuner_trial_step "
             "ORDER BY trial_id, step");
  if (!steps.ok()) return sqlError(db, "prepare tuner_trial_step", m_path);
  size_t at = 0;
  while ((rc = sqlite3_step(steps.get())) == SQLITE_ROW) {
    const int64_t id = sqlite3_column_int64(steps.get(), 0);
    while (at < out.size() && out[at].id < id) ++at;
    if (at == out.size() || out[at].id != id) continue;
    out[at].losses.push_back(sqlite3_column_double(steps.get(), 1));
    out[at].gradNorms.push_back(sqlite3_column_double(steps.get(), 2));
    out[at].stepMs.push_back(sqlite3_column_double(steps.get(), 3));
  }
  if (rc != SQLITE_DONE) return sqlError(db, "step tuner_trial_step", m_path);
  return out;
}

Result<int64_t> StudyStore::addTrial(const TrialRecord& t) {
  sqlite3* db = m_db->handle;
  MOEWB_SQL(db, m_path, sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr));
  auto rollback = [&](Status s) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  };
  Stmt st(db,
          "INSERT INTO tuner_trial(settings, rung, steps, step_time_ms, tokens_per_s, "
          "peak_bytes, final_loss, verdict, message, trace_path, started_at, ended_at, "
          "predicted_step_time_ms, predicted_peak_bytes) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st.ok()) return rollback(sqlError(db, "prepare insert tuner_trial", m_path));
  st.text(1, t.settings);
  st.i64(2, t.rung);
  st.i64(3, t.steps);
  st.real(4, t.stepTimeMs);
  st.real(5, t.tokensPerSecond);
  st.i64(6, t.peakBytes);
  st.real(7, t.finalLoss);
  st.text(8, verdictName(t.verdict));
  st.text(9, t.message);
  st.text(10, t.tracePath);
  st.text(11, t.startedAt);
  st.text(12, t.endedAt);
  if (t.predictedStepTimeMs > 0) st.real(13, t.predictedStepTimeMs);  // unbound: NULL
  if (t.predictedPeakBytes > 0) st.i64(14, t.predictedPeakBytes);
  if (sqlite3_step(st.get()) != SQLITE_DONE) {
    return rollback(sqlError(db, "insert tuner_trial", m_path));
  }
  const int64_t id = sqlite3_last_insert_rowid(db);
  Stmt step(db, "INSERT INTO tuner_trial_step VALUES (?, ?, ?, ?, ?)");
  if (!step.ok()) return rollback(sqlError(db, "prepare insert tuner_trial_step", m_path));
  for (size_t i = 0; i < t.losses.size(); ++i) {
    step.i64(1, id);
    step.i64(2, int64_t(i));
    step.real(3, t.losses[i]);
    step.real(4, i < t.gradNorms.size() ? t.gradNorms[i] : 0.0);
    step.real(5, i < t.stepMs.size() ? t.stepMs[i] : 0.0);
    if (sqlite3_step(step.get()) != SQLITE_DONE) {
      return rollback(sqlError(db, "insert tuner_trial_step", m_path));
    }
    sqlite3_reset(step.get());
  }
  if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return rollback(sqlError(db, "COMMIT", m_path));
  }
  return id;
}

Status StudyStore::setDevice(const std::string& device) {
  sqlite3* db = m_db->handle;
  Stmt st(db, "INSERT OR REPLACE INTO meta(key, value) VALUES ('device', ?)");
  if (!st.ok()) return sqlError(db, "prepare meta device", m_path);
  st.text(1, device);
  MOEWB_SQL(db, m_path, sqlite3_step(st.get()));
  m_info.device = device;
  return Status::ok();
}

Status StudyStore::setVerdict(int64_t id, Verdict verdict, const std::string& message) {
  sqlite3* db = m_db->handle;
  Stmt st(db, "UPDATE tuner_trial SET verdict = ?, message = ? WHERE id = ?");
  if (!st.ok()) return sqlError(db, "prepare update tuner_trial", m_path);
  st.text(1, verdictName(verdict));
  st.text(2, message);
  st.i64(3, id);
  MOEWB_SQL(db, m_path, sqlite3_step(st.get()));
  if (sqlite3_changes(db) == 0) return notFound("no trial " + std::to_string(id) + " in " + m_path);
  return Status::ok();
}

}  // namespace moewb::tuner
