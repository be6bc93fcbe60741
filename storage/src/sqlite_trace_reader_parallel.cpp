// The reader's parallel-run queries: what a parallel trace holds (world size, steps, a2a layers
// and phases, EP groups), the all-to-all traffic matrix of a step / layer / phase selection, the
// routed rows and expert load per rank, and collectives matched across their peers by
// (step, comm_group, seq, peers). Reads go through the a2a_traffic(step, layer),
// collective(step, rank), expert_load(step, layer) and slice(track, start_ns) indexes when a step
// is given; "all steps" scans the table once with SQL doing the sums. Values from the file are
// untrusted: ranks outside [0, world size) and absurd expert ids are left out, never indexed.
// Also the defaults of TraceReader's parallel queries (no parallel data).
#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "sqlite_trace_reader.h"

namespace moewb::storage {

namespace {
// Bounds for untrusted files: no [W, W] or [W, E] buffer grows past these.
constexpr int32_t kMaxRanks = 4096;
constexpr int64_t kMaxExperts = 1 << 16;
}  // namespace

int64_t A2aTrafficMatrix::at(int32_t src, int32_t dst) const {
  if (src < 0 || dst < 0 || src >= worldSize || dst >= worldSize) return 0;
  return bytes[size_t(src) * size_t(worldSize) + size_t(dst)];
}

std::vector<int64_t> A2aTrafficMatrix::sentBySource() const {
  std::vector<int64_t> sums(size_t(worldSize), 0);
  for (int32_t s = 0; s < worldSize; ++s) {
    for (int32_t d = 0; d < worldSize; ++d) sums[size_t(s)] += at(s, d);
  }
  return sums;
}

std::vector<int64_t> A2aTrafficMatrix::receivedByDest() const {
  std::vector<int64_t> sums(size_t(worldSize), 0);
  for (int32_t s = 0; s < worldSize; ++s) {
    for (int32_t d = 0; d < worldSize; ++d) sums[size_t(d)] += at(s, d);
  }
  return sums;
}

int64_t A2aTrafficMatrix::totalBytes() const {
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

int64_t A2aTrafficMatrix::crossRankBytes() const {
  int64_t total = totalBytes();
  for (int32_t r = 0; r < worldSize; ++r) total -= at(r, r);
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

// "0,1,2" -> {0, 1, 2}; empty when any part is not a rank in [0, kMaxRanks).
std::vector<int32_t> parsePeers(const std::string& text) {
  std::vector<int32_t> ranks;
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    int32_t rank = -1;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + comma, rank);
    if (ec != std::errc() || ptr != text.data() + comma || rank < 0 || rank >= kMaxRanks) {
      return {};
    }
    ranks.push_back(rank);
    at = comma + 1;
  }
  return ranks;
}

// WHERE clause of the step / layer / phase filter (bound in that order from index 1).
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

CollectiveRow collectiveFromColumns(const Statement& s) {
  CollectiveRow row;
  row.track = TrackId(s.columnInt(0));
  row.startNs = s.columnInt(1);
  row.durNs = s.columnInt(2);
  row.step = s.columnInt(3);
  row.layer = int32_t(s.columnInt(4));
  row.rank = int32_t(s.columnInt(5));
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

Result<std::vector<CollectiveRow>> readCollectives(Statement& q) {
  std::vector<CollectiveRow> rows;
  while (true) {
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, q.step());
    if (!hasRow) break;
    rows.push_back(collectiveFromColumns(q));
  }
  return rows;
}

// One MatchedCollective from the rows of one (step, comm_group, seq, peers), any order.
MatchedCollective matchRows(const std::vector<CollectiveRow>& rows) {
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
  m.endNs = m.arrivals.front().startNs + m.arrivals.front().durNs;
  for (const CollectiveArrival& a : m.arrivals) {
    m.ok = m.ok && a.ok;
    m.bytesSent += a.bytesSent;
    m.bytesReceived += a.bytesReceived;
    m.firstStartNs = std::min(m.firstStartNs, a.startNs);
    m.endNs = std::max(m.endNs, a.startNs + a.durNs);
    if (a.startNs > m.lastStartNs || (a.startNs == m.lastStartNs && a.rank < m.lastRank)) {
      m.lastStartNs = a.startNs;
      m.lastRank = a.rank;
    }
  }
  for (CollectiveArrival& a : m.arrivals) {
    a.waitNs = m.lastStartNs - a.startNs;
    m.totalWaitNs += a.waitNs;
  }
  return m;
}

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

}  // namespace

// The first run's world size clamped to [1, kMaxRanks]; nullopt without a run row.
Result<std::optional<int32_t>> SqliteTraceReader::runWorldSize() {
  MOEWB_ASSIGN_OR_RETURN(
      Statement q, Statement::prepare(m_db, "SELECT world_size FROM run ORDER BY id LIMIT 1"));
  MOEWB_ASSIGN_OR_RETURN(const bool hasRow, q.step());
  if (!hasRow) return std::optional<int32_t>{};
  return std::optional<int32_t>(int32_t(std::clamp<int64_t>(q.columnInt(0), 1, kMaxRanks)));
}

Result<ParallelOverview> SqliteTraceReader::parallelOverview() {
  return inReadTransaction<ParallelOverview>([&] { return parallelOverviewInSnapshot(); });
}

Result<ParallelOverview> SqliteTraceReader::parallelOverviewInSnapshot() {
  ParallelOverview overview;
  MOEWB_ASSIGN_OR_RETURN(const std::optional<int32_t> worldSize, runWorldSize());
  overview.worldSize = worldSize.value_or(1);
  MOEWB_ASSIGN_OR_RETURN(
      Statement steps,
      Statement::prepare(m_db, "SELECT DISTINCT step FROM collective ORDER BY step"));
  while (true) {
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, steps.step());
    if (!hasRow) break;
    overview.steps.push_back(steps.columnInt(0));
  }
  MOEWB_ASSIGN_OR_RETURN(Statement firstA2a,
                         Statement::prepare(m_db, "SELECT min(step) FROM a2a_traffic"));
  MOEWB_ASSIGN_OR_RETURN(const bool hasA2a, firstA2a.step());
  if (!hasA2a || firstA2a.columnIsNull(0)) return overview;
  const int64_t a2aStep = firstA2a.columnInt(0);

  MOEWB_ASSIGN_OR_RETURN(
      Statement layers,
      Statement::prepare(m_db,
                         "SELECT DISTINCT layer FROM a2a_traffic WHERE step = ?1 ORDER BY 1"));
  MOEWB_RETURN_IF_ERROR(layers.bindInt(1, a2aStep));
  while (true) {
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, layers.step());
    if (!hasRow) break;
    overview.layers.push_back(int32_t(layers.columnInt(0)));
  }
  MOEWB_ASSIGN_OR_RETURN(
      Statement phases,
      Statement::prepare(m_db,
                         "SELECT DISTINCT phase FROM a2a_traffic WHERE step = ?1 ORDER BY 1"));
  MOEWB_RETURN_IF_ERROR(phases.bindInt(1, a2aStep));
  std::vector<std::string> others;
  while (true) {
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, phases.step());
    if (!hasRow) break;
    others.push_back(phases.columnText(0));
  }
  for (const char* phase : kPhaseOrder) {
    const auto it = std::find(others.begin(), others.end(), phase);
    if (it == others.end()) continue;
    overview.phases.push_back(*it);
    others.erase(it);
  }
  overview.phases.insert(overview.phases.end(), others.begin(), others.end());

  // The EP groups as the all-to-alls of that step ran them (peers in group order).
  MOEWB_ASSIGN_OR_RETURN(Statement groups,
                         Statement::prepare(m_db,
                                            "SELECT DISTINCT peers FROM collective "
                                            "WHERE step = ?1 AND comm_group = 'ep'"));
  MOEWB_RETURN_IF_ERROR(groups.bindInt(1, a2aStep));
  while (true) {
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, groups.step());
    if (!hasRow) break;
    std::vector<int32_t> members = parsePeers(groups.columnText(0));
    if (!members.empty()) overview.epGroups.push_back(std::move(members));
  }
  std::sort(overview.epGroups.begin(), overview.epGroups.end());
  return overview;
}

Result<A2aTrafficMatrix> SqliteTraceReader::a2aTrafficMatrix(const ParallelFilter& filter) {
  return inReadTransaction<A2aTrafficMatrix>([&]() -> Result<A2aTrafficMatrix> {
    MOEWB_ASSIGN_OR_RETURN(Statement q, Statement::prepare(m_db,
                                                           "SELECT src_rank, dst_rank, sum(bytes), "
                                                           "count(*) FROM a2a_traffic" +
                                                               filterClause(filter, true) +
                                                               " GROUP BY src_rank, dst_rank"));
    MOEWB_RETURN_IF_ERROR(bindFilter(q, filter, true));
    std::vector<std::tuple<int64_t, int64_t, int64_t>> cells;  // src, dst, bytes
    A2aTrafficMatrix matrix;
    while (true) {
      MOEWB_ASSIGN_OR_RETURN(const bool hasRow, q.step());
      if (!hasRow) break;
      cells.emplace_back(q.columnInt(0), q.columnInt(1), q.columnInt(2));
      matrix.rowsRead += q.columnInt(3);
    }
    MOEWB_ASSIGN_OR_RETURN(const std::optional<int32_t> worldSize, runWorldSize());
    if (worldSize) {
      matrix.worldSize = *worldSize;
    } else {
      int64_t largest = 0;
      for (const auto& [src, dst, bytes] : cells) largest = std::max({largest, src, dst});
      matrix.worldSize = int32_t(std::clamp<int64_t>(largest + 1, 1, kMaxRanks));
    }
    const int64_t w = matrix.worldSize;
    matrix.bytes.assign(size_t(w * w), 0);
    for (const auto& [src, dst, bytes] : cells) {
      if (src < 0 || dst < 0 || src >= w || dst >= w) {
        matrix.outOfRangeBytes += bytes;
      } else {
        matrix.bytes[size_t(src * w + dst)] += bytes;
      }
    }
    return matrix;
  });
}

Result<RankLoads> SqliteTraceReader::rankLoads(const ParallelFilter& filter) {
  return inReadTransaction<RankLoads>([&]() -> Result<RankLoads> {
    MOEWB_ASSIGN_OR_RETURN(const ParallelOverview overview, parallelOverviewInSnapshot());
    RankLoads out;
    out.worldSize = overview.worldSize;
    const int64_t w = out.worldSize;
    MOEWB_ASSIGN_OR_RETURN(Statement q, Statement::prepare(m_db,
                                                           "SELECT rank, expert, sum(tokens), "
                                                           "sum(dropped) FROM expert_load" +
                                                               filterClause(filter, false) +
                                                               " GROUP BY rank, expert"));
    MOEWB_RETURN_IF_ERROR(bindFilter(q, filter, false));
    std::vector<std::tuple<int32_t, int32_t, int64_t, int64_t>> cells;  // rank, expert, tok, drop
    while (true) {
      MOEWB_ASSIGN_OR_RETURN(const bool hasRow, q.step());
      if (!hasRow) break;
      const int64_t rank = q.columnInt(0), expert = q.columnInt(1);
      if (rank < 0 || rank >= w || expert < 0 || expert >= kMaxExperts) continue;
      out.numExperts = std::max(out.numExperts, int32_t(expert + 1));
      cells.emplace_back(int32_t(rank), int32_t(expert), q.columnInt(2), q.columnInt(3));
    }
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
    out.rowsMatrix.assign(size_t(w * w), 0);
    std::vector<int64_t> expertRows(size_t(w * e), 0);  // [host rank, expert] rows it computed
    for (const auto& [rank, expert, tokens, dropped] : cells) {
      RankLoad& load = out.ranks[size_t(rank)];
      load.routedRows += tokens;
      load.droppedRows += dropped;
      const int32_t dst = host(rank, expert);
      if (dst < 0 || dst >= w) continue;
      const int64_t rows = tokens - dropped;
      out.rowsMatrix[size_t(rank * w + dst)] += rows;
      expertRows[size_t(dst * e + expert)] += rows;
      if (dst != rank) load.sentRows += rows;
      out.ranks[size_t(dst)].receivedRows += rows;
    }
    for (RankLoad& load : out.ranks) {
      int64_t sum = 0;
      for (int32_t x = load.firstExpert; x < load.firstExpert + load.expertCount; ++x) {
        const int64_t rows = expertRows[size_t(load.rank * e + x)];
        sum += rows;
        if (load.hottestExpert < 0 || rows > load.maxExpertRows) {
          load.maxExpertRows = rows;
          load.hottestExpert = x;
        }
      }
      load.meanExpertRows = load.expertCount > 0 ? double(sum) / double(load.expertCount) : 0.0;
    }
    // Sequence tokens per rank over the filter's steps (step rows of the first run).
    std::string tokensSql =
        "SELECT rank, sum(tokens) FROM step WHERE run = (SELECT min(id) FROM run)";
    if (filter.step) tokensSql += " AND step = ?1";
    MOEWB_ASSIGN_OR_RETURN(Statement t, Statement::prepare(m_db, tokensSql + " GROUP BY rank"));
    if (filter.step) MOEWB_RETURN_IF_ERROR(t.bindInt(1, *filter.step));
    while (true) {
      MOEWB_ASSIGN_OR_RETURN(const bool hasRow, t.step());
      if (!hasRow) break;
      const int64_t rank = t.columnInt(0);
      if (rank >= 0 && rank < w) out.ranks[size_t(rank)].tokens = t.columnInt(1);
    }
    return out;
  });
}

Result<std::vector<MatchedCollective>> SqliteTraceReader::stepCollectives(int64_t step) {
  MOEWB_ASSIGN_OR_RETURN(
      Statement q, Statement::prepare(m_db, std::string(kCollectiveColumns) +
                                                "WHERE step = ?1 "
                                                "ORDER BY comm_group, peers, seq, rank, start_ns"));
  MOEWB_RETURN_IF_ERROR(q.bindInt(1, step));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<CollectiveRow> rows, readCollectives(q));
  std::vector<MatchedCollective> out;
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin + 1;
    while (end < rows.size() && rows[end].commGroup == rows[begin].commGroup &&
           rows[end].peers == rows[begin].peers && rows[end].seq == rows[begin].seq) {
      ++end;
    }
    out.push_back(matchRows({rows.begin() + ptrdiff_t(begin), rows.begin() + ptrdiff_t(end)}));
    begin = end;
  }
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
    MOEWB_ASSIGN_OR_RETURN(Statement slice,
                           Statement::prepare(m_db,
                                              "SELECT s.step, t.rank FROM slice s "
                                              "JOIN track t ON t.id = s.track "
                                              "WHERE s.track = ?1 AND s.start_ns = ?2 "
                                              "ORDER BY s.id LIMIT 1"));
    MOEWB_RETURN_IF_ERROR(slice.bindAll(track.value, startNs));
    MOEWB_ASSIGN_OR_RETURN(const bool hasSlice, slice.step());
    if (!hasSlice) return Found{};
    const int64_t step = slice.columnInt(0), rank = slice.columnInt(1);
    MOEWB_ASSIGN_OR_RETURN(Statement own,
                           Statement::prepare(m_db, std::string(kCollectiveColumns) +
                                                        "WHERE step = ?1 AND rank = ?2 AND "
                                                        "track = ?3 AND start_ns = ?4 LIMIT 1"));
    MOEWB_RETURN_IF_ERROR(own.bindAll(step, rank, track.value, startNs));
    MOEWB_ASSIGN_OR_RETURN(const bool hasOwn, own.step());
    if (!hasOwn) return Found{};
    const CollectiveRow key = collectiveFromColumns(own);
    MOEWB_ASSIGN_OR_RETURN(
        Statement peers,
        Statement::prepare(m_db, std::string(kCollectiveColumns) +
                                     "WHERE step = ?1 AND comm_group = ?2 AND seq = ?3 AND "
                                     "peers = ?4 ORDER BY rank, start_ns"));
    MOEWB_RETURN_IF_ERROR(peers.bindAll(step, key.commGroup, key.seq, key.peers));
    MOEWB_ASSIGN_OR_RETURN(const std::vector<CollectiveRow> rows, readCollectives(peers));
    if (rows.empty()) return Found{};
    return Found(matchRows(rows));
  });
}

}  // namespace detail
}  // namespace moewb::storage
