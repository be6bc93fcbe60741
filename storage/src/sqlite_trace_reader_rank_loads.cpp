// The reader's routed rows and expert load per rank (TraceReader::rankLoads): one grouped read of
// expert_load over the filter, the EP groups of parallelOverview, and the step table's tokens.
// Values from the file are untrusted: ranks outside [0, world size) and expert ids at or beyond
// kMaxExperts are left out; per-expert rows are kept sparse (one map per hosting rank), so memory
// is O(W + rows read) and never [W, E]; sums that overflow int64 are clamped and counted (SQL
// sums with total(), whose double result is exact below 2^53, instead of sum(), which fails the
// whole query on an integer overflow).
#include <algorithm>
#include <map>
#include <tuple>

#include "sqlite_trace_reader.h"
#include "sqlite_trace_reader_parallel.h"

namespace moewb::storage::detail {

namespace {

// The EP group index, group rank and group size of every rank in [0, worldSize).
struct EpPlace {
  int32_t group = -1;
  int32_t groupRank = 0;
  int32_t groupSize = 1;
};

std::vector<EpPlace> epPlaces(const ParallelOverview& overview, int32_t worldSize) {
  std::vector<EpPlace> places(static_cast<size_t>(worldSize));
  for (size_t g = 0; g < overview.epGroups.size(); ++g) {
    const std::vector<int32_t>& members = overview.epGroups[g];
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] >= worldSize) continue;
      places[size_t(members[i])] = {int32_t(g), int32_t(i), int32_t(members.size())};
    }
  }
  return places;
}

// Sets load's maxExpertRows, hottestExpert and meanExpertRows from the rows its experts
// [firstExpert, firstExpert + expertCount) computed (`rowsByExpert`; absent experts computed 0).
// Same result as a dense scan of the range: the largest value, the lowest expert on ties.
void summarizeExperts(const std::map<int32_t, int64_t>& rowsByExpert, RankLoad& load,
                      int64_t* clamped) {
  if (load.expertCount <= 0) return;
  const int32_t first = load.firstExpert, end = load.firstExpert + load.expertCount;
  int64_t sum = 0;
  // The lowest expert of the range without rows (it counts as 0 rows), if any.
  int32_t firstEmpty = first;
  auto consider = [&](int32_t expert, int64_t rows) {
    if (load.hottestExpert < 0 || rows > load.maxExpertRows ||
        (rows == load.maxExpertRows && expert < load.hottestExpert)) {
      load.maxExpertRows = rows;
      load.hottestExpert = expert;
    }
  };
  for (auto it = rowsByExpert.lower_bound(first); it != rowsByExpert.end() && it->first < end;
       ++it) {
    if (it->first == firstEmpty) ++firstEmpty;
    sum = saturatingAdd(sum, it->second, clamped);
    consider(it->first, it->second);
  }
  if (firstEmpty < end) consider(firstEmpty, 0);
  load.meanExpertRows = double(sum) / double(load.expertCount);
}

}  // namespace

Result<RankLoads> SqliteTraceReader::rankLoads(const ParallelFilter& filter) {
  return inReadTransaction<RankLoads>([&]() -> Result<RankLoads> {
    MOEWB_ASSIGN_OR_RETURN(const ParallelOverview overview, parallelOverviewInSnapshot());
    RankLoads out;
    out.worldSize = overview.worldSize;
    const int64_t w = out.worldSize;
    MOEWB_ASSIGN_OR_RETURN(Statement q, Statement::prepare(m_db,
                                                           "SELECT rank, expert, total(tokens), "
                                                           "total(dropped) FROM expert_load" +
                                                               filterClause(filter, false) +
                                                               " GROUP BY rank, expert"));
    MOEWB_RETURN_IF_ERROR(bindFilter(q, filter, false));
    std::vector<std::tuple<int32_t, int32_t, int64_t, int64_t>> cells;  // rank, expert, tok, drop
    int64_t clamped = 0;
    MOEWB_RETURN_IF_ERROR(forEachRow(q, [&](const Statement& s) {
      const int64_t rank = s.columnInt(0), expert = s.columnInt(1);
      if (rank < 0 || rank >= w || expert < 0 || expert >= kMaxExperts) return;
      out.numExperts = std::max(out.numExperts, int32_t(expert + 1));
      cells.emplace_back(int32_t(rank), int32_t(expert), clampToInt64(s.columnDouble(2), &clamped),
                         clampToInt64(s.columnDouble(3), &clamped));
    }));
    const int64_t e = out.numExperts;
    const std::vector<EpPlace> places = epPlaces(overview, out.worldSize);
    out.ranks.resize(size_t(w));
    for (int32_t r = 0; r < w; ++r) {
      RankLoad& load = out.ranks[size_t(r)];
      const EpPlace& place = places[size_t(r)];
      load.rank = r;
      load.epGroup = place.group;
      load.firstExpert = int32_t(place.groupRank * e / place.groupSize);
      load.expertCount = int32_t((place.groupRank + 1) * e / place.groupSize) - load.firstExpert;
    }
    // The rank of `source`'s EP group that hosts `expert` (the source itself without a group).
    auto host = [&](int32_t source, int32_t expert) {
      const EpPlace& place = places[size_t(source)];
      if (place.group < 0) return source;
      int32_t groupRank = 0;
      while ((groupRank + 1) * e / place.groupSize <= expert) ++groupRank;
      return overview.epGroups[size_t(place.group)][size_t(groupRank)];
    };
    auto add = [&](int64_t& to, int64_t value) { to = saturatingAdd(to, value, &clamped); };
    out.rowsMatrix.assign(size_t(w * w), 0);
    // [host rank]: expert -> rows it computed
    std::vector<std::map<int32_t, int64_t>> expertRows(static_cast<size_t>(w));
    for (const auto& [rank, expert, tokens, dropped] : cells) {
      RankLoad& load = out.ranks[size_t(rank)];
      add(load.routedRows, tokens);
      add(load.droppedRows, dropped);
      const int32_t dst = host(rank, expert);
      if (dst < 0 || dst >= w) continue;
      const int64_t rows = saturatingSub(tokens, dropped, &clamped);
      add(out.rowsMatrix[size_t(rank * w + dst)], rows);
      add(expertRows[size_t(dst)][expert], rows);
      if (dst != rank) add(load.sentRows, rows);
      add(out.ranks[size_t(dst)].receivedRows, rows);
    }
    for (RankLoad& load : out.ranks) {
      summarizeExperts(expertRows[size_t(load.rank)], load, &clamped);
    }
    // Sequence tokens per rank over the filter's steps (step rows of the first run).
    std::string tokensSql =
        "SELECT rank, total(tokens) FROM step WHERE run = (SELECT min(id) FROM run)";
    if (filter.step) tokensSql += " AND step = ?1";
    MOEWB_ASSIGN_OR_RETURN(Statement t, Statement::prepare(m_db, tokensSql + " GROUP BY rank"));
    if (filter.step) MOEWB_RETURN_IF_ERROR(t.bindInt(1, *filter.step));
    MOEWB_RETURN_IF_ERROR(forEachRow(t, [&](const Statement& s) {
      const int64_t rank = s.columnInt(0);
      if (rank >= 0 && rank < w) {
        out.ranks[size_t(rank)].tokens = clampToInt64(s.columnDouble(1), &clamped);
      }
    }));
    countClamped(clamped);
    return out;
  });
}

}  // namespace moewb::storage::detail
