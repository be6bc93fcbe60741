// The merged trace's run row, meta rows and merge stats (see trace_merge_internal.h). Cost:
// O(inputs x meta keys) small inserts plus one scan of slice.dur_ns for max_slice_dur_ns.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <set>

#include "moewb/base/units.h"
#include "moewb/storage/run_liveness.h"
#include "moewb/storage/trace_reader.h"
#include "schema.h"
#include "sqlite_trace_reader.h"
#include "trace_merge_internal.h"

#ifndef MOEWB_TOOL_VERSION
#define MOEWB_TOOL_VERSION "unknown"
#endif

namespace moewb::storage::detail {

namespace {

// Higher is worse: the merged run shows the worst status of its ranks.
int statusRank(const std::string& status) {
  if (status == "failed") return 3;
  if (status == "running") return 2;  // a rank that died without finishing its run row
  if (status == "stopped") return 1;
  return 0;
}

RunRow mergedRun(const std::vector<MergeSource>& sources, const MergeResult& merged,
                 int64_t runId) {
  RunRow run = sources.front().run;
  run.id = RunId(runId);
  run.startNs = std::numeric_limits<int64_t>::max();
  run.endNs = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const RunRow& r = sources[i].run;
    const int64_t offsetNs = merged.inputs[i].clockOffsetNs;
    run.startNs = std::min(run.startNs, detail::saturatingAdd(r.startNs, offsetNs));
    if (r.endNs != 0) run.endNs = std::max(run.endNs, detail::saturatingAdd(r.endNs, offsetNs));
    if (statusRank(r.status) > statusRank(run.status)) run.status = r.status;
  }
  if (run.status == "running") run.endNs = 0;
  // The messages of the ranks with the merged status; one message when they all agree.
  std::set<std::string> distinct;
  std::vector<std::string> perRank;
  for (const MergeSource& source : sources) {
    if (source.run.status != run.status || source.run.message.empty()) continue;
    distinct.insert(source.run.message);
    perRank.push_back(fmt::format("rank {}: {}", fmt::join(source.ranks, ","), source.run.message));
  }
  if (distinct.size() == 1) {
    run.message = *distinct.begin();
  } else {
    run.message = fmt::format("{}", fmt::join(perRank, "; "));
  }
  return run;
}

Status insertRun(Database& out, const RunRow& run) {
  MOEWB_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::prepare(out,
                         "INSERT INTO main.run(id, name, config_toml, backend, world_size, "
                         "start_ns, start_unix_ns, end_ns, status, message) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  MOEWB_RETURN_IF_ERROR(insert.bindAll(run.id.value, run.name, run.configToml, run.backend,
                                       run.worldSize, run.startNs, run.startUnixNs, run.endNs,
                                       run.status, run.message));
  return insert.run();
}

// Meta keys whose per-file values are not worth keeping per rank.
bool isRecomputedMetaKey(const std::string& key) {
  return key == kMetaMaxSliceDurNs || key == kMetaMaxSwapDurNs || key == kMetaSchemaVersion ||
         key == kMetaFormat || key == kMetaClockDomain || key == kMetaHeartbeatUnixMs;
}

// The newest heartbeat of the inputs (a merged "running" run is live only while some rank's
// writer is); nullopt when no input has a readable one.
std::optional<int64_t> newestHeartbeat(const std::vector<MergeSource>& sources) {
  std::optional<int64_t> newest;
  for (const MergeSource& source : sources) {
    auto it = source.meta.find(kMetaHeartbeatUnixMs);
    if (it == source.meta.end()) continue;
    int64_t value = 0;
    const std::string& text = it->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) continue;
    newest = std::max(newest.value_or(value), value);
  }
  return newest;
}

std::map<std::string, std::string> mergedMeta(const std::vector<MergeSource>& sources,
                                              const MergeResult& merged) {
  std::map<std::string, std::string> meta = sources.front().meta;
  meta[kMetaSchemaVersion] = std::to_string(kSchemaVersion);
  meta[kMetaFormat] = kFormatName;
  meta[kMetaClockDomain] = kClockDomain;
  std::set<std::string> differing;
  for (const MergeSource& source : sources) {
    for (const auto& [key, value] : source.meta) {
      if (isRecomputedMetaKey(key)) continue;
      auto it = sources.front().meta.find(key);
      if (it == sources.front().meta.end() || it->second != value) differing.insert(key);
    }
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    const MergedInput& input = merged.inputs[i];
    for (int32_t rank : input.ranks) {
      const std::string suffix = ".rank" + std::to_string(rank);
      meta["clock_offset_ns" + suffix] = std::to_string(input.clockOffsetNs);
      meta["clock_alignment" + suffix] = clockAlignmentName(input.alignment);
      meta["clock_shared_collectives" + suffix] = std::to_string(input.sharedCollectives);
      meta["merged_from" + suffix] = input.path;
      if (input.gpuCorrelationOffset != 0) {
        meta["gpu_correlation_offset" + suffix] = std::to_string(input.gpuCorrelationOffset);
      }
      for (const std::string& key : differing) {
        auto it = sources[i].meta.find(key);
        meta[key + suffix] = it == sources[i].meta.end() ? "" : it->second;
      }
    }
  }
  meta.erase(kMetaHeartbeatUnixMs);
  meta.erase(kMetaMaxSwapDurNs);  // recomputed from the merged rows (insertMeta)
  if (const std::optional<int64_t> heartbeat = newestHeartbeat(sources)) {
    meta[kMetaHeartbeatUnixMs] = std::to_string(*heartbeat);
  }
  meta["merged_inputs"] = std::to_string(sources.size());
  meta["merged_unix_ns"] = std::to_string(unixNowNs());
  meta["merged_by_tool_version"] = MOEWB_TOOL_VERSION;
  if (!merged.missingRanks.empty()) {
    meta["missing_ranks"] = fmt::format("{}", fmt::join(merged.missingRanks, ","));
  }
  return meta;
}

Status insertMeta(Database& out, const std::map<std::string, std::string>& meta) {
  MOEWB_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::prepare(out, "INSERT OR REPLACE INTO main.meta(key, value) VALUES (?1, ?2)"));
  for (const auto& [key, value] : meta) {
    MOEWB_RETURN_IF_ERROR(insert.bindAll(key, value));
    MOEWB_RETURN_IF_ERROR(insert.run());
  }
  MOEWB_RETURN_IF_ERROR(out.exec(
      "INSERT OR REPLACE INTO main.meta(key, value) "
      "SELECT 'max_slice_dur_ns', CAST(coalesce(max(dur_ns), 0) AS TEXT) FROM main.slice"));
  // Durations do not move with the clock offsets; a merged file without swap copies has none.
  return out.exec(
      "INSERT OR REPLACE INTO main.meta(key, value) "
      "SELECT 'max_swap_dur_ns', CAST(max(max(end_ns - start_ns), 0) AS TEXT) "
      "FROM main.swap_event HAVING count(*) > 0");
}

Status upsertStat(Database& out, const StatRow& stat) {
  MOEWB_ASSIGN_OR_RETURN(
      Statement insert,
      Statement::prepare(out,
                         "INSERT OR REPLACE INTO main.stats(name, severity, value, description) "
                         "VALUES (?1, ?2, ?3, ?4)"));
  MOEWB_RETURN_IF_ERROR(insert.bindAll(stat.name, stat.severity, stat.value, stat.description));
  return insert.run();
}

Status insertMergeStats(Database& out, const MergeResult& merged) {
  if (!merged.missingRanks.empty()) {
    MOEWB_RETURN_IF_ERROR(
        upsertStat(out, {"merge_missing_ranks", "warning", int64_t(merged.missingRanks.size()),
                         fmt::format("ranks with no trace file in the merge: {}",
                                     fmt::join(merged.missingRanks, ", "))}));
  }
  std::vector<int32_t> byRunStart;
  for (const MergedInput& input : merged.inputs) {
    if (input.alignment != ClockAlignmentMethod::kRunStart) continue;
    byRunStart.insert(byRunStart.end(), input.ranks.begin(), input.ranks.end());
  }
  if (!byRunStart.empty()) {
    MOEWB_RETURN_IF_ERROR(upsertStat(
        out, {"merge_clock_aligned_by_run_start", "warning", int64_t(byRunStart.size()),
              fmt::format("ranks {} ran no collective with the reference rank: their clocks were "
                          "aligned by run start only",
                          fmt::join(byRunStart, ", "))}));
  }
  return Status::ok();
}

}  // namespace

Status writeMergedRunAndMeta(Database& out, const std::vector<MergeSource>& sources,
                             const MergeResult& merged, int64_t runId) {
  MOEWB_RETURN_IF_ERROR(insertRun(out, mergedRun(sources, merged, runId)));
  MOEWB_RETURN_IF_ERROR(insertMeta(out, mergedMeta(sources, merged)));
  return insertMergeStats(out, merged);
}

}  // namespace moewb::storage::detail
