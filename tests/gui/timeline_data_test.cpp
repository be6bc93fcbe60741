// TimelineData and buildDrawList: lanes, duplicate-free appends, visible ranges, folding.
#include "moewb/gui/timeline_data.h"

#include <gtest/gtest.h>

namespace moewb::gui {
namespace {

storage::SliceRow slice(int64_t startNs, int64_t durNs, const std::string& name, int32_t depth = 2,
                        int64_t track = 0) {
  storage::SliceRow r;
  r.track = TrackId(track);
  r.startNs = startNs;
  r.durNs = durNs;
  r.name = name;
  r.category = "phase";
  r.depth = depth;
  r.step = 0;
  return r;
}

// `n` slices of durNs each, one every periodNs, starting at t = 0.
std::vector<storage::SliceRow> comb(int n, int64_t durNs, int64_t periodNs) {
  std::vector<storage::SliceRow> rows;
  for (int i = 0; i < n; ++i) rows.push_back(slice(i * periodNs, durNs, "experts.fwd"));
  return rows;
}

TEST(TimelineData, GroupsSlicesIntoLanesByTrackAndDepth) {
  TimelineData data;
  data.addSlices({slice(0, 100, "step", 0), slice(10, 40, "forward", 1),
                  slice(12, 5, "attention.fwd", 2), slice(0, 50, "step", 0, 3)});
  ASSERT_EQ(data.lanes().size(), 4u);
  EXPECT_EQ(data.lanes()[0].depth, 0);
  EXPECT_EQ(data.lanes()[1].depth, 1);
  EXPECT_EQ(data.lanes()[2].depth, 2);
  EXPECT_EQ(data.lanes()[3].track, TrackId(3));
  EXPECT_EQ(data.sliceCount(), 4);
  EXPECT_EQ(data.bounds(), (TimeRange{0, 100}));
  EXPECT_EQ(data.name(data.lanes()[2].slices[0].nameId), "attention.fwd");
}

TEST(TimelineData, SkipsDuplicatesAndSortsLateRows) {
  TimelineData data;
  std::vector<bool> accepted;
  EXPECT_EQ(data.addSlices({slice(0, 10, "a"), slice(20, 10, "b")}, &accepted), 2);
  const uint64_t rev = data.revision();
  // A refresh that re-reads an overlapping window: the known row is skipped, the late one sorted.
  EXPECT_EQ(
      data.addSlices({slice(20, 10, "b"), slice(40, 10, "c"), slice(5, 3, "late")}, &accepted), 2);
  EXPECT_EQ(accepted, (std::vector<bool>{false, true, true}));
  EXPECT_GT(data.revision(), rev);
  const TimelineLane& lane = data.lanes()[0];
  ASSERT_EQ(lane.slices.size(), 4u);
  for (size_t i = 1; i < lane.slices.size(); ++i) {
    EXPECT_LE(lane.slices[i - 1].startNs, lane.slices[i].startNs);
    EXPECT_LE(lane.maxEndNs[i - 1], lane.maxEndNs[i]);
  }
  EXPECT_EQ(lane.maxEndNs, (std::vector<int64_t>{10, 10, 30, 50}));
  EXPECT_EQ(data.addSlices({slice(20, 10, "b")}), 0);
  EXPECT_EQ(data.sliceCount(), 4);
}

TEST(TimelineData, VisibleRangeUsesBinarySearchBounds) {
  TimelineData data;
  data.addSlices(comb(100, 5, 10));  // [0,5), [10,15), ... [990,995)
  const TimelineLane& lane = data.lanes()[0];
  auto [a, b] = TimelineData::visibleRange(lane, 103, 150);
  EXPECT_EQ(a, 10u);  // [100,105) overlaps 103
  EXPECT_EQ(b, 15u);  // [150,155) starts at the window end: excluded
  auto [c, d] = TimelineData::visibleRange(lane, 105, 110);
  EXPECT_EQ(c, d);  // a gap
  auto [e, f] = TimelineData::visibleRange(lane, 5000, 6000);
  EXPECT_EQ(e, f);
  // A long slice early on keeps later-starting but earlier-ending slices reachable.
  TimelineData nested;
  nested.addSlices({slice(0, 1000, "long"), slice(10, 5, "short"), slice(2000, 5, "late")});
  auto [g, h] = TimelineData::visibleRange(nested.lanes()[0], 500, 600);
  EXPECT_EQ(g, 0u);
  EXPECT_EQ(h, 2u);
}

TEST(TimelineData, ManyNarrowSlicesFoldWhenZoomedOut) {
  TimelineData data;
  data.addSlices(comb(10'000, 1, 10));            // 10k slices of 1 ns over 100 us
  const TimelineGeometry wide{0, 100'000, 1000};  // 100 ns per px: every slice < 3 px
  const DrawList list = buildDrawList(data, wide);
  ASSERT_FALSE(list.items.empty());
  EXPECT_LE(list.items.size(), 3u);
  int64_t covered = 0;
  for (const DrawItem& item : list.items) covered += item.count;
  EXPECT_EQ(covered, 10'000);
  EXPECT_TRUE(list.items.front().isFolded());
  EXPECT_GE(list.items.front().x1 - list.items.front().x0, 3.0);
}

TEST(TimelineData, SlicesDoNotFoldWhenZoomedIn) {
  TimelineData data;
  data.addSlices(comb(10'000, 10, 20));  // 10 ns slices every 20 ns
  const TimelineGeometry wide{0, 200'000, 1000};
  EXPECT_LE(buildDrawList(data, wide).items.size(), 3u);
  const TimelineGeometry zoomed{1'000, 2'000, 1000};  // 1 ns per px: slices are 10 px wide
  const DrawList list = buildDrawList(data, zoomed);
  ASSERT_EQ(list.items.size(), 50u);
  for (const DrawItem& item : list.items) {
    EXPECT_FALSE(item.isFolded());
    EXPECT_NEAR(item.x1 - item.x0, 10.0, 1e-9);
  }
  EXPECT_NEAR(list.items[0].x0, 0.0, 1e-9);
}

TEST(TimelineData, WideSlicesStayAmongNarrowOnes) {
  TimelineData data;
  auto rows = comb(50, 1, 10);                       // narrow run in [0, 500)
  rows.push_back(slice(1000, 5000, "experts.bwd"));  // 50 px wide at 100 ns/px
  auto more = comb(50, 1, 10);
  for (auto& r : more) r.startNs += 10'000;  // second narrow run
  rows.insert(rows.end(), more.begin(), more.end());
  data.addSlices(rows);
  const DrawList list = buildDrawList(data, {0, 100'000, 1000});
  ASSERT_EQ(list.items.size(), 3u);
  EXPECT_TRUE(list.items[0].isFolded());
  EXPECT_FALSE(list.items[1].isFolded());
  EXPECT_NEAR(list.items[1].x0, 10.0, 1e-9);
  EXPECT_NEAR(list.items[1].x1, 60.0, 1e-9);
  EXPECT_TRUE(list.items[2].isFolded());
  EXPECT_EQ(hitTest(list, 0, 30.0), &list.items[1]);
  EXPECT_EQ(hitTest(list, 0, 80.0), nullptr);
  EXPECT_EQ(hitTest(list, 1, 30.0), nullptr);
}

TEST(TimelineData, SeparatedNarrowSlicesStaySeparate) {
  TimelineData data;
  data.addSlices(comb(10, 10, 10'000));                           // 10 ns slices 10 us apart
  const DrawList list = buildDrawList(data, {0, 100'000, 1000});  // 0.1 px wide, 100 px apart
  ASSERT_EQ(list.items.size(), 10u);
  for (const DrawItem& item : list.items) {
    EXPECT_EQ(item.count, 1);
    EXPECT_GE(item.x1 - item.x0, 1.0);
  }
}

}  // namespace
}  // namespace moewb::gui
