// Zoomed-out timeline colouring: the dominant name per pixel column of folded runs (hand-made
// columns, a brute-force check on random lanes, the dense-column sample) and ruler labels that
// stay short far from the origin.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_geometry.h"

namespace moewb::gui {
namespace {

TimelineLane laneOf(std::vector<TimelineSlice> slices) {
  TimelineLane lane;
  lane.slices = std::move(slices);
  int64_t maxEnd = std::numeric_limits<int64_t>::min();
  for (const TimelineSlice& s : lane.slices) {
    maxEnd = std::max(maxEnd, s.endNs());
    lane.maxEndNs.push_back(maxEnd);
  }
  return lane;
}

TimelineSlice slice(int64_t start, int64_t dur, int32_t name) {
  TimelineSlice s;
  s.startNs = start;
  s.durNs = dur;
  s.nameId = name;
  return s;
}

TEST(TimelineDominant, PicksTheNameWithTheMostBusyTimePerColumn) {
  // 10 columns of 100 ns. A = 0, B = 1, C = 2, D = 3.
  const TimelineLane lane = laneOf({slice(0, 60, 0), slice(60, 30, 1),     // col 0: A
                                    slice(100, 20, 0), slice(120, 70, 1),  // col 1: B
                                    slice(200, 50, 1),                     // col 2: B
                                    slice(450, 80, 2),                     // col 4: C; 30 in 5
                                    slice(530, 70, 3)});                   // col 5: D
  const TimelineGeometry g{0, 1000, 10};
  const std::vector<DominantSpan> spans = dominantSpans(lane, 7, 0, lane.slices.size(), g);
  ASSERT_EQ(spans.size(), 4u);
  const int32_t names[] = {0, 1, 2, 3};
  const double x0[] = {0, 1, 4, 5}, x1[] = {1, 3, 5, 6};
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].lane, 7);
    EXPECT_EQ(spans[i].nameId, names[i]) << "span " << i;
    EXPECT_EQ(spans[i].x0, x0[i]) << "span " << i;
    EXPECT_EQ(spans[i].x1, x1[i]) << "span " << i;
  }
  EXPECT_NEAR(spans[0].busyFraction, 0.9, 1e-9);
  EXPECT_NEAR(spans[1].busyFraction, (0.9 + 0.5) / 2, 1e-9);
  EXPECT_NEAR(spans[3].busyFraction, 1.0, 1e-9);  // 30 of C + 70 of D
}

TEST(TimelineDominant, AgreesWithABruteForceOnRandomLanes) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<TimelineSlice> slices;
    int64_t t = int64_t(rng() % 50);
    while (t < 10'000) {
      const int64_t dur = 1 + int64_t(rng() % 120);
      slices.push_back(slice(t, dur, int32_t(rng() % 4)));
      t += dur + int64_t(rng() % 60);
    }
    const TimelineLane lane = laneOf(slices);
    const TimelineGeometry g{1'000, 9'000, 37};
    const auto spans = dominantSpans(lane, 0, 0, slices.size(), g, 1'000'000);
    // Brute force: busy time per (column, name), exact overlap.
    std::map<int, std::map<int32_t, double>> busy;
    const double nsPerPx = g.nsPerPx();
    for (const TimelineSlice& s : slices) {
      for (int c = 0; c < 37; ++c) {
        const double a = std::max(double(s.startNs), 1'000 + c * nsPerPx);
        const double b = std::min(double(s.endNs()), 1'000 + (c + 1) * nsPerPx);
        if (b > a) busy[c][s.nameId] += b - a;
      }
    }
    std::map<int, int32_t> expect;
    for (const auto& [c, names] : busy) {
      int32_t best = -1;
      double bestNs = -1;
      for (const auto& [name, ns] : names) {
        if (ns > bestNs + 1e-6) {
          bestNs = ns;
          best = name;
        }
      }
      expect[c] = best;
    }
    std::map<int, int32_t> got;
    for (const DominantSpan& span : spans) {
      for (int c = int(span.x0); c < int(span.x1); ++c) got[c] = span.nameId;
    }
    // Columns where two names tie within a nanosecond may go either way (rounding of edges).
    for (const auto& [c, name] : expect) {
      const auto& names = busy[c];
      const double top = names.at(name);
      int ties = 0;
      for (const auto& [n, ns] : names) ties += std::abs(ns - top) <= 2.0 ? 1 : 0;
      if (ties > 1) continue;
      ASSERT_TRUE(got.count(c)) << "trial " << trial << " column " << c;
      EXPECT_EQ(got[c], name) << "trial " << trial << " column " << c;
    }
  }
}

TEST(TimelineDominant, DenseColumnsAreJudgedOnASample) {
  // 20000 slices in one column: name 0 takes 3 ns of every 5, name 1 takes 1 ns.
  std::vector<TimelineSlice> slices;
  for (int i = 0; i < 10'000; ++i) {
    slices.push_back(slice(i * 10, 3, 0));
    slices.push_back(slice(i * 10 + 5, 1, 1));
  }
  const TimelineLane lane = laneOf(slices);
  const TimelineGeometry g{0, 100'000, 1};
  const auto sampled = dominantSpans(lane, 0, 0, slices.size(), g, 64);
  const auto exact = dominantSpans(lane, 0, 0, slices.size(), g, 1'000'000);
  ASSERT_EQ(sampled.size(), 1u);
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(sampled[0].nameId, 0);
  EXPECT_EQ(exact[0].nameId, 0);
  EXPECT_NEAR(sampled[0].busyFraction, 0.4, 0.02);
  EXPECT_NEAR(exact[0].busyFraction, 0.4, 1e-9);
}

TEST(TimelineDominant, DrawListsColourEveryFoldedItem) {
  TimelineData data;
  std::vector<storage::SliceRow> rows;
  for (int i = 0; i < 5'000; ++i) {
    storage::SliceRow r;
    r.track = TrackId(1);
    r.startNs = i * 1'000;
    r.durNs = 700;
    r.name = i % 3 == 0 ? "router.fwd" : "experts.fwd";
    r.depth = 2;
    rows.push_back(r);
  }
  data.addSlices(rows);
  const DrawList list = buildDrawList(data, fitGeometry(data.bounds(), 500));
  ASSERT_FALSE(list.items.empty());
  ASSERT_FALSE(list.dominant.empty());
  for (const DrawItem& item : list.items) {
    ASSERT_TRUE(item.isFolded());
    const DominantSpan* span = dominantAt(list, item.lane, (item.x0 + item.x1) / 2);
    ASSERT_NE(span, nullptr);
    EXPECT_EQ(data.name(span->nameId), "experts.fwd");  // 2 of every 3 slices
  }
  for (size_t i = 1; i < list.dominant.size(); ++i) {
    EXPECT_GE(list.dominant[i].x0, list.dominant[i - 1].x1) << "spans ascending";
  }
}

TEST(RulerLabels, StayShortFarFromTheOrigin) {
  // Zoomed in to 100 us ticks 31797 s into a run: relative labels.
  const int64_t origin = 5'000'000'000;
  const int64_t base = origin + 31'797'000'100'000;
  std::vector<int64_t> ticks;
  for (int i = 0; i < 5; ++i) ticks.push_back(base + i * 100'000);
  const RulerLabels far = rulerLabels(ticks, origin, 100'000);
  ASSERT_TRUE(far.relative);
  EXPECT_EQ(far.labels[0], "31797.0001 s");
  EXPECT_EQ(far.labels[1], "+100 us");
  EXPECT_EQ(far.labels[4], "+400 us");
  // 100 us ticks 15 s in: "15.0001 s" has more digits than the zoom needs.
  const RulerLabels mid =
      rulerLabels({origin + 15'000'100'000, origin + 15'000'200'000}, origin, 100'000);
  EXPECT_TRUE(mid.relative);
  EXPECT_EQ(mid.labels[1], "+100 us");
  // Near the origin the labels are absolute, as before.
  const RulerLabels near =
      rulerLabels({origin, origin + 250'000, origin + 500'000}, origin, 250'000);
  EXPECT_FALSE(near.relative);
  EXPECT_EQ(near.labels[1], "250 us");
  EXPECT_EQ(near.labels[2], "500 us");
  const RulerLabels seconds =
      rulerLabels({origin + 30'000'000'000LL, origin + 31'000'000'000LL}, origin, 1'000'000'000);
  EXPECT_FALSE(seconds.relative);
  EXPECT_EQ(seconds.labels[1], "31 s");
}

}  // namespace
}  // namespace moewb::gui
