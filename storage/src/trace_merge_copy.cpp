// Copying one attached input into the merged trace (see trace_merge_internal.h): one
// INSERT ... SELECT per table of schema v1, reading schema "src" and writing "main". In each:
// timestamps + :clock, track ids + :track, slice ids + :slice, string ids through
// temp.merge_string_map (old id -> id in main), run ids -> :run, nonzero GPU correlation ids
// + :corr, swap plan ids + :plan; every other column is copied as is. Rows keep their order
// (ORDER BY id / rowid). The swap tables are copied only from inputs that have them with the
// columns this build reads (older inputs have no swap rows); the swap plan columns added later
// get their defaults from inputs without them.
// Cost: one pass over every input table plus an index probe per string column value.
#include <fmt/format.h>

#include "moewb/storage/gpu_rows.h"
#include "sqlite_trace_reader.h"
#include "trace_merge_internal.h"

namespace moewb::storage::detail {

namespace {

// Columns added to a table after it: read from inputs that have them, else their defaults.
struct AddedColumns {
  SwapAddedColumns which;
  const char* fromInput;  // the SELECT expressions, e.g. "t.free_lag_layers, t.ops, t.min_bytes"
  const char* defaults;   // the values of inputs from before them, e.g. "1, '', 0"
};

struct TableCopy {
  std::string table;
  std::string sql;
  // Copied only when the input has the table with the columns this build reads (tables added
  // to schema v1 later: inputs from before them, or with the early placeholder swap_event, have
  // no rows of it to copy).
  bool optional = false;
  // Tables with columns added later (swap_plan, swap_plan_layer): `sql` is empty and the copy is
  // sqlFor(the SELECT expressions of each group of `added`, in order) for the input at hand.
  std::vector<AddedColumns> added;
  std::string (*sqlFor)(const std::vector<std::string>& selects) = nullptr;
};

// The swap_plan copy: selects[0] free_lag_layers, ops, min_bytes; selects[1] recompute_ops,
// recompute_ms_source.
std::string swapPlanCopySql(const std::vector<std::string>& selects) {
  return fmt::format(
      "INSERT INTO main.swap_plan(id, run, step, rank, mode, hbm_target_bytes, "
      "pinned_budget_bytes, prefetch_layers, d2h_gbps, h2d_gbps, bidir_gbps, fixed_bytes, "
      "turn_ms, predicted_peak_bytes, predicted_peak_no_swap_bytes, predicted_exposed_ms, "
      "summary, free_lag_layers, ops, min_bytes, recompute_ops, recompute_ms_source) "
      "SELECT t.id + :plan, :run, t.step, t.rank, "
      "t.mode, t.hbm_target_bytes, t.pinned_budget_bytes, t.prefetch_layers, t.d2h_gbps, "
      "t.h2d_gbps, t.bidir_gbps, t.fixed_bytes, t.turn_ms, t.predicted_peak_bytes, "
      "t.predicted_peak_no_swap_bytes, t.predicted_exposed_ms, t.summary, {}, {} "
      "FROM src.swap_plan t ORDER BY t.id",
      selects.at(0), selects.at(1));
}

// The swap_plan_layer copy: selects[0] recompute_ms.
std::string swapPlanLayerCopySql(const std::vector<std::string>& selects) {
  return fmt::format(
      "INSERT INTO main.swap_plan_layer(plan, layer, forward_ms, backward_ms, other_bytes, "
      "recompute_ms) SELECT t.plan + :plan, t.layer, t.forward_ms, t.backward_ms, "
      "t.other_bytes, {} FROM src.swap_plan_layer t ORDER BY t.plan, t.layer",
      selects.at(0));
}

constexpr AddedColumns kRecomputeColumns[] = {
    {SwapAddedColumns::kRecompute, "t.recompute_ops, t.recompute_ms_source", "'', ''"},
    {SwapAddedColumns::kRecompute, "t.recompute_ms", "0"},
};

// The new id of string column `column` of the row `t`.
std::string str(const char* column) {
  return fmt::format("(SELECT new_id FROM temp.merge_string_map WHERE old_id = t.{})", column);
}

std::string gpuCategoryIds() {
  return fmt::format(
      "(SELECT id FROM src.string WHERE text IN ('{}', '{}', '{}', '{}', '{}', '{}'))",
      kCategoryKernel, kCategoryMemcpy, kCategoryMemset, kCategorySync, kCategoryApi,
      kCategoryNvtx);
}

// Stats whose value is a bit mask rather than a count: merged files keep the bits every rank has
// (the GPU trace kinds all ranks captured); every other stat is a count and adds up.
constexpr const char* kBitMaskStats = "'gpu_trace_kinds'";

// Severity order of stats rows, for keeping the worst when two files have the same stat.
constexpr const char* kSeverityRank =
    "CASE {} WHEN 'data_loss' THEN 3 WHEN 'error' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END";

std::vector<TableCopy> buildTableCopies() {
  const std::string severityNew = fmt::format(kSeverityRank, "excluded.severity");
  const std::string severityOld = fmt::format(kSeverityRank, "stats.severity");
  return {
      {"track",
       "INSERT INTO main.track(id, name, kind, rank, thread_id) "
       "SELECT t.id + :track, t.name, t.kind, t.rank, t.thread_id FROM src.track t ORDER BY t.id"},
      {"slice",
       fmt::format("INSERT INTO main.slice(id, track, start_ns, dur_ns, name, category, step, "
                   "layer, correlation_id, depth) "
                   "SELECT t.id + :slice, t.track + :track, t.start_ns + :clock, t.dur_ns, {}, {}, "
                   "t.step, t.layer, CASE WHEN t.correlation_id != 0 AND t.category IN {} "
                   "THEN t.correlation_id + :corr ELSE t.correlation_id END, t.depth "
                   "FROM src.slice t ORDER BY t.id",
                   str("name"), str("category"), gpuCategoryIds())},
      {"counter",
       fmt::format("INSERT INTO main.counter(track, name, ts_ns, value) "
                   "SELECT t.track + :track, {}, t.ts_ns + :clock, t.value FROM src.counter t "
                   "ORDER BY t.id",
                   str("name"))},
      {"memory_event",
       fmt::format("INSERT INTO main.memory_event(track, ts_ns, step, kind, bytes, address, "
                   "category, in_use_bytes) "
                   "SELECT t.track + :track, t.ts_ns + :clock, t.step, t.kind, t.bytes, t.address, "
                   "{}, t.in_use_bytes FROM src.memory_event t ORDER BY t.id",
                   str("category"))},
      {"step",
       "INSERT INTO main.step(run, rank, step, start_ns, end_ns, loss, aux_loss, tokens, "
       "tokens_per_second, peak_bytes, grad_norm, lr) "
       "SELECT :run, t.rank, t.step, t.start_ns + :clock, t.end_ns + :clock, t.loss, t.aux_loss, "
       "t.tokens, t.tokens_per_second, t.peak_bytes, t.grad_norm, t.lr FROM src.step t "
       "ORDER BY t.run, t.rank, t.step"},
      {"expert_load",
       "INSERT INTO main.expert_load(step, layer, expert, rank, tokens, dropped, bias) "
       "SELECT step, layer, expert, rank, tokens, dropped, bias FROM src.expert_load "
       "ORDER BY rowid"},
      {"a2a_traffic",
       "INSERT INTO main.a2a_traffic(step, layer, src_rank, dst_rank, bytes, phase) "
       "SELECT step, layer, src_rank, dst_rank, bytes, phase FROM src.a2a_traffic ORDER BY rowid"},
      {"collective",
       "INSERT INTO main.collective(track, start_ns, dur_ns, step, layer, rank, op, comm_group, "
       "phase, seq, bytes_sent, bytes_received, peers, ok) "
       "SELECT t.track + :track, t.start_ns + :clock, t.dur_ns, t.step, t.layer, t.rank, t.op, "
       "t.comm_group, t.phase, t.seq, t.bytes_sent, t.bytes_received, t.peers, t.ok "
       "FROM src.collective t ORDER BY t.id"},
      // Swap rows: plan ids + :plan (the layer and tensor rows follow their plan); needed_ns is
      // a time for reloads and for offloads that compute waited for, else 0 and stays 0. Plans
      // of inputs from before free_lag_layers, ops and min_bytes get 1, '' and 0 (unknown);
      // from before the recompute columns, '' and recompute times 0 with source '' (unknown).
      {"swap_plan", "", true,
       {{SwapAddedColumns::kPlanSettings, "t.free_lag_layers, t.ops, t.min_bytes", "1, '', 0"},
        kRecomputeColumns[0]},
       swapPlanCopySql},
      {"swap_plan_layer", "", true, {kRecomputeColumns[1]}, swapPlanLayerCopySql},
      {"swap_plan_tensor",
       "INSERT INTO main.swap_plan_tensor(plan, idx, layer, op, bytes, swapped, reason) "
       "SELECT t.plan + :plan, t.idx, t.layer, t.op, t.bytes, t.swapped, t.reason "
       "FROM src.swap_plan_tensor t ORDER BY t.plan, t.idx",
       true},
      {"swap_event",
       "INSERT INTO main.swap_event(run, step, rank, layer, op, bytes, to_host, start_ns, end_ns, "
       "needed_ns, stall_ns, simulated) "
       "SELECT :run, t.step, t.rank, t.layer, t.op, t.bytes, t.to_host, t.start_ns + :clock, "
       "t.end_ns + :clock, CASE WHEN t.to_host = 0 OR t.needed_ns != 0 "
       "THEN t.needed_ns + :clock ELSE t.needed_ns END, t.stall_ns, t.simulated "
       "FROM src.swap_event t ORDER BY t.id",
       true},
      {"swap_step",
       "INSERT INTO main.swap_step(run, step, rank, hbm_peak_bytes, hbm_peak_no_swap_bytes, "
       "pinned_peak_bytes, pinned_capacity_bytes, offloads, reloads, late_reloads, "
       "swapped_bytes, copy_ms, exposed_ms, simulated) "
       "SELECT :run, t.step, t.rank, t.hbm_peak_bytes, t.hbm_peak_no_swap_bytes, "
       "t.pinned_peak_bytes, t.pinned_capacity_bytes, t.offloads, t.reloads, t.late_reloads, "
       "t.swapped_bytes, t.copy_ms, t.exposed_ms, t.simulated FROM src.swap_step t "
       "ORDER BY t.run, t.step, t.rank",
       true},
      {"config_change",
       "INSERT INTO main.config_change(run, step, ts_ns, key, old_value, new_value, source) "
       "SELECT :run, t.step, t.ts_ns + :clock, t.key, t.old_value, t.new_value, t.source "
       "FROM src.config_change t ORDER BY t.id"},
      {"stats",
       fmt::format("INSERT INTO main.stats(name, severity, value, description) "
                   "SELECT name, severity, value, description FROM src.stats WHERE true "
                   "ON CONFLICT(name) DO UPDATE SET value = CASE WHEN name IN ({}) "
                   "THEN stats.value & excluded.value ELSE stats.value + excluded.value END, "
                   "severity = CASE WHEN {} > {} THEN excluded.severity ELSE stats.severity END",
                   kBitMaskStats, severityNew, severityOld)},
      {"tuner_trial",
       "INSERT INTO main.tuner_trial(run, start_ns, end_ns, settings_json, metrics_json, "
       "verdict) SELECT :run, t.start_ns + :clock, t.end_ns + :clock, t.settings_json, "
       "t.metrics_json, t.verdict FROM src.tuner_trial t ORDER BY t.id"},
      {"gpu_kernel",
       fmt::format("INSERT INTO main.gpu_kernel(slice, device_id, stream_id, grid_x, grid_y, "
                   "grid_z, block_x, block_y, block_z, registers_per_thread, static_shared_bytes, "
                   "dynamic_shared_bytes, mangled_name, short_name, phase) "
                   "SELECT t.slice + :slice, t.device_id, t.stream_id, t.grid_x, t.grid_y, "
                   "t.grid_z, t.block_x, t.block_y, t.block_z, t.registers_per_thread, "
                   "t.static_shared_bytes, t.dynamic_shared_bytes, {}, {}, {} "
                   "FROM src.gpu_kernel t ORDER BY t.slice",
                   str("mangled_name"), str("short_name"), str("phase"))},
      {"gpu_memcpy",
       fmt::format("INSERT INTO main.gpu_memcpy(slice, device_id, stream_id, copy_kind, "
                   "src_kind, dst_kind, bytes, phase) "
                   "SELECT t.slice + :slice, t.device_id, t.stream_id, t.copy_kind, t.src_kind, "
                   "t.dst_kind, t.bytes, {} FROM src.gpu_memcpy t ORDER BY t.slice",
                   str("phase"))},
      {"gpu_memset",
       fmt::format("INSERT INTO main.gpu_memset(slice, device_id, stream_id, bytes, value, "
                   "memory_kind, phase) "
                   "SELECT t.slice + :slice, t.device_id, t.stream_id, t.bytes, t.value, "
                   "t.memory_kind, {} FROM src.gpu_memset t ORDER BY t.slice",
                   str("phase"))},
      {"gpu_sync",
       fmt::format("INSERT INTO main.gpu_sync(slice, sync_type, stream_id, cuda_event_id, phase) "
                   "SELECT t.slice + :slice, t.sync_type, t.stream_id, t.cuda_event_id, {} "
                   "FROM src.gpu_sync t ORDER BY t.slice",
                   str("phase"))},
      {"cuda_api",
       fmt::format("INSERT INTO main.cuda_api(slice, api, cbid, thread_id, return_value, phase) "
                   "SELECT t.slice + :slice, t.api, t.cbid, t.thread_id, t.return_value, {} "
                   "FROM src.cuda_api t ORDER BY t.slice",
                   str("phase"))},
      // track is -1 when unknown: only ids of real tracks move.
      {"gpu_memory",
       fmt::format("INSERT INTO main.gpu_memory(track, ts_ns, kind, memory_kind, bytes, address, "
                   "device_id, stream_id, correlation_id, step, layer, phase) "
                   "SELECT CASE WHEN t.track IN (SELECT id FROM src.track) THEN t.track + :track "
                   "ELSE t.track END, t.ts_ns + :clock, t.kind, t.memory_kind, t.bytes, "
                   "t.address, t.device_id, t.stream_id, CASE WHEN t.correlation_id != 0 THEN "
                   "t.correlation_id + :corr ELSE 0 END, t.step, t.layer, {} "
                   "FROM src.gpu_memory t ORDER BY t.id",
                   str("phase"))},
  };
}

const std::vector<TableCopy>& tableCopies() {
  static const std::vector<TableCopy> copies = buildTableCopies();
  return copies;
}

constexpr const char* kStringMapSql =
    "CREATE TEMP TABLE IF NOT EXISTS merge_string_map(old_id INTEGER PRIMARY KEY, "
    "new_id INTEGER NOT NULL);"
    "DELETE FROM temp.merge_string_map;"
    "INSERT OR IGNORE INTO main.string(text) SELECT text FROM src.string ORDER BY id;"
    "INSERT INTO temp.merge_string_map(old_id, new_id) "
    "SELECT s.id, m.id FROM src.string s JOIN main.string m ON m.text = s.text;";

// Binds the named parameters `statement` uses (:clock, :track, :slice, :corr, :run).
Status bindShift(Statement& statement, const MergeShift& shift) {
  const std::pair<const char*, int64_t> values[] = {
      {":clock", shift.clockOffsetNs}, {":track", shift.trackIdOffset},
      {":slice", shift.sliceIdOffset}, {":corr", shift.gpuCorrelationOffset},
      {":run", shift.runId},     {":plan", shift.swapPlanIdOffset},
  };
  for (const auto& [name, value] : values) {
    const int index = sqlite3_bind_parameter_index(statement.handle(), name);
    if (index > 0) MOEWB_RETURN_IF_ERROR(statement.bindInt(index, value));
  }
  return Status::ok();
}

Status withContext(const Status& status, const std::string& sourcePath, const std::string& what) {
  return Status(status.code(),
                fmt::format("merging '{}' ({}): {}", sourcePath, what, status.message()));
}

// The offset that moves ids of src.<table> to just after the largest id in main.<table>.
Result<int64_t> idOffset(Database& out, const char* table) {
  const std::string sql =
      fmt::format("SELECT (SELECT max(id) FROM main.{0}), (SELECT min(id) FROM src.{0})", table);
  MOEWB_ASSIGN_OR_RETURN(Statement query, Statement::prepare(out, sql));
  MOEWB_ASSIGN_OR_RETURN(const bool hasRow, query.step());
  if (!hasRow || query.columnIsNull(0) || query.columnIsNull(1)) return int64_t(0);
  // Ids come from the files: an offset beyond int64 is refused, not wrapped.
  int64_t offset = 0;
  if (__builtin_sub_overflow(query.columnInt(0), query.columnInt(1), &offset) ||
      __builtin_add_overflow(offset, 1, &offset)) {
    return dataLoss(
        fmt::format("the ids of table {} lie too far apart to merge (largest {} in "
                    "the output, smallest {} in the input)",
                    table, query.columnInt(0), query.columnInt(1)));
  }
  return offset;
}

}  // namespace

const std::vector<std::string>& mergedRowTables() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const TableCopy& copy : tableCopies()) out.push_back(copy.table);
    return out;
  }();
  return names;
}

Result<MergeShift> idOffsetsForSource(Database& out) {
  MergeShift shift;
  MOEWB_ASSIGN_OR_RETURN(shift.trackIdOffset, idOffset(out, "track"));
  MOEWB_ASSIGN_OR_RETURN(shift.sliceIdOffset, idOffset(out, "slice"));
  MOEWB_ASSIGN_OR_RETURN(const bool hasPlans, swapTableReadable(out, "swap_plan", "src"));
  if (hasPlans) {
    MOEWB_ASSIGN_OR_RETURN(shift.swapPlanIdOffset, idOffset(out, "swap_plan"));
  }
  return shift;
}

Result<std::vector<int64_t>> copyMergeSource(Database& out, const std::string& sourcePath,
                                             const MergeShift& shift) {
  if (Status status = out.exec(kStringMapSql); !status.isOk()) {
    return withContext(status, sourcePath, "string table");
  }
  std::vector<int64_t> rows;
  for (const TableCopy& copy : tableCopies()) {
    Status status = [&]() -> Status {
      if (copy.optional) {
        MOEWB_ASSIGN_OR_RETURN(const bool readable, swapTableReadable(out, copy.table, "src"));
        if (!readable) {
          rows.push_back(0);
          return Status::ok();
        }
      }
      std::string sql = copy.sql;
      if (copy.sqlFor != nullptr) {
        std::vector<std::string> selects;
        for (const AddedColumns& group : copy.added) {
          MOEWB_ASSIGN_OR_RETURN(const bool present, swapHasAddedColumns(out, group.which, "src"));
          selects.emplace_back(present ? group.fromInput : group.defaults);
        }
        sql = copy.sqlFor(selects);
      }
      MOEWB_ASSIGN_OR_RETURN(Statement insert, Statement::prepare(out, sql));
      MOEWB_RETURN_IF_ERROR(bindShift(insert, shift));
      MOEWB_RETURN_IF_ERROR(insert.run());
      rows.push_back(sqlite3_changes64(out.handle()));
      return Status::ok();
    }();
    if (!status.isOk()) return withContext(status, sourcePath, "table " + copy.table);
  }
  return rows;
}

}  // namespace moewb::storage::detail
