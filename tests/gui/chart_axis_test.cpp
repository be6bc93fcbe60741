// niceAxis: round tick steps that cover the data.
#include "moewb/gui/chart_axis.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moewb::gui {
namespace {

TEST(ChartAxis, CoversTheDataWithRoundSteps) {
  const AxisTicks a = niceAxis(3.27, 5.61, 5);
  EXPECT_DOUBLE_EQ(a.step, 0.5);
  EXPECT_DOUBLE_EQ(a.min, 3.0);
  EXPECT_DOUBLE_EQ(a.max, 6.0);
  ASSERT_EQ(a.values.size(), 7u);
  EXPECT_DOUBLE_EQ(a.values[1], 3.5);
  const AxisTicks b = niceAxis(0, 1000, 4);
  EXPECT_DOUBLE_EQ(b.step, 500);
  EXPECT_LE(b.min, 0);
  EXPECT_GE(b.max, 1000);
}

TEST(ChartAxis, WidensDegenerateRanges) {
  const AxisTicks a = niceAxis(5, 5, 4);
  EXPECT_LT(a.min, 5);
  EXPECT_GT(a.max, 5);
  const AxisTicks z = niceAxis(0, 0, 4);
  EXPECT_LT(z.min, 0);
  EXPECT_GT(z.max, 0);
  const AxisTicks n = niceAxis(std::nan(""), 3, 4);
  EXPECT_GT(n.step, 0);
}

}  // namespace
}  // namespace moewb::gui
