// The trace reader: opening and validating a trace file, and the row queries (meta, runs, tracks,
// steps, slices in a window, time bounds, expert load, counters, config changes, stats, and the
// streaming forEach*). Aggregating queries live in sqlite_trace_reader_analysis.cpp.
#include "sqlite_trace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "schema.h"
#include "trace_file_check.h"
#include "trace_open.h"

namespace moewb::storage::detail {

namespace {

constexpr const char* kRunsSql =
    "SELECT id, name, config_toml, backend, world_size, start_ns, start_unix_ns, end_ns, status, "
    "message FROM run ORDER BY id";
// ?1 = run, ?2 = first step.
constexpr const char* kStepsSql =
    "SELECT run, rank, step, start_ns, end_ns, loss, aux_loss, tokens, tokens_per_second, "
    "peak_bytes, grad_norm, lr FROM step WHERE run = ?1 AND step >= ?2 ORDER BY step, rank";
// ?1, ?2 = step range (inclusive).
constexpr const char* kExpertLoadSql =
    "SELECT step, layer, expert, rank, tokens, dropped, bias FROM expert_load "
    "WHERE step >= ?1 AND step <= ?2 ORDER BY step, layer, expert, rank";
constexpr const char* kAllSlicesSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth FROM slice s "
    "LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "ORDER BY s.start_ns, s.id";

RunRow runFromColumns(const Statement& s) {
  RunRow row;
  row.id = RunId(s.columnInt(0));
  row.name = s.columnText(1);
  row.configToml = s.columnText(2);
  row.backend = s.columnText(3);
  row.worldSize = int32_t(std::clamp<int64_t>(s.columnInt(4), 1, kMaxWorldSize));
  row.startNs = s.columnInt(5);
  row.startUnixNs = s.columnInt(6);
  row.endNs = s.columnInt(7);
  row.status = s.columnText(8);
  row.message = s.columnText(9);
  return row;
}

StepRow stepFromColumns(const Statement& s) {
  StepRow row;
  row.run = RunId(s.columnInt(0));
  row.rank = s.columnInt32(1);
  row.step = s.columnInt(2);
  row.startNs = s.columnInt(3);
  row.endNs = s.columnInt(4);
  row.loss = s.columnDouble(5);
  row.auxLoss = s.columnDouble(6);
  row.tokens = s.columnInt(7);
  row.tokensPerSecond = s.columnDouble(8);
  row.peakBytes = s.columnInt(9);
  row.gradNorm = s.columnDouble(10);
  row.lr = s.columnDouble(11);
  return row;
}

ConfigChangeRow configChangeFromColumns(const Statement& s) {
  ConfigChangeRow row;
  row.step = s.columnInt(0);
  row.tsNs = s.columnInt(1);
  row.key = s.columnText(2);
  row.oldValue = s.columnText(3);
  row.newValue = s.columnText(4);
  row.source = s.columnText(5);
  return row;
}

StatRow statFromColumns(const Statement& s) {
  StatRow row;
  row.name = s.columnText(0);
  row.severity = s.columnText(1);
  row.value = s.columnInt(2);
  row.description = s.columnText(3);
  return row;
}

CounterRow counterFromColumns(const Statement& s) {
  CounterRow row;
  row.track = TrackId(s.columnInt(0));
  row.name = s.columnText(1);
  row.tsNs = s.columnInt(2);
  row.value = s.columnDouble(3);
  return row;
}

}  // namespace

int64_t clampToInt64(double value, int64_t* clamped) {
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (value >= -kTwoTo63 && value < kTwoTo63) return int64_t(value);
  ++*clamped;
  if (value != value) return 0;
  return value > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t saturatingAdd(int64_t a, int64_t b, int64_t* clamped) {
  int64_t out = 0;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  if (clamped) ++*clamped;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t saturatingSub(int64_t a, int64_t b, int64_t* clamped) {
  int64_t out = 0;
  if (!__builtin_sub_overflow(a, b, &out)) return out;
  if (clamped) ++*clamped;
  return b > 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
}

ExpertLoadRow expertLoadFromColumns(const Statement& s) {
  ExpertLoadRow row;
  row.step = s.columnInt(0);
  row.layer = s.columnInt32(1);
  row.expert = s.columnInt32(2);
  row.rank = s.columnInt32(3);
  row.tokens = s.columnInt(4);
  row.dropped = s.columnInt(5);
  row.bias = s.columnDouble(6);
  return row;
}

SliceRow sliceFromColumns(const Statement& s) {
  SliceRow row;
  row.id = SliceId(s.columnInt(0));
  row.track = TrackId(s.columnInt(1));
  row.startNs = s.columnInt(2);
  row.durNs = s.columnInt(3);
  row.name = s.columnText(4);
  row.category = s.columnText(5);
  row.step = s.columnInt(6);
  row.layer = s.columnInt32(7);
  row.correlationId = s.columnInt(8);
  row.depth = s.columnInt32(9);
  return row;
}

TrackRow trackFromColumns(const Statement& s) {
  TrackRow row;
  row.id = TrackId(s.columnInt(0));
  row.name = s.columnText(1);
  row.kind = s.columnText(2);
  row.rank = s.columnInt32(3);
  row.threadId = s.columnInt(4);
  return row;
}

Result<std::unique_ptr<SqliteTraceReader>> SqliteTraceReader::open(const std::string& path,
                                                                   const ReaderOptions& options) {
  MOEWB_RETURN_IF_ERROR(checkTraceFileHeader(path));
  std::unique_ptr<SqliteTraceReader> reader(new SqliteTraceReader(path));
  MOEWB_ASSIGN_OR_RETURN(UntrustedTrace trace, openUntrustedTrace(path, options.queryTimeLimit));
  reader->m_db = std::move(trace.db);
  MOEWB_RETURN_IF_ERROR(reader->verifyIsTrace());
  MOEWB_RETURN_IF_ERROR(reader->checkRunWorldSizes());
  return reader;
}

void SqliteTraceReader::countBadValue(const std::string& name, int64_t count,
                                      const std::string& description) {
  if (count <= 0) return;
  for (StatRow& row : m_badValues) {
    if (row.name == name) {
      row.value = saturatingAdd(row.value, count);
      return;
    }
  }
  m_badValues.push_back({name, "error", count, description});
}

void SqliteTraceReader::countClamped(int64_t count) {
  countBadValue("values_clamped", count,
                "sums or time spans of values read from the file overflowed 64-bit integers and "
                "were clamped (the file may be damaged or hostile)");
}

Status SqliteTraceReader::checkRunWorldSizes() {
  // The first bad run and how many there are, in one row.
  return queryEachRow(
      m_db,
      "SELECT id, world_size, count(*) OVER () FROM run "
      "WHERE world_size NOT BETWEEN ?1 AND ?2 ORDER BY id LIMIT 1",
      [&](const Statement& s) {
        countBadValue("world_size_out_of_range", s.columnInt(2),
                      fmt::format("run {} has world_size {}; readers accept 1 to {} and read it "
                                  "as the nearest bound (the file may be damaged or hostile)",
                                  s.columnInt(0), s.columnText(1), kMaxWorldSize));
      },
      1, kMaxWorldSize);
}

Status SqliteTraceReader::verifyIsTrace() {
  MOEWB_ASSIGN_OR_RETURN(const bool hasMeta, tableExists(m_db, "meta"));
  const std::string notATrace =
      fmt::format("'{}' is an SQLite database but not a MoE Workbench trace", m_path);
  if (!hasMeta) return dataLoss(notATrace + " (it has no meta table)");
  Result<std::string> format = metaValue(kMetaFormat);
  if (!format.isOk()) {
    if (format.status().code() == StatusCode::kDataLoss) return format.status();
    return dataLoss(fmt::format("{} (its meta table cannot be read: {})", notATrace,
                                format.status().message()));
  }
  if (*format != kFormatName) {
    return dataLoss(
        fmt::format("{} (meta format is '{}', expected '{}')", notATrace, *format, kFormatName));
  }
  MOEWB_ASSIGN_OR_RETURN(const std::string versionText, metaValue(kMetaSchemaVersion));
  int version = 0;
  const char* end = versionText.data() + versionText.size();
  const auto [ptr, ec] = std::from_chars(versionText.data(), end, version);
  if (ec != std::errc() || ptr != end || version < 1) {
    return dataLoss(
        fmt::format("trace file '{}' has an unreadable schema_version '{}'", m_path, versionText));
  }
  if (version > kSchemaVersion) {
    return failedPrecondition(fmt::format(
        "trace file '{}' was written by a newer MoE Workbench (schema {}); this build reads up "
        "to {}",
        m_path, version, kSchemaVersion));
  }
  return verifyCoreTables();
}

// Every trace since schema 1 has these tables (the others are optional: GPU, parallel, swap,
// tuner rows arrived later and read as empty when absent). A missing one means a damaged file,
// which is refused here, naming the tables, instead of failing later in some query.
Status SqliteTraceReader::verifyCoreTables() {
  static const char* const kCoreTables[] = {"run",     "string", "track",      "slice",
                                            "counter", "step",   "expert_load"};
  std::string missing;
  for (const char* table : kCoreTables) {
    MOEWB_ASSIGN_OR_RETURN(const bool present, tableExists(m_db, table));
    if (present) continue;
    missing += (missing.empty() ? "" : ", ") + std::string(table);
  }
  if (missing.empty()) return Status::ok();
  return dataLoss(fmt::format(
      "trace file '{}' is damaged: it lacks the table(s) {} that every MoE Workbench trace has; "
      "accepted: a trace written whole by moewb (or repaired from a copy)",
      m_path, missing));
}

// The value of meta `key`, "" when the key is absent.
Result<std::string> SqliteTraceReader::metaValue(const char* key) {
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<std::string> value,
      queryFirstRow(m_db, "SELECT value FROM meta WHERE key = ?1", column0Text, key));
  return value.value_or(std::string());
}

Result<std::map<std::string, std::string>> SqliteTraceReader::meta() {
  std::map<std::string, std::string> out;
  MOEWB_RETURN_IF_ERROR(
      queryEachRow(m_db, "SELECT key, value FROM meta ORDER BY key",
                   [&](const Statement& s) { out[s.columnText(0)] = s.columnText(1); }));
  return out;
}

Result<std::vector<RunRow>> SqliteTraceReader::runs() {
  return queryRows(m_db, kRunsSql, runFromColumns);
}

Result<std::vector<TrackRow>> SqliteTraceReader::tracks() {
  return queryRows(m_db, "SELECT id, name, kind, rank, thread_id FROM track ORDER BY id",
                   trackFromColumns);
}

Result<std::vector<StepRow>> SqliteTraceReader::steps(RunId run, int64_t fromStep) {
  return queryRows(m_db, kStepsSql, stepFromColumns, run.value, fromStep);
}

Result<int64_t> SqliteTraceReader::maxSliceDurNs() {
  MOEWB_ASSIGN_OR_RETURN(const std::string fromMeta, metaValue(kMetaMaxSliceDurNs));
  int64_t value = 0;
  const char* end = fromMeta.data() + fromMeta.size();
  const auto [ptr, ec] = std::from_chars(fromMeta.data(), end, value);
  if (!fromMeta.empty() && ec == std::errc() && ptr == end) return value;
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> scanned,
      queryFirstRow(m_db, "SELECT coalesce(max(dur_ns), 0) FROM slice", column0Int));
  return scanned.value_or(0);
}

Result<std::vector<SliceRow>> SqliteTraceReader::slices(TimeWindow window,
                                                        std::optional<TrackId> track) {
  if (window.endNs <= window.startNs) return std::vector<SliceRow>{};
  return inReadTransaction<std::vector<SliceRow>>([&] { return slicesInSnapshot(window, track); });
}

Result<std::vector<SliceRow>> SqliteTraceReader::slicesInSnapshot(TimeWindow window,
                                                                  std::optional<TrackId> track) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t maxDurNs, maxSliceDurNs());
  const int64_t lowestStartNs = saturatingSub(window.startNs, maxDurNs);
  if (!track) {
    return queryRows(m_db, kSliceWindowSql, sliceFromColumns, lowestStartNs, window.endNs,
                     window.startNs);
  }
  return queryRows(m_db, kSliceWindowTrackSql, sliceFromColumns, lowestStartNs, window.endNs,
                   window.startNs, track->value);
}

Result<TimeWindow> SqliteTraceReader::timeBounds() {
  return inReadTransaction<TimeWindow>([&] { return timeBoundsInSnapshot(); });
}

// min(start) and max(start) are single index probes; the latest end is among the slices that
// start within maxSliceDur of the latest start.
Result<TimeWindow> SqliteTraceReader::timeBoundsInSnapshot() {
  MOEWB_ASSIGN_OR_RETURN(const std::optional<int64_t> firstStartNs,
                         queryFirstRow(m_db, "SELECT min(start_ns) FROM slice", column0IntOrNull));
  if (!firstStartNs) return TimeWindow{0, 0};
  MOEWB_ASSIGN_OR_RETURN(const std::optional<int64_t> lastStartNs,
                         queryFirstRow(m_db, "SELECT max(start_ns) FROM slice", column0Int));
  MOEWB_ASSIGN_OR_RETURN(const int64_t maxDurNs, maxSliceDurNs());
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> lastEndNs,
      queryFirstRow(m_db, "SELECT max(start_ns + dur_ns) FROM slice WHERE start_ns >= ?1",
                    column0Int, saturatingSub(lastStartNs.value_or(0), maxDurNs)));
  return TimeWindow{*firstStartNs, lastEndNs.value_or(0)};
}

Result<std::vector<ExpertLoadRow>> SqliteTraceReader::expertLoad(int64_t fromStep, int64_t toStep) {
  return queryRows(m_db, kExpertLoadSql, expertLoadFromColumns, fromStep, toStep);
}

Result<std::vector<CounterRow>> SqliteTraceReader::counters(TimeWindow window) {
  return queryRows(m_db, kCounterWindowSql, counterFromColumns, window.startNs, window.endNs);
}

Result<std::vector<ConfigChangeRow>> SqliteTraceReader::configChanges() {
  return queryRows(m_db,
                   "SELECT step, ts_ns, key, old_value, new_value, source "
                   "FROM config_change ORDER BY step, ts_ns, id",
                   configChangeFromColumns);
}

Result<std::vector<StatRow>> SqliteTraceReader::stats() {
  MOEWB_ASSIGN_OR_RETURN(
      std::vector<StatRow> rows,
      queryRows(m_db, "SELECT name, severity, value, description FROM stats ORDER BY name",
                statFromColumns));
  rows.insert(rows.end(), m_badValues.begin(), m_badValues.end());
  return rows;
}

Status SqliteTraceReader::forEachSlice(const std::function<bool(const SliceRow&)>& visit) {
  return queryEachRow(m_db, kAllSlicesSql,
                      [&](const Statement& s) { return visit(sliceFromColumns(s)); });
}

Status SqliteTraceReader::forEachCounter(const std::function<bool(const CounterRow&)>& visit) {
  return queryEachRow(m_db,
                      "SELECT c.track, coalesce(n.text, ''), c.ts_ns, c.value "
                      "FROM counter c LEFT JOIN string n ON n.id = c.name "
                      "ORDER BY c.track, c.ts_ns, c.id",
                      [&](const Statement& s) { return visit(counterFromColumns(s)); });
}

}  // namespace moewb::storage::detail
