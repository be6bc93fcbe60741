// TimelineGeometry: x <-> time round trips, zoom about the cursor, clamping, pan, ruler ticks.
#include "moewb/gui/timeline_geometry.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moewb::gui {
namespace {

constexpr TimeRange kBounds{1'000'000, 101'000'000};  // 100 ms of data

TEST(TimelineGeometry, XAndTimeRoundTrip) {
  const TimelineGeometry g{1'000'000, 11'000'000, 1000.0};
  EXPECT_DOUBLE_EQ(g.nsPerPx(), 10'000.0);
  EXPECT_DOUBLE_EQ(g.xOf(1'000'000), 0.0);
  EXPECT_DOUBLE_EQ(g.xOf(11'000'000), 1000.0);
  EXPECT_DOUBLE_EQ(g.xOf(6'000'000), 500.0);
  for (double x : {0.0, 0.5, 123.25, 999.0, -40.0, 1500.0}) {
    EXPECT_NEAR(g.xOf(int64_t(std::llround(g.timeAt(x)))), x, 1e-3) << x;
  }
  for (int64_t t : {1'000'000LL, 1'234'567LL, 10'999'999LL}) {
    EXPECT_NEAR(g.timeAt(g.xOf(t)), double(t), 1e-3) << t;
  }
}

TEST(TimelineGeometry, FitShowsAllData) {
  const TimelineGeometry g = fitGeometry(kBounds, 800);
  EXPECT_EQ(g.startNs, kBounds.startNs);
  EXPECT_EQ(g.endNs, kBounds.endNs);
  EXPECT_EQ(g.widthPx, 800);
  const TimelineGeometry empty = fitGeometry({5, 5}, 800);
  EXPECT_EQ(empty.durNs(), kMinWindowNs);
}

TEST(TimelineGeometry, ZoomKeepsTheTimeUnderTheCursor) {
  TimelineGeometry g = fitGeometry(kBounds, 1000);
  for (double anchor : {0.0, 137.0, 500.0, 999.0}) {
    TimelineGeometry cur = g;
    for (int i = 0; i < 6; ++i) {
      const double before = cur.timeAt(anchor);
      TimelineGeometry next = zoomGeometry(cur, anchor, 2.0, kBounds);
      EXPECT_NEAR(next.timeAt(anchor), before, 1.0) << "anchor " << anchor << " step " << i;
      EXPECT_NEAR(double(next.durNs()), double(cur.durNs()) / 2.0, 1.0);
      cur = next;
    }
    // And zooming back out by the same factors returns close to the start.
    for (int i = 0; i < 6; ++i) cur = zoomGeometry(cur, anchor, 0.5, kBounds);
    EXPECT_NEAR(double(cur.startNs), double(g.startNs), 64.0);
    EXPECT_NEAR(double(cur.endNs), double(g.endNs), 64.0);
  }
}

TEST(TimelineGeometry, ZoomClampsToMinimumWindowAndBounds) {
  TimelineGeometry g = fitGeometry(kBounds, 1000);
  TimelineGeometry in = zoomGeometry(g, 500, 1e9, kBounds);
  EXPECT_EQ(in.durNs(), kMinWindowNs);
  EXPECT_GE(in.startNs, kBounds.startNs);
  TimelineGeometry out = zoomGeometry(in, 500, 1e-9, kBounds);
  EXPECT_EQ(out.startNs, kBounds.startNs);
  EXPECT_EQ(out.endNs, kBounds.endNs);
  // Zooming out near the right edge cannot push the window past the data.
  TimelineGeometry right{kBounds.endNs - 10'000'000, kBounds.endNs, 1000};
  TimelineGeometry wider = zoomGeometry(right, 1000, 0.25, kBounds);
  EXPECT_EQ(wider.endNs, kBounds.endNs);
  EXPECT_EQ(wider.durNs(), 40'000'000);
  // Bad factors leave a valid, clamped window.
  EXPECT_EQ(zoomGeometry(g, 10, 0.0, kBounds), g);
  EXPECT_EQ(zoomGeometry(g, 10, std::nan(""), kBounds), g);
}

TEST(TimelineGeometry, PanMovesByPixelsAndStopsAtTheEdges) {
  TimelineGeometry g{11'000'000, 21'000'000, 1000};  // 10 us per px
  TimelineGeometry later = panGeometry(g, 100, kBounds);
  EXPECT_EQ(later.startNs, 12'000'000);
  EXPECT_EQ(later.durNs(), g.durNs());
  TimelineGeometry earlier = panGeometry(g, -100, kBounds);
  EXPECT_EQ(earlier.startNs, 10'000'000);
  EXPECT_EQ(panGeometry(g, -1e6, kBounds).startNs, kBounds.startNs);
  EXPECT_EQ(panGeometry(g, 1e6, kBounds).endNs, kBounds.endNs);
}

TEST(TimelineGeometry, ShowRangeCentresTinyRanges) {
  TimelineGeometry g = fitGeometry(kBounds, 1000);
  TimelineGeometry s = showRange(g, {2'000'000, 3'000'000}, kBounds);
  EXPECT_EQ(s.startNs, 2'000'000);
  EXPECT_EQ(s.endNs, 3'000'000);
  TimelineGeometry tiny = showRange(g, {5'000'000, 5'000'010}, kBounds);
  EXPECT_EQ(tiny.durNs(), kMinWindowNs);
  EXPECT_LE(tiny.startNs, 5'000'000);
  EXPECT_GE(tiny.endNs, 5'000'010);
}

TEST(TimelineGeometry, NiceTicks) {
  EXPECT_EQ(niceTickStepNs(1.0, 80), 100);
  EXPECT_EQ(niceTickStepNs(10.0, 80), 1000);
  EXPECT_EQ(niceTickStepNs(30.0, 80), 5000);
  EXPECT_EQ(niceTickStepNs(1000.0, 70), 100'000);
  EXPECT_EQ(niceTickStepNs(0.001, 80), 1);
  const TimelineGeometry g{1'050, 2'050, 1000};
  const auto ticks = tickTimes(g, 1'000, 200);
  ASSERT_EQ(ticks.size(), 5u);
  EXPECT_EQ(ticks.front(), 1'200);
  EXPECT_EQ(ticks.back(), 2'000);
}

TEST(TimelineGeometry, TickLabels) {
  EXPECT_EQ(formatTickLabel(0, 1000), "0");
  EXPECT_EQ(formatTickLabel(250'000, 250'000), "250 us");
  EXPECT_EQ(formatTickLabel(1'250'000, 250'000), "1.25 ms");
  EXPECT_EQ(formatTickLabel(2'000'000'000, 500'000'000), "2.0 s");
  EXPECT_EQ(formatTickLabel(40, 20), "40 ns");
}

}  // namespace
}  // namespace moewb::gui
