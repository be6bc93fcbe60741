// Config-change markers: placement in a timeline window, merging of close changes, one chart
// marker per step, nearest-marker lookup and the tooltip text.
#include "moewb/gui/config_markers.h"

#include <gtest/gtest.h>

#include <limits>

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

// Issue 17: a live patch of several keys (a tuner Apply live) is written as one row per key, each
// stamped as written, microseconds apart; zoomed in, those rows used to be several markers.
TEST(ConfigMarkers, OnePatchIsOneMarkerAtAnyZoom) {
  auto from = [](storage::ConfigChangeRow r, const char* source) {
    r.source = source;
    return r;
  };
  const std::vector<storage::ConfigChangeRow> rows = {
      from(change(40, 1'000'000, "optim.lr"), "tuner"),  // the patch: 4 and 9 us apart
      from(change(40, 1'004'000, "moe.capacity_factor"), "tuner"),
      from(change(40, 1'009'000, "kda.chunk_size"), "tuner"),
      from(change(40, 1'009'500, "data.skew"), "gui"),    // another source, same step
      from(change(41, 1'009'800, "optim.eps"), "tuner"),  // the next step's patch
  };
  // 10 ns per px: the patch's rows are 400 and 500 px apart.
  const TimelineGeometry g{1'000'000, 1'010'000, 1000.0};
  auto markers = timelineMarkers(rows, g);
  ASSERT_EQ(markers.size(), 3u);
  EXPECT_DOUBLE_EQ(markers[0].x, 0.0);
  EXPECT_EQ(markers[0].rows, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(markerText(markers[0], rows),
            "step 40: optim.lr 1.0 -> 2.0 (tuner)\nstep 40: moe.capacity_factor 1.0 -> 2.0 "
            "(tuner)\nstep 40: kda.chunk_size 1.0 -> 2.0 (tuner)");
  EXPECT_DOUBLE_EQ(markers[1].x, 950.0);
  EXPECT_EQ(markers[1].rows, std::vector<int>{3});
  EXPECT_EQ(markers[2].rows, std::vector<int>{4});  // the next step's patch, 30 px on
  EXPECT_DOUBLE_EQ(markers[2].x, 980.0);
  // A window that starts inside the patch: the patch's marker (at its first change) is outside.
  markers = timelineMarkers(rows, {1'002'000, 1'010'000, 800.0});
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_EQ(markers[0].rows, std::vector<int>{3});
  // A gap over kPatchGapNs splits rows of one step and source into two patches.
  const std::vector<storage::ConfigChangeRow> apart = {
      from(change(7, 0, "optim.lr"), "gui"), from(change(7, kPatchGapNs + 1, "optim.eps"), "gui")};
  EXPECT_EQ(timelineMarkers(apart, {0, 2 * kPatchGapNs, 1000.0}).size(), 2u);
  // Times from an untrusted file: no overflow, no merge.
  const std::vector<storage::ConfigChangeRow> odd = {
      change(1, std::numeric_limits<int64_t>::min(), "a"),
      change(1, std::numeric_limits<int64_t>::max() - 1, "b")};
  markers = timelineMarkers(
      odd, {std::numeric_limits<int64_t>::max() - 10, std::numeric_limits<int64_t>::max(), 10.0});
  ASSERT_EQ(markers.size(), 1u);
  EXPECT_EQ(markers[0].rows, std::vector<int>{1});
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
