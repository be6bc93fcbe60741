// The reader's swap queries (tables swap_plan, swap_plan_layer, swap_plan_tensor, swap_event,
// swap_step; see docs/TRACE-FORMAT.md): copies in a time window, the per-step watermarks, the
// plans with their profiles, and a per-(rank, layer) summary.
// Costs: swapEvents is one range of swap_event(start_ns) over [window.start - longest copy,
// window.end), the longest copy being the meta value max_swap_dur_ns (a scan of swap_event only
// for files without it); swapSteps one scan of swap_step; swapPlans a scan of swap_plan plus one
// primary-key range of swap_plan_layer and swap_plan_tensor per plan; swapLayerSummary one range
// of swap_event(step, rank) grouped by (rank, layer) in SQL.
// Files from before swap (no swap tables, or the empty placeholder swap_event of early v1 files
// with other columns) read as "no swap": every query returns nothing. Values are untrusted: a
// copy whose end precedes its start is read as ending at its start (stats row
// swap_times_reversed); negative bytes, stalls and counts are read as 0 (swap_values_negative);
// sums that overflow int64 are clamped (values_clamped); unknown op names and modes are data.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "schema.h"
#include "sqlite_trace_reader.h"

namespace moewb::storage {
namespace detail {

namespace {

// Bits of SqliteTraceReader::swapTables.
enum SwapTable : int {
  kSwapEventTable = 1,
  kSwapStepTable = 2,
  kSwapPlanTables = 4,  // swap_plan, swap_plan_layer and swap_plan_tensor together
  kSwapPlanSettings = 8,  // swap_plan has free_lag_layers, ops and min_bytes
  kSwapPlanRecompute = 16,  // swap_plan has recompute_ops and recompute_ms_source, and
                            // swap_plan_layer recompute_ms
};

struct TableColumns {
  const char* table;
  const char* columns;  // SQL list of the column names this build reads
  int count;
};

constexpr TableColumns kSwapEventColumns = {
    "swap_event",
    "'id', 'run', 'step', 'rank', 'layer', 'op', 'bytes', 'to_host', 'start_ns', 'end_ns', "
    "'needed_ns', 'stall_ns', 'simulated'",
    13};
constexpr TableColumns kSwapStepColumns = {
    "swap_step",
    "'run', 'step', 'rank', 'hbm_peak_bytes', 'hbm_peak_no_swap_bytes', 'pinned_peak_bytes', "
    "'pinned_capacity_bytes', 'offloads', 'reloads', 'late_reloads', 'swapped_bytes', "
    "'copy_ms', 'exposed_ms', 'simulated'",
    14};
constexpr TableColumns kSwapPlanColumns = {
    "swap_plan",
    "'id', 'run', 'step', 'rank', 'mode', 'hbm_target_bytes', 'pinned_budget_bytes', "
    "'prefetch_layers', 'd2h_gbps', 'h2d_gbps', 'bidir_gbps', 'fixed_bytes', 'turn_ms', "
    "'predicted_peak_bytes', 'predicted_peak_no_swap_bytes', 'predicted_exposed_ms', 'summary'",
    17};
// Added to swap_plan later; files without them read 1, '' and 0 (see SwapPlanRow).
constexpr TableColumns kSwapPlanSettingsColumns = {
    "swap_plan", "'free_lag_layers', 'ops', 'min_bytes'", 3};
// Added later still, together; files without them read '' and no recompute times (unknown).
constexpr TableColumns kSwapPlanRecomputeColumns = {
    "swap_plan", "'recompute_ops', 'recompute_ms_source'", 2};
constexpr TableColumns kSwapPlanLayerRecomputeColumns = {"swap_plan_layer", "'recompute_ms'", 1};
constexpr TableColumns kSwapPlanLayerColumns = {
    "swap_plan_layer", "'plan', 'layer', 'forward_ms', 'backward_ms', 'other_bytes'", 5};
constexpr TableColumns kSwapPlanTensorColumns = {
    "swap_plan_tensor", "'plan', 'idx', 'layer', 'op', 'bytes', 'swapped', 'reason'", 7};

// ?1 = lowest start to scan, ?2 = window end (exclusive), ?3 = window start.
constexpr const char* kSwapWindowSql =
    "SELECT id, step, rank, layer, op, bytes, to_host, start_ns, end_ns, needed_ns, stall_ns, "
    "simulated FROM swap_event WHERE start_ns >= ?1 AND start_ns < ?2 "
    "AND (start_ns >= ?3 OR end_ns > ?3) ORDER BY start_ns, id";
// The same for one rank (?4).
constexpr const char* kSwapWindowRankSql =
    "SELECT id, step, rank, layer, op, bytes, to_host, start_ns, end_ns, needed_ns, stall_ns, "
    "simulated FROM swap_event WHERE start_ns >= ?1 AND start_ns < ?2 "
    "AND (start_ns >= ?3 OR end_ns > ?3) AND rank = ?4 ORDER BY start_ns, id";

// ?1, ?2 = step range (inclusive). Per (rank, layer): offloaded and reloaded bytes, offloads,
// reloads, late reloads (reloads with a stall), offload waits (offloads with a stall), copy ns,
// stall ns and worst stall ns of both directions (reload stalls and offload waits are both
// compute waits), offload wait ns, reversed copies, negative values.
constexpr const char* kSwapLayerSummarySql =
    "SELECT rank, layer, "
    "total(CASE WHEN to_host != 0 THEN max(bytes, 0) ELSE 0 END), "
    "total(CASE WHEN to_host = 0 THEN max(bytes, 0) ELSE 0 END), "
    "sum(to_host != 0), sum(to_host = 0), sum(to_host = 0 AND stall_ns > 0), "
    "sum(to_host != 0 AND stall_ns > 0), total(max(end_ns - start_ns, 0)), "
    "total(max(stall_ns, 0)), max(max(stall_ns, 0)), "
    "total(CASE WHEN to_host != 0 THEN max(stall_ns, 0) ELSE 0 END), sum(end_ns < start_ns), "
    "sum(bytes < 0 OR stall_ns < 0) "
    "FROM swap_event WHERE step BETWEEN ?1 AND ?2 GROUP BY rank, layer ORDER BY rank, layer";

constexpr double kNsPerMsDouble = 1e6;

constexpr const char* kReversedDescription =
    "swap copies whose end precedes their start, read as ending at their start (the file may be "
    "damaged or hostile)";
constexpr const char* kNegativeDescription =
    "swap rows with negative bytes, stalls or counts, read as 0 (the file may be damaged or "
    "hostile)";

constexpr const char* kSwapStepsSql =
    "SELECT step, rank, hbm_peak_bytes, hbm_peak_no_swap_bytes, pinned_peak_bytes, "
    "pinned_capacity_bytes, offloads, reloads, late_reloads, swapped_bytes, copy_ms, exposed_ms, "
    "simulated FROM swap_step ORDER BY step, rank, run";

// A kSwapStepsSql row with negative values read as 0, each counted in *negative.
SwapStepRow swapStepFromColumns(const Statement& s, int64_t* negative) {
  auto nonNegative = [&](int64_t value) {
    if (value >= 0) return value;
    ++*negative;
    return int64_t{0};
  };
  SwapStepRow row;
  row.step = s.columnInt(0);
  row.rank = s.columnInt32(1);
  row.hbmPeakBytes = nonNegative(s.columnInt(2));
  row.hbmPeakNoSwapBytes = nonNegative(s.columnInt(3));
  row.pinnedPeakBytes = nonNegative(s.columnInt(4));
  row.pinnedCapacityBytes = nonNegative(s.columnInt(5));
  row.offloads = saturateToInt32(nonNegative(s.columnInt(6)));
  row.reloads = saturateToInt32(nonNegative(s.columnInt(7)));
  row.lateReloads = saturateToInt32(nonNegative(s.columnInt(8)));
  row.swappedBytes = nonNegative(s.columnInt(9));
  row.copyMs = std::max(s.columnDouble(10), 0.0);
  row.exposedMs = std::max(s.columnDouble(11), 0.0);
  if (s.columnDouble(10) < 0 || s.columnDouble(11) < 0) ++*negative;
  row.simulated = s.columnInt(12) != 0;
  return row;
}

// A swap_plan row as swapPlansInSnapshot selects it (the settings, then the recompute columns
// last), without its layers and tensors.
SwapPlanRow swapPlanFromColumns(const Statement& s) {
  SwapPlanRow p;
  p.id = s.columnInt(0);
  p.step = s.columnInt(1);
  p.rank = s.columnInt32(2);
  p.mode = s.columnText(3);
  p.hbmTargetBytes = s.columnInt(4);
  p.pinnedBudgetBytes = s.columnInt(5);
  p.prefetchLayers = s.columnInt32(6);
  p.d2hGbps = s.columnDouble(7);
  p.h2dGbps = s.columnDouble(8);
  p.bidirGbps = s.columnDouble(9);
  p.fixedBytes = s.columnInt(10);
  p.turnMs = s.columnDouble(11);
  p.predictedPeakBytes = s.columnInt(12);
  p.predictedPeakNoSwapBytes = s.columnInt(13);
  p.predictedExposedMs = s.columnDouble(14);
  p.summary = s.columnText(15);
  p.freeLagLayers = s.columnInt32(16);
  p.ops = s.columnText(17);
  p.minBytes = s.columnInt(18);
  p.recomputeOps = s.columnText(19);
  p.recomputeMsSource = s.columnText(20);
  return p;
}

// Whether `schema`.`wanted.table` has every column of `wanted`.
Result<bool> hasColumns(Database& db, const TableColumns& wanted, const std::string& schema) {
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> columns,
      queryFirstRow(db,
                    fmt::format("SELECT count(*) FROM pragma_table_info(?1, ?2) WHERE name IN ({})",
                                wanted.columns),
                    column0Int, std::string(wanted.table), schema));
  return columns == wanted.count;
}

}  // namespace

Result<bool> swapTableReadable(Database& db, const std::string& table,
                               const std::string& schema) {
  for (const TableColumns* t : {&kSwapEventColumns, &kSwapStepColumns, &kSwapPlanColumns,
                                &kSwapPlanLayerColumns, &kSwapPlanTensorColumns}) {
    if (table == t->table) return hasColumns(db, *t, schema);
  }
  return false;
}

Result<bool> swapHasAddedColumns(Database& db, SwapAddedColumns columns,
                                 const std::string& schema) {
  switch (columns) {
    case SwapAddedColumns::kPlanSettings: return hasColumns(db, kSwapPlanSettingsColumns, schema);
    case SwapAddedColumns::kRecompute: {
      MOEWB_ASSIGN_OR_RETURN(const bool plan, hasColumns(db, kSwapPlanRecomputeColumns, schema));
      if (!plan) return false;
      return hasColumns(db, kSwapPlanLayerRecomputeColumns, schema);
    }
  }
  return false;
}

Result<int> SqliteTraceReader::swapTables() {
  if (m_swapTables >= 0) return m_swapTables;
  int tables = 0;
  MOEWB_ASSIGN_OR_RETURN(const bool events, swapTableReadable(m_db, "swap_event"));
  MOEWB_ASSIGN_OR_RETURN(const bool steps, swapTableReadable(m_db, "swap_step"));
  MOEWB_ASSIGN_OR_RETURN(const bool plans, swapTableReadable(m_db, "swap_plan"));
  MOEWB_ASSIGN_OR_RETURN(const bool layers, swapTableReadable(m_db, "swap_plan_layer"));
  MOEWB_ASSIGN_OR_RETURN(const bool tensors, swapTableReadable(m_db, "swap_plan_tensor"));
  if (events) tables |= kSwapEventTable;
  if (steps) tables |= kSwapStepTable;
  if (plans && layers && tensors) tables |= kSwapPlanTables;
  if (plans) {
    MOEWB_ASSIGN_OR_RETURN(const bool settings,
                           swapHasAddedColumns(m_db, SwapAddedColumns::kPlanSettings));
    if (settings) tables |= kSwapPlanSettings;
  }
  if (plans && layers) {
    MOEWB_ASSIGN_OR_RETURN(const bool recompute,
                           swapHasAddedColumns(m_db, SwapAddedColumns::kRecompute));
    if (recompute) tables |= kSwapPlanRecompute;
  }
  m_swapTables = tables;
  return tables;
}

Result<int64_t> SqliteTraceReader::maxSwapDurNs() {
  MOEWB_ASSIGN_OR_RETURN(const std::string fromMeta, metaValue(kMetaMaxSwapDurNs));
  int64_t value = 0;
  const char* end = fromMeta.data() + fromMeta.size();
  const auto [ptr, ec] = std::from_chars(fromMeta.data(), end, value);
  if (!fromMeta.empty() && ec == std::errc() && ptr == end) return std::max<int64_t>(value, 0);
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> scanned,
      queryFirstRow(m_db, "SELECT coalesce(max(end_ns - start_ns), 0) FROM swap_event",
                    column0Int));
  return std::max<int64_t>(scanned.value_or(0), 0);
}

void SqliteTraceReader::repairSwapEvent(SwapEventRow& row) {
  if (row.endNs < row.startNs) {
    countBadValue("swap_times_reversed", 1,
                  kReversedDescription);
    row.endNs = row.startNs;
  }
  if (row.bytes < 0 || row.stallNs < 0) {
    countBadValue("swap_values_negative", 1,
                  kNegativeDescription);
    row.bytes = std::max<int64_t>(row.bytes, 0);
    row.stallNs = std::max<int64_t>(row.stallNs, 0);
  }
}

Result<std::vector<SwapEventRow>> SqliteTraceReader::swapEvents(TimeWindow window,
                                                                std::optional<int32_t> rank) {
  if (window.endNs <= window.startNs) return std::vector<SwapEventRow>{};
  MOEWB_ASSIGN_OR_RETURN(const int tables, swapTables());
  if ((tables & kSwapEventTable) == 0) return std::vector<SwapEventRow>{};
  return inReadTransaction<std::vector<SwapEventRow>>(
      [&] { return swapEventsInSnapshot(window, rank); });
}

Result<std::vector<SwapEventRow>> SqliteTraceReader::swapEventsInSnapshot(
    TimeWindow window, std::optional<int32_t> rank) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t maxDurNs, maxSwapDurNs());
  auto read = [&](const Statement& s) {
    SwapEventRow row;
    row.id = s.columnInt(0);
    row.step = s.columnInt(1);
    row.rank = s.columnInt32(2);
    row.layer = s.columnInt32(3);
    row.op = s.columnText(4);
    row.bytes = s.columnInt(5);
    row.toHost = s.columnInt(6) != 0;
    row.startNs = s.columnInt(7);
    row.endNs = s.columnInt(8);
    row.neededNs = s.columnInt(9);
    row.stallNs = s.columnInt(10);
    row.simulated = s.columnInt(11) != 0;
    repairSwapEvent(row);
    return row;
  };
  const int64_t lowestStartNs = saturatingSub(window.startNs, maxDurNs);
  if (!rank) {
    return queryRows(m_db, kSwapWindowSql, read, lowestStartNs, window.endNs, window.startNs);
  }
  return queryRows(m_db, kSwapWindowRankSql, read, lowestStartNs, window.endNs, window.startNs,
                   int64_t(*rank));
}

Result<std::vector<SwapStepRow>> SqliteTraceReader::swapSteps() {
  MOEWB_ASSIGN_OR_RETURN(const int tables, swapTables());
  if ((tables & kSwapStepTable) == 0) return std::vector<SwapStepRow>{};
  int64_t negative = 0;
  MOEWB_ASSIGN_OR_RETURN(std::vector<SwapStepRow> rows,
                         queryRows(m_db, kSwapStepsSql, [&](const Statement& s) {
                           return swapStepFromColumns(s, &negative);
                         }));
  countBadValue("swap_values_negative", negative,
                kNegativeDescription);
  return rows;
}

Result<std::vector<SwapPlanRow>> SqliteTraceReader::swapPlans() {
  MOEWB_ASSIGN_OR_RETURN(const int tables, swapTables());
  if ((tables & kSwapPlanTables) == 0) return std::vector<SwapPlanRow>{};
  const bool settings = (tables & kSwapPlanSettings) != 0;
  const bool recompute = (tables & kSwapPlanRecompute) != 0;
  return inReadTransaction<std::vector<SwapPlanRow>>(
      [&] { return swapPlansInSnapshot(settings, recompute); });
}

Result<std::vector<SwapPlanRow>> SqliteTraceReader::swapPlansInSnapshot(bool settings,
                                                                       bool recompute) {
  // Files from before free_lag_layers, ops and min_bytes read them as 1, '' and 0 (unknown);
  // files from before the recompute columns read '' and no recompute times (unknown).
  MOEWB_ASSIGN_OR_RETURN(
      Statement plans,
      Statement::prepare(
          m_db, fmt::format("SELECT id, step, rank, mode, hbm_target_bytes, pinned_budget_bytes, "
                            "prefetch_layers, d2h_gbps, h2d_gbps, bidir_gbps, fixed_bytes, "
                            "turn_ms, predicted_peak_bytes, predicted_peak_no_swap_bytes, "
                            "predicted_exposed_ms, summary, {}, {} FROM swap_plan "
                            "ORDER BY step, rank, id",
                            settings ? "free_lag_layers, ops, min_bytes" : "1, '', 0",
                            recompute ? "recompute_ops, recompute_ms_source" : "'', ''")));
  MOEWB_ASSIGN_OR_RETURN(
      Statement layers,
      Statement::prepare(m_db, fmt::format("SELECT layer, forward_ms, backward_ms, other_bytes, "
                                           "{} FROM swap_plan_layer WHERE plan = ?1 ORDER BY layer",
                                           recompute ? "recompute_ms" : "0")));
  MOEWB_ASSIGN_OR_RETURN(
      Statement tensors,
      Statement::prepare(m_db,
                         "SELECT layer, op, bytes, swapped, reason FROM swap_plan_tensor "
                         "WHERE plan = ?1 ORDER BY idx"));
  std::vector<SwapPlanRow> rows;
  int64_t gaps = 0;
  MOEWB_RETURN_IF_ERROR(forEachRow(plans, [&](const Statement& s) -> Status {
    SwapPlanRow p = swapPlanFromColumns(s);
    // Recompute times are known with their source only (the writer stores both or neither).
    const bool recomputeKnown = !p.recomputeMsSource.empty();
    MOEWB_RETURN_IF_ERROR(layers.bindInt(1, p.id));
    MOEWB_RETURN_IF_ERROR(forEachRow(layers, [&](const Statement& layer) {
      // Layers are stored 0 .. L-1; a file with gaps is read in layer order and counted.
      if (layer.columnInt(0) != int64_t(p.layerForwardMs.size())) ++gaps;
      p.layerForwardMs.push_back(layer.columnDouble(1));
      p.layerBackwardMs.push_back(layer.columnDouble(2));
      p.layerOtherBytes.push_back(layer.columnInt(3));
      if (recomputeKnown) p.layerRecomputeMs.push_back(layer.columnDouble(4));
    }));
    MOEWB_RETURN_IF_ERROR(tensors.bindInt(1, p.id));
    MOEWB_ASSIGN_OR_RETURN(p.tensors, collectRows(tensors, [](const Statement& tensor) {
                             const int64_t action = tensor.columnInt(3);
                             return SwapPlanTensorRow{tensor.columnInt32(0), tensor.columnText(1),
                                                      tensor.columnInt(2), action == 1,
                                                      tensor.columnText(4), action == 2};
                           }));
    rows.push_back(std::move(p));
    return Status::ok();
  }));
  countBadValue("swap_plan_layer_gaps", gaps,
                "swap plans whose layer rows are not numbered 0, 1, 2, ...; read in layer order "
                "(the file may be damaged or hostile)");
  return rows;
}

Result<std::vector<SwapLayerSummary>> SqliteTraceReader::swapLayerSummary(int64_t fromStep,
                                                                          int64_t toStep) {
  MOEWB_ASSIGN_OR_RETURN(const int tables, swapTables());
  if ((tables & kSwapEventTable) == 0 || toStep < fromStep) {
    return std::vector<SwapLayerSummary>{};
  }
  int64_t clamped = 0, reversed = 0, negative = 0;
  MOEWB_ASSIGN_OR_RETURN(std::vector<SwapLayerSummary> rows,
                         queryRows(
                             m_db, kSwapLayerSummarySql,
                             [&](const Statement& q) {
                               SwapLayerSummary s;
                               s.rank = q.columnInt32(0);
                               s.layer = q.columnInt32(1);
                               s.offloadedBytes = clampToInt64(q.columnDouble(2), &clamped);
                               s.reloadedBytes = clampToInt64(q.columnDouble(3), &clamped);
                               s.offloads = q.columnInt32(4);
                               s.reloads = q.columnInt32(5);
                               s.lateReloads = q.columnInt32(6);
                               s.offloadWaits = q.columnInt32(7);
                               s.copyMs = q.columnDouble(8) / kNsPerMsDouble;
                               s.exposedMs = q.columnDouble(9) / kNsPerMsDouble;
                               s.worstStallMs = q.columnDouble(10) / kNsPerMsDouble;
                               s.offloadWaitMs = q.columnDouble(11) / kNsPerMsDouble;
                               reversed = saturatingAdd(reversed, q.columnInt(12));
                               negative = saturatingAdd(negative, q.columnInt(13));
                               return s;
                             },
                             fromStep, toStep));
  countClamped(clamped);
  countBadValue("swap_times_reversed", reversed,
                kReversedDescription);
  countBadValue("swap_values_negative", negative,
                kNegativeDescription);
  return rows;
}

}  // namespace detail
}  // namespace moewb::storage
