// TraceReader's parallel-run queries on a real trace of 4 in-process ranks (EP = 2 x FSDP = 2, so
// two EP groups {0, 1} and {2, 3}), each result checked against plain SQL over the same file:
// the traffic matrix's cross-rank total equals the collective rows' bytes_sent of the phased
// all_to_all_v ops, its column sums their bytes_received; routed rows per rank times the row size
// give the dispatch traffic cell by cell; collectives match across their peers by (comm_group,
// seq, peers). Also a one-rank trace (no parallel data) and out-of-range ranks in a bad file.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "moewb/storage/trace_reader.h"
#include "parallel_trace.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using moewb::testing::kParallelTraceDModel;
using moewb::testing::kParallelTraceExperts;
using testing::queryCsv;

constexpr int32_t kWorld = 4;
constexpr int32_t kEp = 2;
constexpr int64_t kSteps = 3;
constexpr int64_t kRowBytes = int64_t(kParallelTraceDModel) * int64_t(sizeof(float));

int64_t sqlInt(const std::string& path, const std::string& sql) {
  const std::vector<std::string> rows = queryCsv(path, sql);
  if (rows.empty() || rows.front() == "NULL") return 0;
  return std::stoll(rows.front());
}

class TraceReaderParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new testing::TempDir;
    s_path = s_dir->path("ep2x2.sqlite");
    const Status written = moewb::testing::writeParallelTrace(s_path, kWorld, kEp, kSteps);
    ASSERT_TRUE(written.isOk()) << written.toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  void SetUp() override {
    auto reader = TraceReader::open(s_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  static testing::TempDir* s_dir;
  static std::string s_path;
  std::unique_ptr<TraceReader> m_reader;
};

testing::TempDir* TraceReaderParallel::s_dir = nullptr;
std::string TraceReaderParallel::s_path;

TEST_F(TraceReaderParallel, OverviewListsStepsLayersPhasesAndEpGroups) {
  auto overview = m_reader->parallelOverview();
  ASSERT_TRUE(overview.isOk()) << overview.status().toString();
  EXPECT_EQ(overview->worldSize, kWorld);
  EXPECT_EQ(overview->steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(overview->layers, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(overview->phases,
            (std::vector<std::string>{"dispatch", "combine", "combine.bwd", "dispatch.bwd"}));
  EXPECT_EQ(overview->epGroups, (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(overview->hasParallelData());
}

TEST_F(TraceReaderParallel, MatrixTotalsEqualTheAllToAllCollectiveBytes) {
  for (const char* phase : {"dispatch", "combine", "combine.bwd", "dispatch.bwd"}) {
    SCOPED_TRACE(phase);
    auto matrix = m_reader->a2aTrafficMatrix({.phase = phase});
    ASSERT_TRUE(matrix.isOk()) << matrix.status().toString();
    ASSERT_EQ(matrix->worldSize, kWorld);
    const std::string where = std::string(
                                  " FROM collective WHERE op = 'all_to_all_v' AND ok = 1 "
                                  "AND phase = '") +
                              phase + "'";
    const int64_t sent = sqlInt(s_path, "SELECT sum(bytes_sent)" + where);
    ASSERT_GT(sent, 0);
    EXPECT_EQ(matrix->crossRankBytes(), sent);
    EXPECT_EQ(matrix->totalBytes(),
              sqlInt(s_path, std::string("SELECT sum(bytes) FROM a2a_traffic WHERE phase = '") +
                                 phase + "'"));
    EXPECT_EQ(matrix->outOfRangeBytes, 0);
    // Column sums without the diagonal are what each rank received.
    const std::vector<int64_t> received = matrix->receivedByDest();
    for (int32_t r = 0; r < kWorld; ++r) {
      EXPECT_EQ(
          received[size_t(r)] - matrix->at(r, r),
          sqlInt(s_path, "SELECT sum(bytes_received)" + where + " AND rank = " + std::to_string(r)))
          << "rank " << r;
    }
    // EP groups {0, 1} and {2, 3} never exchange rows.
    EXPECT_EQ(matrix->at(0, 2) + matrix->at(0, 3) + matrix->at(1, 2) + matrix->at(1, 3) +
                  matrix->at(2, 0) + matrix->at(2, 1) + matrix->at(3, 0) + matrix->at(3, 1),
              0);
  }
  auto all = m_reader->a2aTrafficMatrix({});
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(all->crossRankBytes(),
            sqlInt(s_path,
                   "SELECT sum(bytes_sent) FROM collective WHERE op = 'all_to_all_v' "
                   "AND ok = 1 AND phase != ''"));
  EXPECT_EQ(all->rowsRead, sqlInt(s_path, "SELECT count(*) FROM a2a_traffic"));
}

TEST_F(TraceReaderParallel, MatrixOfOneStepLayerAndPhaseHoldsItsRows) {
  auto matrix = m_reader->a2aTrafficMatrix({.step = 1, .layer = 1, .phase = "combine"});
  ASSERT_TRUE(matrix.isOk()) << matrix.status().toString();
  std::map<std::pair<int32_t, int32_t>, int64_t> want;
  for (const std::string& row : queryCsv(s_path,
                                         "SELECT src_rank, dst_rank, bytes FROM a2a_traffic "
                                         "WHERE step = 1 AND layer = 1 AND phase = 'combine'")) {
    int src = 0, dst = 0;
    long long bytes = 0;
    ASSERT_EQ(std::sscanf(row.c_str(), "%d,%d,%lld", &src, &dst, &bytes), 3) << row;
    want[{src, dst}] += bytes;
  }
  ASSERT_EQ(want.size(), 8u);  // 4 sources x 2 EP peers
  EXPECT_EQ(matrix->rowsRead, 8);
  for (int32_t s = 0; s < kWorld; ++s) {
    for (int32_t d = 0; d < kWorld; ++d) {
      const auto it = want.find({s, d});
      EXPECT_EQ(matrix->at(s, d), it == want.end() ? 0 : it->second) << s << " -> " << d;
    }
  }
  // What a rank dispatched to a peer comes back in the combine.
  auto dispatch = m_reader->a2aTrafficMatrix({.step = 1, .layer = 1, .phase = "dispatch"});
  ASSERT_TRUE(dispatch.isOk());
  for (int32_t s = 0; s < kWorld; ++s) {
    for (int32_t d = 0; d < kWorld; ++d) EXPECT_EQ(dispatch->at(s, d), matrix->at(d, s));
  }
}

TEST_F(TraceReaderParallel, RoutedRowsPerRankGiveTheDispatchBytes) {
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int32_t layer = 0; layer < 2; ++layer) {
      SCOPED_TRACE("step " + std::to_string(step) + " layer " + std::to_string(layer));
      auto loads = m_reader->rankLoads({.step = step, .layer = layer});
      ASSERT_TRUE(loads.isOk()) << loads.status().toString();
      auto dispatch =
          m_reader->a2aTrafficMatrix({.step = step, .layer = layer, .phase = "dispatch"});
      ASSERT_TRUE(dispatch.isOk());
      ASSERT_EQ(loads->worldSize, kWorld);
      ASSERT_EQ(loads->numExperts, kParallelTraceExperts);
      for (int32_t s = 0; s < kWorld; ++s) {
        for (int32_t d = 0; d < kWorld; ++d) {
          EXPECT_EQ(loads->rowsMatrix[size_t(s * kWorld + d)] * kRowBytes, dispatch->at(s, d))
              << s << " -> " << d;
        }
      }
    }
  }
}

TEST_F(TraceReaderParallel, RankLoadsMatchTheExpertLoadRows) {
  auto loads = m_reader->rankLoads({.step = 2, .layer = 0});
  ASSERT_TRUE(loads.isOk()) << loads.status().toString();
  const std::string load = " FROM expert_load WHERE step = 2 AND layer = 0";
  int64_t received = 0;
  for (const RankLoad& r : loads->ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const std::string rank = std::to_string(r.rank);
    EXPECT_EQ(r.epGroup, r.rank / kEp);
    EXPECT_EQ(r.expertCount, kParallelTraceExperts / kEp);
    EXPECT_EQ(r.firstExpert, (r.rank % kEp) * (kParallelTraceExperts / kEp));
    EXPECT_EQ(r.routedRows, sqlInt(s_path, "SELECT sum(tokens)" + load + " AND rank = " + rank));
    EXPECT_EQ(r.droppedRows, 0);  // dropless
    EXPECT_EQ(r.tokens,
              sqlInt(s_path, "SELECT tokens FROM step WHERE step = 2 AND rank = " + rank));
    // Rows for this rank's experts from both ranks of its EP group.
    const int32_t first = r.firstExpert, last = r.firstExpert + r.expertCount - 1;
    const std::string group =
        std::to_string(r.rank / kEp * kEp) + ", " + std::to_string(r.rank / kEp * kEp + 1);
    const std::string mine = load + " AND rank IN (" + group + ") AND expert BETWEEN " +
                             std::to_string(first) + " AND " + std::to_string(last);
    EXPECT_EQ(r.receivedRows, sqlInt(s_path, "SELECT sum(tokens)" + mine));
    EXPECT_EQ(r.maxExpertRows, sqlInt(s_path, "SELECT max(t) FROM (SELECT sum(tokens) AS t" + mine +
                                                  " GROUP BY expert)"));
    EXPECT_DOUBLE_EQ(r.meanExpertRows, double(r.receivedRows) / double(r.expertCount));
    EXPECT_GE(r.hottestExpert, first);
    EXPECT_LE(r.hottestExpert, last);
    received += r.receivedRows;
    // Sent = routed to the other rank of the group.
    const std::string other = load + " AND rank = " + rank + " AND NOT expert BETWEEN " +
                              std::to_string(first) + " AND " + std::to_string(last);
    EXPECT_EQ(r.sentRows, sqlInt(s_path, "SELECT sum(tokens)" + other));
  }
  EXPECT_EQ(received, sqlInt(s_path, "SELECT sum(tokens)" + load));
  // All steps and layers: the sums of the per-step values.
  auto all = m_reader->rankLoads({});
  ASSERT_TRUE(all.isOk());
  for (const RankLoad& r : all->ranks) {
    EXPECT_EQ(r.routedRows, sqlInt(s_path, "SELECT sum(tokens) FROM expert_load WHERE rank = " +
                                               std::to_string(r.rank)));
  }
}

TEST_F(TraceReaderParallel, StepCollectivesMatchEveryPeer) {
  auto collectives = m_reader->stepCollectives(1);
  ASSERT_TRUE(collectives.isOk()) << collectives.status().toString();
  EXPECT_EQ(int64_t(collectives->size()),
            sqlInt(s_path,
                   "SELECT count(*) FROM (SELECT DISTINCT comm_group, peers, seq "
                   "FROM collective WHERE step = 1)"));
  int64_t bytes = 0;
  std::set<std::string> groups;
  int64_t previousStart = std::numeric_limits<int64_t>::min();
  for (const MatchedCollective& c : *collectives) {
    SCOPED_TRACE(c.commGroup + " seq " + std::to_string(c.seq) + " peers " + c.peers);
    groups.insert(c.commGroup);
    EXPECT_EQ(c.step, 1);
    EXPECT_FALSE(c.opMismatch);
    EXPECT_TRUE(c.ok);
    EXPECT_TRUE(c.missingRanks.empty());
    ASSERT_EQ(c.arrivals.size(), c.peerRanks.size());
    int64_t wait = 0;
    for (size_t i = 0; i < c.arrivals.size(); ++i) {
      EXPECT_EQ(c.arrivals[i].rank, c.peerRanks[i]);  // peer order
      EXPECT_LE(c.arrivals[i].startNs, c.lastStartNs);
      EXPECT_EQ(c.arrivals[i].waitNs, c.lastStartNs - c.arrivals[i].startNs);
      wait += c.arrivals[i].waitNs;
      if (c.arrivals[i].rank == c.lastRank) {
        EXPECT_EQ(c.arrivals[i].startNs, c.lastStartNs);
      }
    }
    EXPECT_EQ(c.totalWaitNs, wait);
    EXPECT_GE(c.skewNs(), 0);
    EXPECT_GE(c.firstStartNs, previousStart);  // ordered by first arrival
    previousStart = c.firstStartNs;
    bytes += c.bytesSent;
  }
  // FSDP over all 4 ranks (replicate = 1, so no replicate collectives).
  EXPECT_EQ(groups, (std::set<std::string>{"ep", "expert_dp", "fsdp", "world"}));
  EXPECT_EQ(bytes, sqlInt(s_path, "SELECT sum(bytes_sent) FROM collective WHERE step = 1"));
  auto none = m_reader->stepCollectives(99);
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
}

TEST_F(TraceReaderParallel, CollectiveAtASliceFindsItsPeersOnTheirCommTracks) {
  // Rank 2's dispatch all-to-all of step 1, layer 0: its peer is rank 3.
  const std::vector<std::string> own =
      queryCsv(s_path,
               "SELECT track, start_ns, seq FROM collective WHERE step = 1 AND layer = 0 AND "
               "rank = 2 AND phase = 'dispatch' AND op = 'all_to_all_v'");
  ASSERT_EQ(own.size(), 1u);
  long long track = 0, start = 0, seq = 0;
  ASSERT_EQ(std::sscanf(own[0].c_str(), "%lld,%lld,%lld", &track, &start, &seq), 3);
  auto found = m_reader->collectiveAt(TrackId(track), start);
  ASSERT_TRUE(found.isOk()) << found.status().toString();
  ASSERT_TRUE(found->has_value());
  const MatchedCollective& c = **found;
  EXPECT_EQ(c.commGroup, "ep");
  EXPECT_EQ(c.op, "all_to_all_v");
  EXPECT_EQ(c.phase, "dispatch");
  EXPECT_EQ(c.seq, seq);
  EXPECT_EQ(c.peers, "2,3");
  ASSERT_EQ(c.arrivals.size(), 2u);
  auto tracks = m_reader->tracks();
  ASSERT_TRUE(tracks.isOk());
  for (const CollectiveArrival& a : c.arrivals) {
    // Each arrival is a collective slice on its own rank's comm track.
    bool onComm = false;
    for (const TrackRow& t : *tracks)
      onComm |= t.id == a.track && t.kind == "comm" && t.rank == a.rank;
    EXPECT_TRUE(onComm) << "rank " << a.rank;
    auto slices = m_reader->slices({a.startNs, a.startNs + 1}, a.track);
    ASSERT_TRUE(slices.isOk());
    ASSERT_FALSE(slices->empty());
    EXPECT_EQ(slices->front().startNs, a.startNs);
    EXPECT_EQ(slices->front().category, kCategoryCollective);
  }
  // The same collective from the peer's slice; nothing at a time without a collective.
  const CollectiveArrival& peer = c.arrivals[1];
  auto again = m_reader->collectiveAt(peer.track, peer.startNs);
  ASSERT_TRUE(again.isOk());
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ((*again)->seq, c.seq);
  EXPECT_EQ((*again)->lastRank, c.lastRank);
  auto nothing = m_reader->collectiveAt(TrackId(track), start + 1);
  ASSERT_TRUE(nothing.isOk());
  EXPECT_FALSE(nothing->has_value());
}

TEST(TraceReaderParallelOneRank, HasNoParallelData) {
  testing::TempDir dir;
  const std::string path = dir.path("one.sqlite");
  ASSERT_TRUE(moewb::testing::writeParallelTrace(path, 1, 1, 2).isOk());
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto overview = (*reader)->parallelOverview();
  ASSERT_TRUE(overview.isOk());
  EXPECT_EQ(overview->worldSize, 1);
  EXPECT_FALSE(overview->hasParallelData());
  auto matrix = (*reader)->a2aTrafficMatrix({});
  ASSERT_TRUE(matrix.isOk());
  EXPECT_EQ(matrix->worldSize, 1);
  EXPECT_EQ(matrix->totalBytes(), 0);
  auto collectives = (*reader)->stepCollectives(0);
  ASSERT_TRUE(collectives.isOk());
  EXPECT_TRUE(collectives->empty());
  auto loads = (*reader)->rankLoads({.step = 0});
  ASSERT_TRUE(loads.isOk());
  ASSERT_EQ(loads->ranks.size(), 1u);
  EXPECT_EQ(loads->ranks[0].epGroup, -1);
  EXPECT_EQ(loads->ranks[0].sentRows, 0);
  EXPECT_EQ(loads->ranks[0].receivedRows, loads->ranks[0].routedRows);  // hosts every expert
}

TEST_F(TraceReaderParallel, RanksOutsideTheWorldAreCountedNotIndexed) {
  testing::TempDir dir;
  const std::string bad = dir.path("bad.sqlite");
  std::filesystem::copy_file(s_path, bad);
  testing::execSql(bad,
                   "INSERT INTO a2a_traffic VALUES (0, 0, 9, 1, 1000, 'dispatch'), "
                   "(0, 0, -1, 1, 24, 'dispatch'), (0, 0, 0, 1000000000, 7, 'dispatch');"
                   "INSERT INTO expert_load VALUES (0, 0, 3, 77, 5, 0, 0), "
                   "(0, 0, 100000000, 0, 5, 0, 0);"
                   "INSERT INTO collective VALUES (NULL, 1, 1, 1, 0, 0, 0, 'all_gather', 'ep', "
                   "'', 9999, 0, 0, 'x,1', 1);");
  auto reader = TraceReader::open(bad);
  ASSERT_TRUE(reader.isOk());
  auto matrix = (*reader)->a2aTrafficMatrix({.step = 0, .layer = 0, .phase = "dispatch"});
  ASSERT_TRUE(matrix.isOk()) << matrix.status().toString();
  EXPECT_EQ(matrix->worldSize, kWorld);
  EXPECT_EQ(matrix->outOfRangeBytes, 1031);
  auto loads = (*reader)->rankLoads({.step = 0, .layer = 0});
  ASSERT_TRUE(loads.isOk()) << loads.status().toString();
  EXPECT_EQ(loads->numExperts, kParallelTraceExperts);
  auto collectives = (*reader)->stepCollectives(0);
  ASSERT_TRUE(collectives.isOk()) << collectives.status().toString();
  bool sawBadPeers = false;
  for (const MatchedCollective& c : *collectives) {
    if (c.seq != 9999) continue;
    sawBadPeers = true;
    EXPECT_TRUE(c.peerRanks.empty());
    EXPECT_EQ(c.arrivals.size(), 1u);
  }
  EXPECT_TRUE(sawBadPeers);
}

}  // namespace
}  // namespace moewb::storage
