// robustRange: which far-out points a step chart's y axis may clip (first steps, at most 1% of
// the others), and which it must never clip (loss curves, spiky series, flat or short ones).
#include "moewb/gui/chart_range.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace moewb::gui {
namespace {

TEST(ChartRange, ClipsTheFirstStepOfAnH200Run) {
  // Step times (ms) of the 3-step H200 trace: CUDA warm-up in step 0.
  const std::vector<double> ms = {2720.0, 346.7, 341.0};
  const RobustRange r = robustRange(ms);
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(r.clipped, 1u);
  EXPECT_DOUBLE_EQ(r.lo, 341.0);
  EXPECT_DOUBLE_EQ(r.hi, 346.7);
  EXPECT_DOUBLE_EQ(r.fullHi, 2720.0);
  EXPECT_DOUBLE_EQ(r.clipAbove, 346.7);
  EXPECT_TRUE(r.clips());
}

TEST(ChartRange, FirstStepsCountOnlyAtTheStartOfTheRun) {
  // The same values seen through a window that starts at step 40: not warm-up, and one point
  // of three is more than 1%, so nothing is clipped.
  const std::vector<double> ms = {2720.0, 346.7, 341.0};
  const RobustRange r = robustRange(ms, 40);
  EXPECT_FALSE(r.clips());
  EXPECT_DOUBLE_EQ(r.hi, 2720.0);
  // A window starting at step 2 still holds the run's third step.
  const std::vector<double> late = {2720.0, 346.7, 341.0, 343.0};
  EXPECT_EQ(robustRange(late, 2).clipped, 1u);
  EXPECT_FALSE(robustRange(late, 3).clips());
}

TEST(ChartRange, ClipsAtMostOnePercentOfTheOtherPoints) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(345.0, 4.0);
  std::vector<double> ms(1000);
  for (double& v : ms) v = noise(rng);
  ms[500] = 5000;  // 10 spikes = 1% of 1000: all clipped
  for (int i = 1; i < 10; ++i) ms[size_t(100 * i + 7)] = 3000 + i;
  RobustRange r = robustRange(ms);
  EXPECT_EQ(r.clipped, 10u);
  EXPECT_LT(r.hi, 400);
  EXPECT_DOUBLE_EQ(r.fullHi, 5000);
  // 30 spikes (3%) are part of the series: none is clipped.
  for (int i = 0; i < 30; ++i) ms[size_t(30 * i + 11)] = 3000;
  r = robustRange(ms);
  EXPECT_FALSE(r.clips());
  EXPECT_DOUBLE_EQ(r.hi, 5000);
}

TEST(ChartRange, NeverClipsALossCurveOrModestSpikes) {
  // A falling loss: the first steps are the highest but not far above the rest.
  std::vector<double> loss;
  for (int s = 0; s < 300; ++s) loss.push_back(3.0 + 7.8 * std::exp(-s / 60.0));
  EXPECT_FALSE(robustRange(loss).clips());
  // A first step 2.5x the others is within the factor of 3.
  const std::vector<double> ms = {850.0, 345.0, 340.0, 342.0};
  EXPECT_FALSE(robustRange(ms).clips());
  // Low values are never clipped.
  const std::vector<double> low = {1.0, 345.0, 340.0, 342.0};
  EXPECT_FALSE(robustRange(low).clips());
}

TEST(ChartRange, SpreadRuleWorksForValuesAroundZero) {
  // Negative values: 3 x the 99th percentile is below it, so the spread decides.
  const std::vector<double> v = {40.0, -1.0, -1.2, -0.8, -1.1};
  const RobustRange r = robustRange(v);
  EXPECT_EQ(r.clipped, 1u);
  EXPECT_DOUBLE_EQ(r.hi, -0.8);
  EXPECT_DOUBLE_EQ(r.lo, -1.2);
  // A flat rest at 0 gives no cut: nothing clipped (the rest has nothing to show).
  const std::vector<double> flat = {5.0, 0.0, 0.0, 0.0};
  EXPECT_FALSE(robustRange(flat).clips());
  // A flat positive rest does: its axis is widened around it later (niceAxis).
  const std::vector<double> constant = {5000.0, 345.0, 345.0, 345.0};
  EXPECT_EQ(robustRange(constant).clipped, 1u);
}

TEST(ChartRange, ShortOrNonFiniteInput) {
  EXPECT_EQ(robustRange({}).count, 0u);
  const std::vector<double> two = {2720.0, 345.0};
  const RobustRange r2 = robustRange(two);
  EXPECT_FALSE(r2.clips());
  EXPECT_DOUBLE_EQ(r2.hi, 2720.0);
  const std::vector<double> nan = {std::nan(""), 2720.0, INFINITY, 345.0, 341.0};
  const RobustRange rn = robustRange(nan);
  EXPECT_EQ(rn.count, 3u);
  EXPECT_EQ(rn.clipped, 1u);  // 2720 is still among the run's first steps
  EXPECT_DOUBLE_EQ(rn.hi, 345.0);
}

TEST(ChartRange, MergeCoversBothSeries) {
  const std::vector<double> a = {2720.0, 346.7, 341.0};
  const std::vector<double> b = {500.0, 510.0, 505.0};
  const RobustRange m = mergeRanges(robustRange(a), robustRange(b));
  EXPECT_EQ(m.count, 6u);
  EXPECT_TRUE(m.clips());
  EXPECT_DOUBLE_EQ(m.lo, 341.0);
  EXPECT_DOUBLE_EQ(m.hi, 510.0);
  EXPECT_DOUBLE_EQ(m.fullHi, 2720.0);
  EXPECT_DOUBLE_EQ(m.clipAbove, 510.0);
  EXPECT_EQ(mergeRanges(RobustRange{}, robustRange(b)).hi, 510.0);
}

}  // namespace
}  // namespace moewb::gui
