// Config-change markers: placement in a timeline window, merging of close changes, one chart
// marker per step, nearest-marker lookup and the tooltip text.
#include "moewb/gui/config_markers.h"

#include <gtest/gtest.h>

namespace moewb::gui {
namespace {

storage::ConfigChangeRow change(int64_t step, int64_t tsNs, const char* key) {
  storage::ConfigChangeRow r;
  r.step = step;
  r.tsNs = tsNs;
  r.key = key;
  r.oldValue = "1.0";
  r.newValue = "2.0";
  r.source = "gui";
  return r;
}

TEST(ConfigMarkers, TimelineMarkersSitAtTheirTimeInsideTheWindow) {
  // 1000 ns over 100 px: 10 ns per px.
  const TimelineGeometry g{1'000, 2'000, 100.0};
  const std::vector<storage::ConfigChangeRow> rows = {
      change(4, 1'500, "optim.lr"),     // x = 50
      change(1, 900, "optim.eps"),      // before the window
      change(9, 2'000, "data.skew"),    // at the exclusive end: not shown
      change(2, 1'100, "optim.beta1"),  // x = 10 (rows need not be in time order)
  };
  const auto markers = timelineMarkers(rows, g);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_DOUBLE_EQ(markers[0].x, 10.0);
  EXPECT_EQ(markers[0].step, 2);
  EXPECT_EQ(markers[0].rows, std::vector<int>{3});
  EXPECT_DOUBLE_EQ(markers[1].x, 50.0);
  EXPECT_EQ(markers[1].tsNs, 1'500);
  EXPECT_EQ(markers[1].rows, std::vector<int>{0});
}

TEST(ConfigMarkers, ChangesCloserThanMergePxShareOneMarker) {
  const TimelineGeometry g{0, 1'000, 100.0};  // 10 ns per px
  const std::vector<storage::ConfigChangeRow> rows = {
      change(5, 500, "optim.lr"), change(5, 500, "optim.beta1"),  // one patch of two keys
      change(6, 530, "data.skew"),                                // 3 px later: merged
      change(7, 600, "data.noise"),                               // 10 px later: its own
  };
  const auto markers = timelineMarkers(rows, g, 4.0);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_EQ(markers[0].rows, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(markers[1].rows, std::vector<int>{3});
  EXPECT_EQ(markerText(markers[0], rows),
            "step 5: optim.lr 1.0 -> 2.0 (gui)\nstep 5: optim.beta1 1.0 -> 2.0 (gui)\n"
            "step 6: data.skew 1.0 -> 2.0 (gui)");
}

TEST(ConfigMarkers, StepMarkersGroupByStep) {
  const std::vector<storage::ConfigChangeRow> rows = {
      change(12, 50, "optim.lr"), change(3, 10, "optim.eps"), change(12, 50, "optim.beta2")};
  const auto markers = stepMarkers(rows);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_DOUBLE_EQ(markers[0].x, 3.0);
  EXPECT_EQ(markers[0].rows, std::vector<int>{1});
  EXPECT_DOUBLE_EQ(markers[1].x, 12.0);
  EXPECT_EQ(markers[1].rows, (std::vector<int>{0, 2}));
  EXPECT_TRUE(stepMarkers({}).empty());
}

TEST(ConfigMarkers, MarkerNearFindsTheClosestWithinTolerance) {
  std::vector<ConfigMarker> markers(3);
  markers[0].x = 10;
  markers[1].x = 20;
  markers[2].x = 40;
  EXPECT_EQ(markerNear(markers, 10, 4), 0);
  EXPECT_EQ(markerNear(markers, 16, 4), 1);
  EXPECT_EQ(markerNear(markers, 14, 4), 0);
  EXPECT_EQ(markerNear(markers, 30, 4), -1);
  EXPECT_EQ(markerNear(markers, 43.5, 4), 2);
  EXPECT_EQ(markerNear(markers, -100, 4), -1);
  EXPECT_EQ(markerNear({}, 0, 4), -1);
}

}  // namespace
}  // namespace moewb::gui
