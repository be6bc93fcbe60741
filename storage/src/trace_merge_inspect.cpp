// Reading and checking the inputs of a merge (see trace_merge_internal.h): each input is opened
// with the reader's checks, then one read-only connection reads its run, ranks, collectives and
// GPU correlation range. Cost per input: scans of the rank-bearing tables and of the ok
// collectives; nothing is written.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/trace_reader.h"
#include "trace_merge_internal.h"
#include "trace_open.h"

namespace moewb::storage::detail {

namespace {

constexpr const char* kRanksSql =
    "SELECT rank FROM track UNION SELECT rank FROM step UNION SELECT rank FROM collective "
    "UNION SELECT rank FROM expert_load UNION SELECT src_rank FROM a2a_traffic ORDER BY 1";

constexpr const char* kCollectivesSql =
    "SELECT comm_group, seq, peers, start_ns + dur_ns FROM collective WHERE ok = 1 "
    "ORDER BY rank, id";

// The string ids of the GPU capture categories, as an SQL subquery on schema `schema`.
std::string gpuCategoryIdsSql(const std::string& schema) {
  return fmt::format(
      "(SELECT id FROM {}.string WHERE text IN ('{}', '{}', '{}', '{}', '{}', '{}'))", schema,
      kCategoryKernel, kCategoryMemcpy, kCategoryMemset, kCategorySync, kCategoryApi,
      kCategoryNvtx);
}

Status readRanks(Database& db, MergeSource& source) {
  MOEWB_ASSIGN_OR_RETURN(
      source.ranks, queryRows(db, kRanksSql, [](const Statement& s) { return s.columnInt32(0); }));
  if (source.ranks.empty()) {
    return invalidArgument(fmt::format(
        "'{}' holds no rows with a rank (no tracks, steps, collectives, expert load or traffic), "
        "so its rank is unknown; merge takes the per-rank traces of a run",
        source.path));
  }
  return Status::ok();
}

// The run row's world_size as stored (the reader clamps it): merge enumerates every rank of
// [0, world size), so a value beyond kMaxWorldSize is refused instead of clamped.
Status checkWorldSize(Database& db, const MergeSource& source) {
  MOEWB_ASSIGN_OR_RETURN(const auto declared,  // (value, as written)
                         queryFirstRow(db, "SELECT world_size FROM run", [](const Statement& s) {
                           return std::pair(s.columnInt(0), s.columnText(0));
                         }));
  if (!declared || (declared->first >= 1 && declared->first <= kMaxWorldSize)) {
    return Status::ok();
  }
  return dataLoss(fmt::format(
      "'{}' declares world size {}; merge accepts 1 to {} ranks (the file may be damaged or "
      "hostile)",
      source.path, declared->second, kMaxWorldSize));
}

Status readCollectiveEnds(Database& db, MergeSource& source) {
  return queryEachRow(db, kCollectivesSql, [&](const Statement& s) {
    CollectiveKey key{s.columnText(0), s.columnInt(1), s.columnText(2)};
    source.collectiveEnds.try_emplace(std::move(key), s.columnInt(3));  // lowest rank first
  });
}

Status readGpuCorrelationRange(Database& db, MergeSource& source) {
  const std::string sql = fmt::format(
      "SELECT min(c), max(c) FROM (SELECT correlation_id AS c FROM slice WHERE correlation_id "
      "!= 0 AND category IN {} UNION ALL SELECT correlation_id FROM gpu_memory WHERE "
      "correlation_id != 0)",
      gpuCategoryIdsSql("main"));
  return queryEachRow(db, sql, [&](const Statement& s) {
    if (s.columnIsNull(0)) return;
    source.gpuCorrelationMin = s.columnInt(0);
    source.gpuCorrelationMax = s.columnInt(1);
  });
}

// The first line where `a` and `b` differ, for the "different config" message.
std::string firstDifferentLine(const std::string& a, const std::string& b) {
  std::istringstream inA(a), inB(b);
  std::string lineA, lineB;
  for (int line = 1;; ++line) {
    const bool moreA = bool(std::getline(inA, lineA));
    const bool moreB = bool(std::getline(inB, lineB));
    if (!moreA && !moreB) return "they differ only in line endings";
    if (!moreA) lineA = "<end>";
    if (!moreB) lineB = "<end>";
    if (lineA != lineB) return fmt::format("line {}: '{}' vs '{}'", line, lineA, lineB);
  }
}

Status checkSameRun(const MergeSource& first, const MergeSource& other) {
  const RunRow& a = first.run;
  const RunRow& b = other.run;
  auto differ = [&](const std::string& what) {
    return invalidArgument(
        fmt::format("'{}' is not from the same run as '{}': {}; merge takes "
                    "the per-rank traces of one run",
                    other.path, first.path, what));
  };
  if (a.name != b.name) return differ(fmt::format("run name '{}' vs '{}'", b.name, a.name));
  if (a.worldSize != b.worldSize) {
    return differ(fmt::format("world size {} vs {}", b.worldSize, a.worldSize));
  }
  if (a.backend != b.backend)
    return differ(fmt::format("backend '{}' vs '{}'", b.backend, a.backend));
  if (a.configToml != b.configToml) {
    return differ("the config differs, " + firstDifferentLine(b.configToml, a.configToml));
  }
  return Status::ok();
}

std::string joinRanks(const std::vector<int32_t>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

}  // namespace

Result<MergeSource> inspectMergeSource(const std::string& path) {
  MergeSource source;
  source.path = path;
  {
    MOEWB_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
    MOEWB_ASSIGN_OR_RETURN(std::vector<RunRow> runs, reader->runs());
    if (runs.size() != 1) {
      return invalidArgument(
          fmt::format("'{}' holds {} runs; merge takes per-rank traces that hold exactly one run",
                      path, runs.size()));
    }
    source.run = std::move(runs.front());
    MOEWB_ASSIGN_OR_RETURN(source.meta, reader->meta());
  }
  MOEWB_ASSIGN_OR_RETURN(UntrustedTrace trace,
                         openUntrustedTrace(path, ReaderOptions{}.queryTimeLimit));
  source.uri = trace.uri;
  Database& db = trace.db;
  MOEWB_RETURN_IF_ERROR(checkWorldSize(db, source));
  MOEWB_RETURN_IF_ERROR(readRanks(db, source));
  MOEWB_RETURN_IF_ERROR(readCollectiveEnds(db, source));
  MOEWB_RETURN_IF_ERROR(readGpuCorrelationRange(db, source));
  return source;
}

Result<std::vector<int32_t>> checkMergeSources(const std::vector<MergeSource>& sources,
                                               bool allowMissing) {
  if (sources.empty()) return invalidArgument("no input traces to merge");
  const MergeSource& first = sources.front();
  for (const MergeSource& source : sources) MOEWB_RETURN_IF_ERROR(checkSameRun(first, source));
  const int32_t worldSize = first.run.worldSize;
  std::map<int32_t, const MergeSource*> owner;
  for (const MergeSource& source : sources) {
    for (int32_t rank : source.ranks) {
      if (rank < 0 || rank >= worldSize) {
        return invalidArgument(
            fmt::format("'{}' holds rows of rank {}, outside the run's world size {} (ranks 0..{})",
                        source.path, rank, worldSize, worldSize - 1));
      }
      auto [it, added] = owner.emplace(rank, &source);
      if (!added) {
        return invalidArgument(
            fmt::format("rank {} is in both '{}' and '{}'; each rank must "
                        "come from one file",
                        rank, it->second->path, source.path));
      }
    }
  }
  std::vector<int32_t> missing, present;
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    (owner.contains(rank) ? present : missing).push_back(rank);
  }
  if (!missing.empty() && !allowMissing) {
    return invalidArgument(fmt::format(
        "the run has world size {} but no input holds rank(s) {} (the inputs hold {}); add "
        "their files, or allow missing ranks (--allow-missing)",
        worldSize, joinRanks(missing), joinRanks(present)));
  }
  return missing;
}

}  // namespace moewb::storage::detail
