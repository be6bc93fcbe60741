// ParallelModel and its table models on a real trace of 4 in-process ranks with EP = 4: the
// matrix cells and sums equal the a2a_traffic rows (plain SQL over the file), model-tester clean;
// the rank table equals the reader's rank loads; the collectives table is sorted by wait and
// finds a collective by its match key; a collective picked by one rank's comm slice has all four
// peers; selection changes and a one-rank trace.
#include "moewb/gui/parallel_model.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <QTemporaryDir>

#include "model_check.h"
#include "moewb/base/units.h"
#include "moewb/gui/trace_document.h"
#include "parallel_trace.h"

namespace moewb::gui {
namespace {

// Every row of `sql` on `path`, columns as int64.
std::vector<std::vector<int64_t>> queryInts(const QString& path, const std::string& sql) {
  std::vector<std::vector<int64_t>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.toStdString().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) ==
      SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
      while (sqlite3_step(stmt) == SQLITE_ROW) {
        std::vector<int64_t> row;
        for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
          row.push_back(sqlite3_column_int64(stmt, c));
        }
        out.push_back(std::move(row));
      }
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

constexpr int kWorld = 4;

class ParallelModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new QTemporaryDir;
    s_path = s_dir->filePath(QStringLiteral("ep4.sqlite"));
    const Status status =
        moewb::testing::writeParallelTrace(s_path.toStdString(), kWorld, kWorld, 3);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  static QTemporaryDir* s_dir;
  static QString s_path;
};

QTemporaryDir* ParallelModelTest::s_dir = nullptr;
QString ParallelModelTest::s_path;

TEST_F(ParallelModelTest, OpensOnTheLastStepWithTheDispatchPhase) {
  ParallelModel model;
  ASSERT_TRUE(model.open(s_path).isOk());
  EXPECT_TRUE(model.isParallel());
  EXPECT_EQ(model.overview().worldSize, kWorld);
  EXPECT_EQ(model.filter().step, std::optional<int64_t>(2));
  EXPECT_EQ(model.filter().layer, std::nullopt);
  EXPECT_EQ(model.filter().phase, "dispatch");
  EXPECT_EQ(model.collectiveStep(), 2);
  EXPECT_EQ(model.overview().epGroups, (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}}));
}

TEST_F(ParallelModelTest, MatrixCellsAndSumsEqualTheTrafficRows) {
  ParallelModel model;
  ParallelTrafficModel* traffic = model.trafficModel();
  testing::ModelCheck check(traffic);
  ASSERT_TRUE(model.open(s_path).isOk());
  ASSERT_TRUE(model.setStep(1).isOk());
  ASSERT_TRUE(model.setLayer(0).isOk());
  ASSERT_TRUE(model.setPhase("combine").isOk());
  ASSERT_EQ(traffic->rowCount(), kWorld + 1);
  ASSERT_EQ(traffic->columnCount(), kWorld + 1);
  int64_t want[kWorld][kWorld] = {};
  for (const auto& row : queryInts(s_path,
                                   "SELECT src_rank, dst_rank, bytes FROM a2a_traffic "
                                   "WHERE step = 1 AND layer = 0 AND phase = 'combine'")) {
    want[row[0]][row[1]] += row[2];
  }
  int64_t rowSum[kWorld] = {}, columnSum[kWorld] = {}, total = 0, maxCell = 0;
  for (int s = 0; s < kWorld; ++s) {
    for (int d = 0; d < kWorld; ++d) {
      const QModelIndex cell = traffic->index(s, d);
      EXPECT_EQ(cell.data(ParallelTrafficModel::kBytesRole).toLongLong(), want[s][d]);
      EXPECT_EQ(cell.data().toString().toStdString(), formatBytes(want[s][d]));
      EXPECT_FALSE(cell.data(ParallelTrafficModel::kIsSumRole).toBool());
      rowSum[s] += want[s][d];
      columnSum[d] += want[s][d];
      total += want[s][d];
      maxCell = std::max(maxCell, want[s][d]);
    }
  }
  ASSERT_GT(total, 0);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(traffic->index(r, kWorld).data(ParallelTrafficModel::kBytesRole).toLongLong(),
              rowSum[r]);
    EXPECT_EQ(traffic->index(kWorld, r).data(ParallelTrafficModel::kBytesRole).toLongLong(),
              columnSum[r]);
    EXPECT_TRUE(traffic->index(kWorld, r).data(ParallelTrafficModel::kIsSumRole).toBool());
  }
  EXPECT_EQ(traffic->index(kWorld, kWorld).data(ParallelTrafficModel::kBytesRole).toLongLong(),
            total);
  EXPECT_DOUBLE_EQ(traffic->heat(0, 1), double(want[0][1]) / double(maxCell));
  EXPECT_EQ(traffic->headerData(kWorld, Qt::Horizontal).toString(), QStringLiteral("sent"));
  EXPECT_EQ(traffic->headerData(2, Qt::Vertical).toString(), QStringLiteral("from 2"));
  // All phases of that step and layer: four all-to-alls of equal size.
  ASSERT_TRUE(model.setPhase("").isOk());
  EXPECT_EQ(traffic->cellBytes(kWorld, kWorld),
            queryInts(s_path, "SELECT sum(bytes) FROM a2a_traffic WHERE step = 1 AND layer = 0")
                .at(0)
                .at(0));
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST_F(ParallelModelTest, RankTableHoldsTheRoutedRowsOfEachRank) {
  ParallelModel model;
  ParallelRankModel* ranks = model.rankModel();
  testing::ModelCheck check(ranks);
  ASSERT_TRUE(model.open(s_path).isOk());
  ASSERT_TRUE(model.setLayer(1).isOk());
  ASSERT_EQ(ranks->rowCount(), kWorld);
  int64_t received = 0;
  for (int r = 0; r < kWorld; ++r) {
    const std::string where = " FROM expert_load WHERE step = 2 AND layer = 1";
    const int64_t routed =
        queryInts(s_path, "SELECT sum(tokens)" + where + " AND rank = " + std::to_string(r))
            .at(0)
            .at(0);
    EXPECT_EQ(
        ranks->index(r, ParallelRankModel::kRouted).data(ParallelRankModel::kSortRole).toLongLong(),
        routed);
    // EP = 4 over 8 experts: rank r hosts experts 2r and 2r+1, fed by every rank.
    const int64_t mine =
        queryInts(s_path, "SELECT sum(tokens)" + where + " AND expert IN (" +
                              std::to_string(2 * r) + ", " + std::to_string(2 * r + 1) + ")")
            .at(0)
            .at(0);
    EXPECT_EQ(ranks->index(r, ParallelRankModel::kReceived)
                  .data(ParallelRankModel::kSortRole)
                  .toLongLong(),
              mine);
    EXPECT_EQ(ranks->index(r, ParallelRankModel::kExperts).data().toString(),
              QStringLiteral("E%1-E%2").arg(2 * r).arg(2 * r + 1));
    received += mine;
  }
  const int64_t all =
      queryInts(s_path, "SELECT sum(tokens) FROM expert_load WHERE step = 2 AND layer = 1")
          .at(0)
          .at(0);
  EXPECT_EQ(received, all);
  EXPECT_GE(ranks->receivedMaxOverMean(), 1.0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST_F(ParallelModelTest, CollectivesAreSortedByWaitAndMatchedAcrossRanks) {
  ParallelModel model;
  ParallelCollectiveModel* collectives = model.collectiveModel();
  testing::ModelCheck check(collectives);
  ASSERT_TRUE(model.open(s_path).isOk());
  ASSERT_TRUE(model.setStep(1).isOk());
  EXPECT_EQ(collectives->step(), 1);
  const int64_t distinct = queryInts(s_path,
                                     "SELECT count(*) FROM (SELECT DISTINCT comm_group, peers, seq "
                                     "FROM collective WHERE step = 1)")
                               .at(0)
                               .at(0);
  ASSERT_EQ(collectives->rowCount(), distinct);
  for (int row = 1; row < collectives->rowCount(); ++row) {
    EXPECT_GE(collectives->collective(row - 1)->totalWaitNs,
              collectives->collective(row)->totalWaitNs);
  }
  // Rank 3's combine all-to-all of layer 1, picked by its comm slice, has every EP peer.
  const auto own = queryInts(s_path,
                             "SELECT track, start_ns, seq FROM collective WHERE step = 1 "
                             "AND layer = 1 AND rank = 3 AND phase = 'combine'");
  ASSERT_EQ(own.size(), 1u);
  auto found = model.collectiveAt(TrackId(own[0][0]), own[0][1]);
  ASSERT_TRUE(found.isOk()) << found.status().toString();
  ASSERT_TRUE(found->has_value());
  const storage::MatchedCollective& match = **found;
  EXPECT_EQ(match.seq, own[0][2]);
  EXPECT_EQ(match.commGroup, "ep");
  ASSERT_EQ(match.arrivals.size(), size_t(kWorld));
  const auto peers =
      queryInts(s_path,
                "SELECT rank, track, start_ns FROM collective WHERE step = 1 AND comm_group = 'ep' "
                "AND seq = " +
                    std::to_string(own[0][2]) + " ORDER BY rank");
  ASSERT_EQ(peers.size(), size_t(kWorld));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(match.arrivals[size_t(r)].rank, peers[size_t(r)][0]);
    EXPECT_EQ(match.arrivals[size_t(r)].track, TrackId(peers[size_t(r)][1]));
    EXPECT_EQ(match.arrivals[size_t(r)].startNs, peers[size_t(r)][2]);
  }
  const int row = collectives->rowOf(match);
  ASSERT_GE(row, 0);
  EXPECT_EQ(collectives->collective(row)->seq, match.seq);
  EXPECT_EQ(collectives->index(row, ParallelCollectiveModel::kLastRank).data().toString(),
            QStringLiteral("rank %1").arg(match.lastRank));
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST_F(ParallelModelTest, FollowsTheDocumentAndAllStepsShowsTheLastStepsCollectives) {
  TraceDocument document;
  ParallelModel model;
  model.setDocument(&document);
  ASSERT_TRUE(document.open(s_path).isOk());
  ASSERT_TRUE(model.isParallel());
  ASSERT_TRUE(model.setStep(std::nullopt).isOk());
  EXPECT_EQ(model.collectiveStep(), 2);
  EXPECT_EQ(
      model.trafficModel()->cellBytes(kWorld, kWorld),
      queryInts(s_path, "SELECT sum(bytes) FROM a2a_traffic WHERE phase = 'dispatch'").at(0).at(0));
  document.close();
  EXPECT_FALSE(model.isOpen());
  EXPECT_EQ(model.trafficModel()->rowCount(), 0);
  EXPECT_EQ(model.collectiveModel()->rowCount(), 0);
}

TEST_F(ParallelModelTest, OneRankTraceIsNotParallel) {
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("one.sqlite"));
  ASSERT_TRUE(moewb::testing::writeParallelTrace(path.toStdString(), 1, 1, 2).isOk());
  ParallelModel model;
  ASSERT_TRUE(model.open(path).isOk());
  EXPECT_TRUE(model.isOpen());
  EXPECT_FALSE(model.isParallel());
  EXPECT_EQ(model.trafficModel()->rowCount(), 0);
  EXPECT_EQ(model.rankModel()->rowCount(), 0);
  EXPECT_EQ(model.collectiveModel()->rowCount(), 0);
}

}  // namespace
}  // namespace moewb::gui
