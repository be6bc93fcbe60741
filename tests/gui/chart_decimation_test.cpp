// Chart decimation: every pixel column keeps the min and max of its points (against a brute-force
// pass over random series), and the nearest-point search agrees with a linear scan.
#include "moewb/gui/chart_decimation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

namespace moewb::gui {
namespace {

std::vector<QPointF> randomSeries(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  std::vector<QPointF> points;
  double x = 0;
  for (size_t i = 0; i < n; ++i) {
    x += 1 + (rng() % 3);  // uneven spacing, x ascending
    double y = std::sin(double(i) * 0.01) + 0.3 * noise(rng);
    if (i % 997 == 0) y += 25;  // isolated spikes must survive
    points.emplace_back(x, y);
  }
  return points;
}

TEST(ChartDecimation, KeepsTheMinAndMaxOfEveryColumn) {
  for (int columns : {1, 7, 333, 1000}) {
    const std::vector<QPointF> points = randomSeries(20'011, uint64_t(columns));
    const double x0 = points.front().x(), x1 = points.back().x();
    const std::vector<ChartColumn> got = decimateSeries(points, x0, x1, columns);
    // Brute force: bucket every point.
    std::map<int, std::pair<double, double>> expect;
    std::map<int, size_t> counts;
    for (const QPointF& pt : points) {
      int c = int(std::floor((pt.x() - x0) * columns / (x1 - x0)));
      c = std::clamp(c, 0, columns - 1);
      auto [it, fresh] = expect.try_emplace(c, pt.y(), pt.y());
      it->second.first = std::min(it->second.first, pt.y());
      it->second.second = std::max(it->second.second, pt.y());
      ++counts[c];
    }
    ASSERT_EQ(got.size(), expect.size()) << columns << " columns";
    size_t total = 0;
    for (const ChartColumn& c : got) {
      ASSERT_TRUE(expect.count(c.column));
      EXPECT_DOUBLE_EQ(c.yMin, expect[c.column].first);
      EXPECT_DOUBLE_EQ(c.yMax, expect[c.column].second);
      EXPECT_DOUBLE_EQ(c.highest.y(), c.yMax);
      EXPECT_EQ(int(std::clamp(std::floor((c.highest.x() - x0) * columns / (x1 - x0)), 0.0,
                               double(columns - 1))),
                c.column);
      EXPECT_EQ(c.count, counts[c.column]);
      EXPECT_LE(c.first.x(), c.last.x());
      total += c.count;
    }
    EXPECT_EQ(total, points.size());
    // The global extremes (the spikes) are in the output.
    double maxY = -1e300;
    for (const QPointF& pt : points) maxY = std::max(maxY, pt.y());
    double gotMax = -1e300;
    for (const ChartColumn& c : got) gotMax = std::max(gotMax, c.yMax);
    EXPECT_DOUBLE_EQ(gotMax, maxY);
  }
}

TEST(ChartDecimation, EdgeCases) {
  EXPECT_TRUE(decimateSeries({}, 0, 1, 10).empty());
  EXPECT_TRUE(decimateSeries({{1, 1}}, 1, 1, 10).empty());
  const std::vector<QPointF> pts = {{-5, 1}, {0, 2}, {5, std::nan("")}, {10, 3}, {20, 4}};
  const auto cols = decimateSeries(pts, 0, 10, 2);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].column, 0);
  EXPECT_EQ(cols[0].count, 2u);  // -5 clamps into the first column; NaN is skipped
  EXPECT_EQ(cols[1].column, 1);
  EXPECT_DOUBLE_EQ(cols[1].yMax, 4);  // 10 and 20 go to the last column
}

TEST(ChartDecimation, NearestPointMatchesALinearScan) {
  const std::vector<QPointF> points = randomSeries(5'000, 42);
  EXPECT_EQ(nearestPointIndex({}, 3), -1);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> at(points.front().x() - 50, points.back().x() + 50);
  for (int i = 0; i < 2'000; ++i) {
    const double x = at(rng);
    int best = 0;
    for (size_t j = 1; j < points.size(); ++j) {
      if (std::fabs(points[j].x() - x) < std::fabs(points[size_t(best)].x() - x)) best = int(j);
    }
    EXPECT_EQ(nearestPointIndex(points, x), best) << "x = " << x;
  }
  EXPECT_EQ(nearestPointIndex(points, points[17].x()), 17);
}

}  // namespace
}  // namespace moewb::gui
