// rankLines / stepRanks (chart_ranks.h): the step charts' per-rank lines, the "all N ranks equal"
// collapse and the min / median / max band, on step rows written out by hand.
#include "moewb/gui/chart_ranks.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moewb::gui {
namespace {

storage::StepRow row(int32_t rank, int64_t step, double loss) {
  storage::StepRow r;
  r.rank = rank;
  r.step = step;
  r.loss = loss;
  return r;
}

double loss(const storage::StepRow& r) {
  return r.loss;
}

std::vector<double> ys(const RankLine& line) {
  std::vector<double> out;
  for (const QPointF& p : line.points) out.push_back(p.y());
  return out;
}

TEST(ChartRanks, OneRankIsOneUnnamedLineInStepOrder) {
  const std::vector<storage::StepRow> rows = {row(0, 2, 1.5), row(0, 0, 3.0), row(0, 1, 2.0)};
  const std::vector<RankLine> lines = rankLines(rows, loss, {});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].name.isEmpty());
  EXPECT_EQ(ys(lines[0]), (std::vector<double>{3.0, 2.0, 1.5}));
  EXPECT_EQ(stepRanks(rows), (std::vector<int32_t>{0}));
  EXPECT_TRUE(rankLines(rows, loss, {RankChoice::View::kOne, 3}).empty());
  EXPECT_TRUE(rankLines({}, loss, {}).empty());
}

TEST(ChartRanks, DifferentRanksGetALineEach) {
  std::vector<storage::StepRow> rows;
  for (int64_t s = 0; s < 3; ++s) {
    for (int32_t r : {2, 0, 1}) rows.push_back(row(r, s, double(10 * r + s)));
  }
  EXPECT_EQ(stepRanks(rows), (std::vector<int32_t>{0, 1, 2}));
  const std::vector<RankLine> lines = rankLines(rows, loss, {});
  ASSERT_EQ(lines.size(), 3u);
  for (int32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(lines[size_t(r)].rank, r);
    EXPECT_EQ(lines[size_t(r)].kind, RankLine::Kind::kRank);
    EXPECT_EQ(lines[size_t(r)].name, QStringLiteral("rank %1").arg(r));
    EXPECT_EQ(ys(lines[size_t(r)]), (std::vector<double>{10.0 * r, 10.0 * r + 1, 10.0 * r + 2}));
  }
  const std::vector<RankLine> one = rankLines(rows, loss, {RankChoice::View::kOne, 1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, QStringLiteral("rank 1"));
  EXPECT_EQ(ys(one[0]), (std::vector<double>{10, 11, 12}));
}

TEST(ChartRanks, BitwiseEqualRanksCollapseIntoOneLine) {
  std::vector<storage::StepRow> rows;
  for (int32_t r = 0; r < 4; ++r) {
    for (int64_t s = 0; s < 5; ++s) rows.push_back(row(r, s, 2.5 - 0.1 * double(s)));
  }
  std::vector<RankLine> lines = rankLines(rows, loss, {});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].kind, RankLine::Kind::kAllEqual);
  EXPECT_EQ(lines[0].name, QStringLiteral("all 4 ranks equal"));
  EXPECT_EQ(lines[0].points.size(), 5u);
  // One rank off by one ulp is not equal: four lines.
  rows[7].loss = std::nextafter(rows[7].loss, 10.0);
  lines = rankLines(rows, loss, {});
  EXPECT_EQ(lines.size(), 4u);
  // A rank missing a step is not equal either.
  rows[7].loss = rows[2].loss;
  rows.pop_back();
  EXPECT_EQ(rankLines(rows, loss, {}).size(), 4u);
}

TEST(ChartRanks, ManyRanksOrTheBandChoiceDrawMinMedianMax) {
  // 9 ranks (> kMaxRankLines): rank r at step s has value r * (s + 1); step 3 lacks rank 8.
  std::vector<storage::StepRow> rows;
  constexpr int32_t kRanks = kMaxRankLines + 1;
  for (int32_t r = 0; r < kRanks; ++r) {
    for (int64_t s = 0; s < 4; ++s) {
      if (s == 3 && r == 8) continue;
      rows.push_back(row(r, s, double(r) * double(s + 1)));
    }
  }
  const std::vector<RankLine> lines = rankLines(rows, loss, {});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].kind, RankLine::Kind::kMin);
  EXPECT_EQ(lines[1].kind, RankLine::Kind::kMedian);
  EXPECT_EQ(lines[2].kind, RankLine::Kind::kMax);
  EXPECT_EQ(lines[0].name, QStringLiteral("min of 9 ranks"));
  EXPECT_EQ(ys(lines[0]), (std::vector<double>{0, 0, 0, 0}));
  // Median of 0..8 is 4; step 3 has ranks 0..7: (3 + 4) / 2 * 4.
  EXPECT_EQ(ys(lines[1]), (std::vector<double>{4, 8, 12, 14}));
  EXPECT_EQ(ys(lines[2]), (std::vector<double>{8, 16, 24, 28}));
  // Two ranks with the band chosen: the band too; one rank still picks one line.
  std::vector<storage::StepRow> two = {row(0, 0, 1.0), row(1, 0, 3.0)};
  const std::vector<RankLine> band = rankLines(two, loss, {RankChoice::View::kBand, 0});
  ASSERT_EQ(band.size(), 3u);
  EXPECT_EQ(ys(band[1]), (std::vector<double>{2.0}));
  EXPECT_EQ(rankLines(rows, loss, {RankChoice::View::kOne, 8}).size(), 1u);
}

}  // namespace
}  // namespace moewb::gui
