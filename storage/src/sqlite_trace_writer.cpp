// The trace writer: file creation, the caller-side add* methods, and the writer thread that
// turns queued rows into SQLite inserts and commits (see sqlite_trace_writer.h for the design).
#include "sqlite_trace_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <utility>

#include "moewb/base/units.h"
#include "moewb/storage/run_liveness.h"
#include "schema.h"

namespace moewb::storage {

Result<std::unique_ptr<TraceWriter>> TraceWriter::create(const std::string& path,
                                                         const WriterOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(auto writer, detail::SqliteTraceWriter::create(path, options));
  return std::unique_ptr<TraceWriter>(std::move(writer));
}

namespace detail {

namespace {

namespace fs = std::filesystem;

constexpr int kWriterBusyTimeoutMs = 1000;
const char* const kSidecarSuffixes[] = {"-wal", "-shm", "-journal"};

void removeSidecars(const std::string& path) {
  std::error_code ignored;
  for (const char* suffix : kSidecarSuffixes) fs::remove(path + suffix, ignored);
}

// Creates `path` as a new empty file (atomically refusing an existing one unless overwrite).
Status createEmptyFile(const std::string& path, bool overwrite) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec) {
    return internalError(fmt::format("cannot create the directory '{}' for trace file '{}': {}",
                                     parent.string(), path, ec.message()));
  }
  if (fs::is_directory(path, ec)) {
    return invalidArgument(fmt::format("trace file '{}' is a directory", path));
  }
  if (overwrite) {
    fs::remove(path, ec);
    if (ec) {
      return internalError(fmt::format("cannot replace trace file '{}': {}", path, ec.message()));
    }
  }
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return alreadyExists(fmt::format(
          "trace file '{}' already exists; choose another path or allow overwriting it", path));
    }
    return internalError(
        fmt::format("cannot create trace file '{}': {}", path, std::strerror(errno)));
  }
  ::close(fd);
  // A -wal left by an unrelated earlier file would be replayed into the new database.
  removeSidecars(path);
  return Status::ok();
}

}  // namespace

SqliteTraceWriter::SqliteTraceWriter(std::string path, WriterOptions options)
    : m_path(std::move(path)),
      m_options(options),
      m_queue(size_t(std::max<int64_t>(1, options.maxQueuedOps))) {}

SqliteTraceWriter::~SqliteTraceWriter() {
  (void)close();
}

Result<std::unique_ptr<SqliteTraceWriter>> SqliteTraceWriter::create(const std::string& path,
                                                                     const WriterOptions& options) {
  MOEWB_RETURN_IF_ERROR(createEmptyFile(path, options.overwrite));
  std::unique_ptr<SqliteTraceWriter> writer(new SqliteTraceWriter(path, options));
  if (Status status = writer->openAndInitialize(); !status.isOk()) {
    writer->m_stmts = {};
    (void)writer->m_db.close();
    writer->m_closed = true;
    std::error_code ignored;
    fs::remove(path, ignored);
    removeSidecars(path);
    return status;
  }
  writer->m_thread = std::thread([w = writer.get()] { w->writerLoop(); });
  return writer;
}

Status SqliteTraceWriter::openAndInitialize() {
  MOEWB_ASSIGN_OR_RETURN(m_db, Database::open(m_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX));
  MOEWB_SQLITE_CHECK(m_db.handle(), m_path,
                     sqlite3_busy_timeout(m_db.handle(), kWriterBusyTimeoutMs));
  // No fsync while the file is set up (switch to WAL, schema, meta): until create() returns the
  // file holds nothing worth keeping, and the first checkpoint syncs the WAL before it copies.
  // This saves about 1 ms per trace file; from then on commits run with synchronous=NORMAL.
  MOEWB_RETURN_IF_ERROR(m_db.exec("PRAGMA synchronous=OFF"));
  {
    MOEWB_ASSIGN_OR_RETURN(Statement journal, Statement::prepare(m_db, "PRAGMA journal_mode=WAL"));
    MOEWB_ASSIGN_OR_RETURN(bool hasRow, journal.step());
    if (!hasRow || journal.columnText(0) != "wal") {
      return failedPrecondition(fmt::format(
          "trace file '{}': SQLite could not switch it to WAL mode (is the file system local?)",
          m_path));
    }
  }
  MOEWB_RETURN_IF_ERROR(m_db.exec("BEGIN"));
  MOEWB_RETURN_IF_ERROR(createSchema(m_db));
  MOEWB_RETURN_IF_ERROR(writeInitialMeta(m_db));
  MOEWB_RETURN_IF_ERROR(m_db.exec("COMMIT"));
  MOEWB_RETURN_IF_ERROR(m_db.exec("PRAGMA synchronous=NORMAL"));
  return prepareStatements();
}

namespace {
std::string multiRowSliceInsertSql(int rows) {
  std::string sql =
      "INSERT INTO slice(track, start_ns, dur_ns, name, category, step, layer, correlation_id, "
      "depth) VALUES ";
  for (int i = 0; i < rows; ++i) sql += i == 0 ? "(?,?,?,?,?,?,?,?,?)" : ",(?,?,?,?,?,?,?,?,?)";
  return sql;
}
}  // namespace

Status SqliteTraceWriter::prepareStatements() {
  for (size_t k = 0; k < std::size(m_stmts.insertSlices); ++k) {
    MOEWB_ASSIGN_OR_RETURN(m_stmts.insertSlices[k],
                           Statement::prepare(m_db, multiRowSliceInsertSql(2 << k)));
  }
  const std::pair<Statement*, const char*> statements[] = {
      {&m_stmts.insertRun,
       "INSERT INTO run(id, name, config_toml, backend, world_size, start_ns, start_unix_ns, "
       "end_ns, status, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"},
      {&m_stmts.finishRun, "UPDATE run SET status = ?2, message = ?3, end_ns = ?4 WHERE id = ?1"},
      {&m_stmts.insertTrack,
       "INSERT INTO track(id, name, kind, rank, thread_id) VALUES (?1, ?2, ?3, ?4, ?5)"},
      {&m_stmts.insertSlice,
       "INSERT INTO slice(track, start_ns, dur_ns, name, category, step, layer, correlation_id, "
       "depth) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
      {&m_stmts.insertCounter,
       "INSERT INTO counter(track, name, ts_ns, value) VALUES (?1, ?2, ?3, ?4)"},
      {&m_stmts.insertMemoryEvent,
       "INSERT INTO memory_event(track, ts_ns, step, kind, bytes, address, category, "
       "in_use_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
      {&m_stmts.insertExpertLoad,
       "INSERT INTO expert_load(step, layer, expert, rank, tokens, dropped, bias) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&m_stmts.insertA2aTraffic,
       "INSERT INTO a2a_traffic(step, layer, src_rank, dst_rank, bytes, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      {&m_stmts.insertCollective,
       "INSERT INTO collective(track, start_ns, dur_ns, step, layer, rank, op, comm_group, phase, "
       "seq, bytes_sent, bytes_received, peers, ok) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"},
      {&m_stmts.insertConfigChange,
       "INSERT INTO config_change(run, step, ts_ns, key, old_value, new_value, source) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&m_stmts.upsertStat,
       "INSERT INTO stats(name, severity, value, description) VALUES (?1, ?2, ?3, ?4) "
       "ON CONFLICT(name) DO UPDATE SET severity = excluded.severity, value = excluded.value, "
       "description = excluded.description"},
      {&m_stmts.upsertStep,
       "INSERT OR REPLACE INTO step(run, rank, step, start_ns, end_ns, loss, aux_loss, tokens, "
       "tokens_per_second, peak_bytes, grad_norm, lr) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"},
      {&m_stmts.upsertMeta, "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)"},
      {&m_stmts.insertString, "INSERT INTO string(text) VALUES (?1)"},
      {&m_stmts.begin, "BEGIN"},
      {&m_stmts.commit, "COMMIT"},
      {&m_stmts.rollback, "ROLLBACK"},
  };
  for (const auto& [statement, sql] : statements) {
    MOEWB_ASSIGN_OR_RETURN(*statement, Statement::prepare(m_db, sql));
  }
  MOEWB_RETURN_IF_ERROR(prepareSwapStatements());
  return prepareGpuStatements();
}

// ---- caller side -------------------------------------------------------------------------

RunId SqliteTraceWriter::addRun(const RunRow& run) {
  RunRow row = run;
  row.id = RunId(m_nextRunId.fetch_add(1));
  if (row.status.empty()) row.status = "running";
  const RunId id = row.id;
  push(std::make_unique<RunRow>(std::move(row)));
  return id;
}

void SqliteTraceWriter::finishRun(RunId run, const std::string& status, const std::string& message,
                                  int64_t endNs) {
  push(FinishRunOp{run, status, message, endNs});
}

TrackId SqliteTraceWriter::addTrack(const TrackRow& track) {
  TrackRow row = track;
  row.id = TrackId(m_nextTrackId.fetch_add(1));
  const TrackId id = row.id;
  push(std::move(row));
  return id;
}

void SqliteTraceWriter::addSlice(const SliceRow& slice) {
  push(slice);
}
void SqliteTraceWriter::addCounter(const CounterRow& counter) {
  push(counter);
}
void SqliteTraceWriter::addMemoryEvent(const MemoryEventRow& event) {
  push(event);
}
void SqliteTraceWriter::addExpertLoad(const ExpertLoadRow& load) {
  push(load);
}
void SqliteTraceWriter::addA2aTraffic(const A2aTrafficRow& traffic) {
  push(std::make_unique<A2aTrafficRow>(traffic));
}
void SqliteTraceWriter::addCollective(const CollectiveRow& collective) {
  push(std::make_unique<CollectiveRow>(collective));
}
void SqliteTraceWriter::addConfigChange(RunId run, const ConfigChangeRow& change) {
  push(std::make_unique<ConfigChangeOp>(ConfigChangeOp{run, change}));
}
void SqliteTraceWriter::addStat(const StatRow& stat) {
  push(stat);
}
void SqliteTraceWriter::addStep(const StepRow& step) {
  push(step);
}
void SqliteTraceWriter::setMeta(const std::string& key, const std::string& value) {
  push(MetaOp{key, value});
}
void SqliteTraceWriter::addBackPressureWait(int64_t ns) {
  m_upstreamWaits.fetch_add(1);
  m_upstreamWaitNs.fetch_add(std::max<int64_t>(0, ns));
}

Status SqliteTraceWriter::flush() {
  const uint64_t ticket = m_queue.pushSync(/*commit=*/true);
  if (ticket != 0) m_queue.waitDone(ticket);
  return currentError();
}

void SqliteTraceWriter::waitApplied() {
  const uint64_t ticket = m_queue.pushSync(/*commit=*/false);
  if (ticket != 0) m_queue.waitDone(ticket);
}

Status SqliteTraceWriter::close() {
  std::lock_guard lock(m_closeMutex);
  if (m_closed) return currentError();
  m_closed = true;
  m_queue.close();
  if (m_thread.joinable()) m_thread.join();
  if (Status status = checkpointAndCloseDatabase(); !status.isOk()) recordError(status);
  return currentError();
}

Status SqliteTraceWriter::checkpointAndCloseDatabase() {
  m_stmts = {};
  if (!m_db.handle()) return Status::ok();
  const int rc = sqlite3_wal_checkpoint_v2(m_db.handle(), nullptr, SQLITE_CHECKPOINT_TRUNCATE,
                                           nullptr, nullptr);
  // SQLITE_BUSY: a reader still uses the WAL; the data is safe there and is checkpointed later.
  if (rc != SQLITE_BUSY) {
    MOEWB_SQLITE_CHECK(m_db.handle(), m_path, rc);
    // A finished trace in rollback-journal mode needs no -wal/-shm beside it, so readers can open
    // it where nothing can be written (a read-only mount, an archive). SQLite refuses the switch
    // (SQLITE_BUSY, at once) while any other connection has the file open, such as a GUI
    // following the run: the file then stays in WAL mode, fully checkpointed, and that reader
    // keeps working undisturbed. Either way the data is complete, so a failure is not an error.
    (void)sqlite3_exec(m_db.handle(), "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  }
  return m_db.close();
}

void SqliteTraceWriter::recordError(const Status& status) {
  std::lock_guard lock(m_errorMutex);
  if (m_firstError.isOk()) m_firstError = status;
}

Status SqliteTraceWriter::currentError() const {
  std::lock_guard lock(m_errorMutex);
  if (m_firstError.isOk()) return Status::ok();
  const int64_t dropped = m_droppedRows.load();
  if (dropped == 0) return m_firstError;
  return Status(m_firstError.code(), fmt::format("{} ({} rows dropped after this error)",
                                                 m_firstError.message(), dropped));
}

// ---- writer thread -----------------------------------------------------------------------

void SqliteTraceWriter::writerLoop() {
  std::vector<WriterQueue::Chunk> batch;
  while (m_queue.popAll(batch, std::chrono::milliseconds(kHeartbeatPeriodMs))) {
    if (batch.empty()) {  // idle: a heartbeat-only commit, so readers see the writer alive
      if (m_failed) continue;
      Status status = beginIfNeeded();
      if (status.isOk()) status = commit();
      if (!status.isOk()) fail(status);
      continue;
    }
    for (WriterQueue::Chunk& chunk : batch) {
      for (WriteOp& op : chunk) applyOp(op);
    }
    m_queue.recycle(batch);
  }
  if (!m_failed) {
    if (Status status = commit(); !status.isOk()) fail(status);
  }
  m_queue.markAllDone();
}

void SqliteTraceWriter::applyOp(WriteOp& op) {
  if (auto* slice = std::get_if<SliceRow>(&op)) {
    if (m_failed) {
      m_droppedRows.fetch_add(1);
      return;
    }
    Status status = beginIfNeeded();
    if (status.isOk()) status = applyRow(*slice);
    if (!status.isOk()) {
      m_droppedRows.fetch_add(1);
      fail(status);
      return;
    }
    ++m_pendingRows;
    if (m_pendingRows >= m_options.maxBatchRows) {
      if (Status committed = commit(); !committed.isOk()) fail(committed);
    }
    return;
  }
  if (m_bufferedSlices > 0 && !m_failed) {
    if (Status status = flushSlices(); !status.isOk()) fail(status);
  }
  if (const auto* sync = std::get_if<SyncOp>(&op)) {
    if (sync->commit && !m_failed) {
      if (Status status = commit(); !status.isOk()) fail(status);
    }
    m_queue.markDone(sync->ticket);
    return;
  }
  if (m_failed) {
    m_droppedRows.fetch_add(1);
    return;
  }
  Status status = beginIfNeeded();
  if (status.isOk()) status = std::visit([this](const auto& row) { return applyRow(row); }, op);
  if (!status.isOk()) {
    m_droppedRows.fetch_add(1);
    fail(status);
    return;
  }
  ++m_pendingRows;
  if (std::holds_alternative<StepRow>(op) || m_pendingRows >= m_options.maxBatchRows) {
    if (Status committed = commit(); !committed.isOk()) fail(committed);
  }
}

void SqliteTraceWriter::fail(const Status& status) {
  recordError(status);
  m_failed = true;
  m_bufferedSlices = 0;  // counted in m_pendingRows; dropped with the transaction
  m_pendingNextStep.clear();
  if (m_inTransaction) {
    // The rolled-back rows are lost too; a failing ROLLBACK leaves nothing more to report.
    (void)m_stmts.rollback.run();
    m_droppedRows.fetch_add(m_pendingRows);
    m_inTransaction = false;
    m_pendingRows = 0;
  }
}

Status SqliteTraceWriter::beginIfNeeded() {
  if (m_inTransaction) return Status::ok();
  MOEWB_RETURN_IF_ERROR(m_stmts.begin.run());
  m_inTransaction = true;
  return Status::ok();
}

Status SqliteTraceWriter::commit() {
  if (!m_inTransaction) return Status::ok();
  MOEWB_RETURN_IF_ERROR(flushSlices());
  if (m_maxSliceDurDirty) {
    MOEWB_RETURN_IF_ERROR(
        m_stmts.upsertMeta.bindAll(kMetaMaxSliceDurNs, std::to_string(m_maxSliceDurNs)));
    MOEWB_RETURN_IF_ERROR(m_stmts.upsertMeta.run());
    m_maxSliceDurDirty = false;
  }
  if (m_maxSwapDurDirty) {
    MOEWB_RETURN_IF_ERROR(
        m_stmts.upsertMeta.bindAll(kMetaMaxSwapDurNs, std::to_string(m_maxSwapDurNs)));
    MOEWB_RETURN_IF_ERROR(m_stmts.upsertMeta.run());
    m_maxSwapDurDirty = false;
  }
  MOEWB_RETURN_IF_ERROR(writeHeartbeatAndWaits());
  MOEWB_RETURN_IF_ERROR(m_stmts.commit.run());
  m_inTransaction = false;
  m_pendingRows = 0;
  noteCommittedSteps();
  return Status::ok();
}

Status SqliteTraceWriter::writeHeartbeatAndWaits() {
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertMeta.bindAll(
      kMetaHeartbeatUnixMs, std::to_string(unixNowNs() / kNsPerMs)));
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertMeta.run());
  const int64_t waits = m_queue.waits() + m_upstreamWaits.load();
  if (waits == m_waitsWritten) return Status::ok();
  const int64_t waitMs = (m_queue.waitNs() + m_upstreamWaitNs.load()) / kNsPerMs;
  const StatRow rows[] = {
      {"trace_writer_waits", "info", waits,
       "times the run waited for the trace writer to catch up (its queues are bounded); total "
       "in trace_writer_wait_ms"},
      {"trace_writer_wait_ms", "info", waitMs,
       "milliseconds the run spent waiting for the trace writer (trace_writer_waits)"},
  };
  for (const StatRow& row : rows) MOEWB_RETURN_IF_ERROR(applyRow(row));
  m_waitsWritten = waits;
  return Status::ok();
}

void SqliteTraceWriter::noteCommittedSteps() {
  for (const auto& [rank, next] : m_pendingNextStep) {
    int64_t& committed = m_rankNextStep[rank];
    committed = std::max(committed, next);
  }
  m_pendingNextStep.clear();
  if (m_rankNextStep.empty()) return;
  int64_t steps = INT64_MAX;
  for (const auto& [rank, next] : m_rankNextStep) steps = std::min(steps, next);
  m_committedSteps.store(steps);
}

Result<int64_t> SqliteTraceWriter::internString(const std::string& text) {
  if (auto it = m_stringIds.find(text); it != m_stringIds.end()) return it->second;
  MOEWB_RETURN_IF_ERROR(m_stmts.insertString.bindText(1, text));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertString.run());
  const int64_t id = sqlite3_last_insert_rowid(m_db.handle());
  m_stringIds.emplace(text, id);
  return id;
}

Status SqliteTraceWriter::applyRow(const RunRow& row) {
  MOEWB_RETURN_IF_ERROR(
      m_stmts.insertRun.bindAll(row.id.value, row.name, row.configToml, row.backend, row.worldSize,
                                row.startNs, row.startUnixNs, row.endNs, row.status, row.message));
  return m_stmts.insertRun.run();
}

Status SqliteTraceWriter::applyRow(const FinishRunOp& op) {
  MOEWB_RETURN_IF_ERROR(m_stmts.finishRun.bindAll(op.run.value, op.status, op.message, op.endNs));
  return m_stmts.finishRun.run();
}

Status SqliteTraceWriter::applyRow(const TrackRow& row) {
  m_rankNextStep.try_emplace(row.rank, 0);  // a rank counts for committedSteps from its track on
  MOEWB_RETURN_IF_ERROR(
      m_stmts.insertTrack.bindAll(row.id.value, row.name, row.kind, row.rank, row.threadId));
  return m_stmts.insertTrack.run();
}

// Buffers the slice (see m_sliceValues); a full buffer is inserted at once.
Status SqliteTraceWriter::applyRow(const SliceRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t nameId, internString(row.name));
  MOEWB_ASSIGN_OR_RETURN(const int64_t categoryId, internString(row.category));
  int64_t* values = m_sliceValues + m_bufferedSlices * kSliceColumns;
  values[0] = row.track.value;
  values[1] = row.startNs;
  values[2] = row.durNs;
  values[3] = nameId;
  values[4] = categoryId;
  values[5] = row.step;
  values[6] = row.layer;
  values[7] = row.correlationId;
  values[8] = row.depth;
  if (row.durNs > m_maxSliceDurNs) {
    m_maxSliceDurNs = row.durNs;
    m_maxSliceDurDirty = true;
  }
  if (++m_bufferedSlices == kSliceBatchRows) return flushSlices();
  return Status::ok();
}

// Binds `rows` slices' values to `statement` (rows * kSliceColumns parameters) and runs it.
Status SqliteTraceWriter::insertSliceValues(Statement& statement, const int64_t* values,
                                            int rows) {
  sqlite3_stmt* stmt = statement.handle();
  const int count = rows * kSliceColumns;
  int rc = SQLITE_OK;
  for (int i = 0; i < count && rc == SQLITE_OK; ++i) {
    rc = sqlite3_bind_int64(stmt, i + 1, values[i]);
  }
  if (rc != SQLITE_OK) return statement.error(rc, "sqlite3_bind_int64", __FILE__, __LINE__);
  rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) {
    Status status = statement.error(rc, "sqlite3_step", __FILE__, __LINE__);
    statement.resetKeepBindings();
    return status;
  }
  statement.resetKeepBindings();
  return Status::ok();
}

Status SqliteTraceWriter::flushSlices() {
  const int rows = m_bufferedSlices;
  m_bufferedSlices = 0;
  // A partial buffer goes in as power-of-two chunks, largest first (rows stay in order).
  int done = 0;
  for (int k = int(std::size(m_stmts.insertSlices)) - 1; k >= 0; --k) {
    const int chunk = 2 << k;
    if (rows - done >= chunk) {
      MOEWB_RETURN_IF_ERROR(insertSliceValues(m_stmts.insertSlices[k],
                                              m_sliceValues + done * kSliceColumns, chunk));
      done += chunk;
    }
  }
  if (done < rows) {
    MOEWB_RETURN_IF_ERROR(
        insertSliceValues(m_stmts.insertSlice, m_sliceValues + done * kSliceColumns, 1));
  }
  return Status::ok();
}

Status SqliteTraceWriter::applyRow(const CounterRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t nameId, internString(row.name));
  MOEWB_RETURN_IF_ERROR(
      m_stmts.insertCounter.bindAll(row.track.value, nameId, row.tsNs, row.value));
  return m_stmts.insertCounter.run();
}

Status SqliteTraceWriter::applyRow(const MemoryEventRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t categoryId, internString(row.category));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertMemoryEvent.bindAll(
      row.track.value, row.tsNs, row.step, row.isAllocation ? "alloc" : "free", row.bytes,
      row.address, categoryId, row.inUseBytes));
  return m_stmts.insertMemoryEvent.run();
}

Status SqliteTraceWriter::applyRow(const ExpertLoadRow& row) {
  MOEWB_RETURN_IF_ERROR(m_stmts.insertExpertLoad.bindAll(row.step, row.layer, row.expert, row.rank,
                                                         row.tokens, row.dropped, row.bias));
  return m_stmts.insertExpertLoad.run();
}

Status SqliteTraceWriter::applyRow(const A2aTrafficRow& row) {
  MOEWB_RETURN_IF_ERROR(m_stmts.insertA2aTraffic.bindAll(row.step, row.layer, row.srcRank,
                                                         row.dstRank, row.bytes, row.phase));
  return m_stmts.insertA2aTraffic.run();
}

Status SqliteTraceWriter::applyRow(const CollectiveRow& row) {
  MOEWB_RETURN_IF_ERROR(m_stmts.insertCollective.bindAll(
      row.track.value, row.startNs, row.durNs, row.step, row.layer, row.rank, row.op,
      row.commGroup, row.phase, row.seq, row.bytesSent, row.bytesReceived, row.peers,
      int64_t(row.ok ? 1 : 0)));
  return m_stmts.insertCollective.run();
}

Status SqliteTraceWriter::applyRow(const ConfigChangeOp& op) {
  const ConfigChangeRow& row = op.row;
  MOEWB_RETURN_IF_ERROR(m_stmts.insertConfigChange.bindAll(
      op.run.value, row.step, row.tsNs, row.key, row.oldValue, row.newValue, row.source));
  return m_stmts.insertConfigChange.run();
}

Status SqliteTraceWriter::applyRow(const StatRow& row) {
  MOEWB_RETURN_IF_ERROR(
      m_stmts.upsertStat.bindAll(row.name, row.severity, row.value, row.description));
  return m_stmts.upsertStat.run();
}

Status SqliteTraceWriter::applyRow(const StepRow& row) {
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertStep.bindAll(
      row.run.value, row.rank, row.step, row.startNs, row.endNs, row.loss, row.auxLoss, row.tokens,
      row.tokensPerSecond, row.peakBytes, row.gradNorm, row.lr));
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertStep.run());
  int64_t& next = m_pendingNextStep[row.rank];
  next = std::max(next, row.step + 1);
  return Status::ok();
}

Status SqliteTraceWriter::applyRow(const MetaOp& op) {
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertMeta.bindAll(op.key, op.value));
  return m_stmts.upsertMeta.run();
}

// Sync ops are handled in applyOp before dispatch; this overload only completes the visitor.
Status SqliteTraceWriter::applyRow(const SyncOp&) {
  return Status::ok();
}

}  // namespace detail
}  // namespace moewb::storage
