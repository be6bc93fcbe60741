// The reader's parallel-run queries: what a parallel trace holds (world size, steps, a2a layers
// and phases, EP groups), the all-to-all traffic matrix of a step / layer / phase selection, and
// collectives matched across their peers by (step, comm_group, seq, peers); the routed rows per
// rank are in sqlite_trace_reader_rank_loads.cpp. Reads go through the a2a_traffic(step, layer),
// collective(step, rank) and slice(track, start_ns) indexes when a step is given; "all steps"
// scans the table once with SQL doing the sums. Values from the file are untrusted: ranks outside
// [0, world size) are left out, never indexed; sums and time spans that overflow int64 are
// clamped and counted (stats row values_clamped).
// Also the defaults of TraceReader's parallel queries (no parallel data).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <tuple>

#include "sqlite_trace_reader.h"
#include "sqlite_trace_reader_parallel.h"

namespace moewb::storage {

namespace {
int64_t clampedAdd(int64_t a, int64_t b) {
  return detail::saturatingAdd(a, b);
}
}  // namespace

int64_t A2aTrafficMatrix::at(int32_t src, int32_t dst) const {
  if (src < 0 || dst < 0 || src >= worldSize || dst >= worldSize) return 0;
  return bytes[size_t(src) * size_t(worldSize) + size_t(dst)];
}

std::vector<int64_t> A2aTrafficMatrix::sentBySource() const {
  std::vector<int64_t> sums(size_t(std::max(worldSize, 0)), 0);
  for (int32_t s = 0; s < worldSize; ++s) {
    for (int32_t d = 0; d < worldSize; ++d) sums[size_t(s)] = clampedAdd(sums[size_t(s)], at(s, d));
  }
  return sums;
}

std::vector<int64_t> A2aTrafficMatrix::receivedByDest() const {
  std::vector<int64_t> sums(size_t(std::max(worldSize, 0)), 0);
  for (int32_t s = 0; s < worldSize; ++s) {
    for (int32_t d = 0; d < worldSize; ++d) sums[size_t(d)] = clampedAdd(sums[size_t(d)], at(s, d));
  }
  return sums;
}

int64_t A2aTrafficMatrix::totalBytes() const {
  int64_t total = 0;
  for (int64_t b : bytes) total = clampedAdd(total, b);
  return total;
}

int64_t A2aTrafficMatrix::crossRankBytes() const {
  int64_t total = 0;
  for (int32_t s = 0; s < worldSize; ++s) {
    for (int32_t d = 0; d < worldSize; ++d) {
      if (s != d) total = clampedAdd(total, at(s, d));
    }
  }
  return total;
}

Result<ParallelOverview> TraceReader::parallelOverview() {
  return ParallelOverview{};
}

Result<A2aTrafficMatrix> TraceReader::a2aTrafficMatrix(const ParallelFilter&) {
  return A2aTrafficMatrix{};
}

Result<RankLoads> TraceReader::rankLoads(const ParallelFilter&) {
  return RankLoads{};
}

Result<std::vector<MatchedCollective>> TraceReader::stepCollectives(int64_t) {
  return std::vector<MatchedCollective>{};
}

Result<std::optional<MatchedCollective>> TraceReader::collectiveAt(TrackId, int64_t) {
  return std::optional<MatchedCollective>{};
}

namespace detail {

namespace {

constexpr const char* kCollectiveColumns =
    "SELECT track, start_ns, dur_ns, step, layer, rank, op, comm_group, phase, seq, bytes_sent, "
    "bytes_received, peers, ok FROM collective ";

// Canonical order of the EP all-to-all phases (forward dispatch and combine, then backward).
constexpr const char* kPhaseOrder[] = {"dispatch", "combine", "combine.bwd", "dispatch.bwd"};

CollectiveRow collectiveFromColumns(const Statement& s) {
  CollectiveRow row;
  row.track = TrackId(s.columnInt(0));
  row.startNs = s.columnInt(1);
  row.durNs = s.columnInt(2);
  row.step = s.columnInt(3);
  row.layer = s.columnInt32(4);
  row.rank = s.columnInt32(5);
  row.op = s.columnText(6);
  row.commGroup = s.columnText(7);
  row.phase = s.columnText(8);
  row.seq = s.columnInt(9);
  row.bytesSent = s.columnInt(10);
  row.bytesReceived = s.columnInt(11);
  row.peers = s.columnText(12);
  row.ok = s.columnInt(13) != 0;
  return row;
}

// One MatchedCollective from the rows of one (step, comm_group, seq, peers), any order; sums and
// spans that overflow int64 are clamped, counted in *clamped.
MatchedCollective matchRows(const std::vector<CollectiveRow>& rows, int64_t* clamped) {
  MatchedCollective m;
  const CollectiveRow& first = rows.front();
  m.step = first.step;
  m.layer = first.layer;
  m.op = first.op;
  m.commGroup = first.commGroup;
  m.phase = first.phase;
  m.seq = first.seq;
  m.peers = first.peers;
  m.peerRanks = parsePeers(first.peers);
  for (const CollectiveRow& r : rows) {
    if (r.op != m.op) m.opMismatch = true;
    CollectiveArrival a;
    a.rank = r.rank;
    a.track = r.track;
    a.startNs = r.startNs;
    a.durNs = r.durNs;
    a.bytesSent = r.bytesSent;
    a.bytesReceived = r.bytesReceived;
    a.ok = r.ok;
    m.arrivals.push_back(a);
  }
  // Peer order first (ranks not among the peers after them, by rank).
  auto order = [&](int32_t rank) {
    const auto it = std::find(m.peerRanks.begin(), m.peerRanks.end(), rank);
    return std::make_pair(it - m.peerRanks.begin(), rank);
  };
  std::stable_sort(m.arrivals.begin(), m.arrivals.end(),
                   [&](const CollectiveArrival& a, const CollectiveArrival& b) {
                     return order(a.rank) < order(b.rank);
                   });
  for (int32_t peer : m.peerRanks) {
    const bool found = std::any_of(m.arrivals.begin(), m.arrivals.end(),
                                   [&](const CollectiveArrival& a) { return a.rank == peer; });
    if (!found) m.missingRanks.push_back(peer);
  }
  m.firstStartNs = m.arrivals.front().startNs;
  m.lastStartNs = m.arrivals.front().startNs;
  m.lastRank = m.arrivals.front().rank;
  m.endNs = std::numeric_limits<int64_t>::min();
  for (const CollectiveArrival& a : m.arrivals) {
    m.ok = m.ok && a.ok;
    m.bytesSent = saturatingAdd(m.bytesSent, a.bytesSent, clamped);
    m.bytesReceived = saturatingAdd(m.bytesReceived, a.bytesReceived, clamped);
    m.firstStartNs = std::min(m.firstStartNs, a.startNs);
    m.endNs = std::max(m.endNs, saturatingAdd(a.startNs, a.durNs, clamped));
    if (a.startNs > m.lastStartNs || (a.startNs == m.lastStartNs && a.rank < m.lastRank)) {
      m.lastStartNs = a.startNs;
      m.lastRank = a.rank;
    }
  }
  for (CollectiveArrival& a : m.arrivals) {
    a.waitNs = saturatingSub(m.lastStartNs, a.startNs, clamped);
    m.totalWaitNs = saturatingAdd(m.totalWaitNs, a.waitNs, clamped);
  }
  return m;
}

}  // namespace

std::vector<int32_t> parsePeers(const std::string& text) {
  std::vector<int32_t> ranks;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    int32_t rank = -1;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + comma, rank);
    if (ec != std::errc() || ptr != text.data() + comma || rank < 0 || rank >= kMaxWorldSize) {
      return {};
    }
    ranks.push_back(rank);
    at = comma + 1;
  }
  return ranks;
}

std::string filterClause(const ParallelFilter& filter, bool withPhase) {
  std::string where = " WHERE 1";
  if (filter.step) where += " AND step = ?";
  if (filter.layer) where += " AND layer = ?";
  if (withPhase && !filter.phase.empty()) where += " AND phase = ?";
  return where;
}

Status bindFilter(Statement& q, const ParallelFilter& filter, bool withPhase) {
  int index = 0;
  if (filter.step) MOEWB_RETURN_IF_ERROR(q.bindInt(++index, *filter.step));
  if (filter.layer) MOEWB_RETURN_IF_ERROR(q.bindInt(++index, *filter.layer));
  if (withPhase && !filter.phase.empty()) MOEWB_RETURN_IF_ERROR(q.bindText(++index, filter.phase));
  return Status::ok();
}

// The first run's world size clamped to [1, kMaxWorldSize]; nullopt without a run row.
Result<std::optional<int32_t>> SqliteTraceReader::runWorldSize() {
  return queryFirstRow(m_db, "SELECT world_size FROM run ORDER BY id LIMIT 1",
                       [](const Statement& s) {
                         return int32_t(std::clamp<int64_t>(s.columnInt(0), 1, kMaxWorldSize));
                       });
}

Result<ParallelOverview> SqliteTraceReader::parallelOverview() {
  return inReadTransaction<ParallelOverview>([&] { return parallelOverviewInSnapshot(); });
}

Result<ParallelOverview> SqliteTraceReader::parallelOverviewInSnapshot() {
  ParallelOverview overview;
  MOEWB_ASSIGN_OR_RETURN(const std::optional<int32_t> worldSize, runWorldSize());
  overview.worldSize = worldSize.value_or(1);
  MOEWB_ASSIGN_OR_RETURN(
      overview.steps,
      queryRows(m_db, "SELECT DISTINCT step FROM collective ORDER BY step", column0Int));
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> a2aStep,
      queryFirstRow(m_db, "SELECT min(step) FROM a2a_traffic", column0IntOrNull));
  if (!a2aStep) return overview;

  MOEWB_ASSIGN_OR_RETURN(
      overview.layers,
      queryRows(
          m_db, "SELECT DISTINCT layer FROM a2a_traffic WHERE step = ?1 ORDER BY 1",
          [](const Statement& s) { return s.columnInt32(0); }, *a2aStep));
  MOEWB_ASSIGN_OR_RETURN(
      std::vector<std::string> others,
      queryRows(m_db, "SELECT DISTINCT phase FROM a2a_traffic WHERE step = ?1 ORDER BY 1",
                column0Text, *a2aStep));
  for (const char* phase : kPhaseOrder) {
    const auto it = std::find(others.begin(), others.end(), phase);
    if (it == others.end()) continue;
    overview.phases.push_back(*it);
    others.erase(it);
  }
  overview.phases.insert(overview.phases.end(), others.begin(), others.end());

  // The EP groups as the all-to-alls of that step ran them (peers in group order).
  MOEWB_RETURN_IF_ERROR(queryEachRow(
      m_db, "SELECT DISTINCT peers FROM collective WHERE step = ?1 AND comm_group = 'ep'",
      [&](const Statement& s) {
        std::vector<int32_t> members = parsePeers(s.columnText(0));
        if (!members.empty()) overview.epGroups.push_back(std::move(members));
      },
      *a2aStep));
  std::sort(overview.epGroups.begin(), overview.epGroups.end());
  return overview;
}

Result<A2aTrafficMatrix> SqliteTraceReader::a2aTrafficMatrix(const ParallelFilter& filter) {
  return inReadTransaction<A2aTrafficMatrix>([&]() -> Result<A2aTrafficMatrix> {
    MOEWB_ASSIGN_OR_RETURN(
        Statement q,
        Statement::prepare(m_db,
                           "SELECT src_rank, dst_rank, total(bytes), "
                           "count(*) FROM a2a_traffic" +
                               filterClause(filter, true) + " GROUP BY src_rank, dst_rank"));
    MOEWB_RETURN_IF_ERROR(bindFilter(q, filter, true));
    std::vector<std::tuple<int64_t, int64_t, int64_t>> cells;  // src, dst, bytes
    A2aTrafficMatrix matrix;
    int64_t clamped = 0;
    MOEWB_RETURN_IF_ERROR(forEachRow(q, [&](const Statement& s) {
      cells.emplace_back(s.columnInt(0), s.columnInt(1), clampToInt64(s.columnDouble(2), &clamped));
      matrix.rowsRead = saturatingAdd(matrix.rowsRead, s.columnInt(3), &clamped);
    }));
    MOEWB_ASSIGN_OR_RETURN(const std::optional<int32_t> worldSize, runWorldSize());
    if (worldSize) {
      matrix.worldSize = *worldSize;
    } else {
      int64_t largest = 0;
      for (const auto& [src, dst, bytes] : cells) largest = std::max({largest, src, dst});
      matrix.worldSize = int32_t(std::clamp<int64_t>(largest, 0, kMaxWorldSize - 1) + 1);
    }
    const int64_t w = matrix.worldSize;
    matrix.bytes.assign(size_t(w * w), 0);
    for (const auto& [src, dst, bytes] : cells) {
      if (src < 0 || dst < 0 || src >= w || dst >= w) {
        matrix.outOfRangeBytes = saturatingAdd(matrix.outOfRangeBytes, bytes, &clamped);
      } else {
        int64_t& cell = matrix.bytes[size_t(src * w + dst)];
        cell = saturatingAdd(cell, bytes, &clamped);
      }
    }
    countClamped(clamped);
    return matrix;
  });
}

Result<std::vector<MatchedCollective>> SqliteTraceReader::stepCollectives(int64_t step) {
  MOEWB_ASSIGN_OR_RETURN(
      const std::vector<CollectiveRow> rows,
      queryRows(m_db,
                std::string(kCollectiveColumns) +
                    "WHERE step = ?1 ORDER BY comm_group, peers, seq, rank, start_ns",
                collectiveFromColumns, step));
  std::vector<MatchedCollective> out;
  int64_t clamped = 0;
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin + 1;
    while (end < rows.size() && rows[end].commGroup == rows[begin].commGroup &&
           rows[end].peers == rows[begin].peers && rows[end].seq == rows[begin].seq) {
      ++end;
    }
    out.push_back(
        matchRows({rows.begin() + ptrdiff_t(begin), rows.begin() + ptrdiff_t(end)}, &clamped));
    begin = end;
  }
  countClamped(clamped);
  std::stable_sort(out.begin(), out.end(),
                   [](const MatchedCollective& a, const MatchedCollective& b) {
                     return std::tie(a.firstStartNs, a.commGroup, a.seq) <
                            std::tie(b.firstStartNs, b.commGroup, b.seq);
                   });
  return out;
}

Result<std::optional<MatchedCollective>> SqliteTraceReader::collectiveAt(TrackId track,
                                                                         int64_t startNs) {
  using Found = std::optional<MatchedCollective>;
  return inReadTransaction<Found>([&]() -> Result<Found> {
    // The slice's step and rank.
    MOEWB_ASSIGN_OR_RETURN(
        const auto place,
        queryFirstRow(
            m_db,
            "SELECT s.step, t.rank FROM slice s JOIN track t ON t.id = s.track "
            "WHERE s.track = ?1 AND s.start_ns = ?2 ORDER BY s.id LIMIT 1",
            [](const Statement& s) { return std::pair(s.columnInt(0), s.columnInt(1)); },
            track.value, startNs));
    if (!place) return Found{};
    const auto [step, rank] = *place;
    MOEWB_ASSIGN_OR_RETURN(
        const std::optional<CollectiveRow> key,
        queryFirstRow(m_db,
                      std::string(kCollectiveColumns) +
                          "WHERE step = ?1 AND rank = ?2 AND track = ?3 AND start_ns = ?4 LIMIT 1",
                      collectiveFromColumns, step, rank, track.value, startNs));
    if (!key) return Found{};
    MOEWB_ASSIGN_OR_RETURN(
        const std::vector<CollectiveRow> rows,
        queryRows(m_db,
                  std::string(kCollectiveColumns) +
                      "WHERE step = ?1 AND comm_group = ?2 AND seq = ?3 AND peers = ?4 "
                      "ORDER BY rank, start_ns",
                  collectiveFromColumns, step, key->commGroup, key->seq, key->peers));
    if (rows.empty()) return Found{};
    int64_t clamped = 0;
    Found found(matchRows(rows, &clamped));
    countClamped(clamped);
    return found;
  });
}

}  // namespace detail
}  // namespace moewb::storage
