// Draw-list building for the timeline: visible slices by binary search, narrow runs folded.
#include <algorithm>
#include <cmath>
#include <functional>

#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_summary.h"

namespace moewb::gui {

namespace {

// Index one past the run of narrow slices that starts at `first`: neighbours that are narrower
// than minNs and closer than minNs to the run's end join it. Ends are found with binary searches
// over the running end maximum, so a dense run costs O(log n) per minNs of time, not per slice.
size_t foldRun(const TimelineLane& lane, size_t first, size_t last, double minNs,
               int64_t* runEndNs) {
  const auto& slices = lane.slices;
  const auto& maxEnd = lane.maxEndNs;
  int64_t groupEnd = slices[first].endNs();
  size_t j = first + 1;
  const int64_t reachNs = int64_t(std::ceil(minNs));
  while (j < last) {
    auto k = std::lower_bound(maxEnd.begin() + std::ptrdiff_t(j),
                              maxEnd.begin() + std::ptrdiff_t(last), groupEnd + reachNs);
    const size_t kIndex = size_t(k - maxEnd.begin());
    if (kIndex > j) {
      groupEnd = std::max(groupEnd, maxEnd[kIndex - 1]);
      j = kIndex;
      continue;
    }
    const TimelineSlice& next = slices[j];
    if (double(next.durNs) >= minNs || double(next.startNs - groupEnd) >= minNs) break;
    groupEnd = std::max(groupEnd, next.endNs());
    ++j;
  }
  *runEndNs = groupEnd;
  return j;
}

DrawItem makeItem(const TimelineGeometry& g, int32_t lane, size_t first, size_t count,
                  int64_t startNs, int64_t endNs, double minWidthPx) {
  DrawItem item;
  item.lane = lane;
  item.sliceIndex = int32_t(first);
  item.count = int32_t(count);
  item.startNs = startNs;
  item.endNs = endNs;
  // Clamp far-off edges so painters never see huge coordinates.
  const double lo = -2.0, hi = g.widthPx + 2.0;
  item.x0 = std::clamp(g.xOf(startNs), lo, hi);
  item.x1 = std::clamp(g.xOf(endNs), lo, hi);
  const double minWidth = count > 1 ? minWidthPx : 1.0;
  item.x1 = std::max(item.x1, item.x0 + minWidth);
  return item;
}

}  // namespace

DrawList buildDrawList(const TimelineData& data, const TimelineGeometry& g, double minWidthPx) {
  std::vector<const TimelineLane*> lanes;
  lanes.reserve(data.lanes().size());
  for (const TimelineLane& lane : data.lanes()) lanes.push_back(&lane);
  return buildDrawList(lanes, data.revision(), g, minWidthPx, &data);
}

DrawList buildDrawList(const std::vector<const TimelineLane*>& lanes, uint64_t dataRevision,
                       const TimelineGeometry& g, double minWidthPx, const TimelineData* data) {
  DrawList list;
  list.geometry = g;
  list.dataRevision = dataRevision;
  const double minNs = std::max(minWidthPx, 0.0) * g.nsPerPx();
  const TimelineSummary* summary = data ? data->summary() : nullptr;
  const int level = summary ? summaryLevelFor(*summary, g.nsPerPx()) : -1;
  for (size_t laneIndex = 0; laneIndex < lanes.size(); ++laneIndex) {
    const TimelineLane& lane = *lanes[laneIndex];
    // Only the data's own lanes (not layer sub-lanes, which hold a subset) match their summary.
    const LaneSummary* laneSummary = nullptr;
    if (level >= 0 && !data->lanes().empty() &&
        std::less_equal<const TimelineLane*>()(&data->lanes().front(), &lane) &&
        std::less_equal<const TimelineLane*>()(&lane, &data->lanes().back())) {
      laneSummary = summary->lane(lane.track, lane.depth);
    }
    auto [first, last] = TimelineData::visibleRange(lane, g.startNs, g.endNs);
    size_t i = first;
    while (i < last) {
      const TimelineSlice& s = lane.slices[i];
      if (s.endNs() <= g.startNs) {  // inside the range only because an earlier slice is long
        ++i;
        continue;
      }
      if (double(s.durNs) >= minNs) {
        list.items.push_back(
            makeItem(g, int32_t(laneIndex), i, 1, s.startNs, s.endNs(), minWidthPx));
        ++i;
        continue;
      }
      int64_t runEnd = 0;
      const size_t next = foldRun(lane, i, last, minNs, &runEnd);
      const DrawItem& item = list.items.emplace_back(
          makeItem(g, int32_t(laneIndex), i, next - i, s.startNs, runEnd, minWidthPx));
      if (item.isFolded()) {
        std::vector<DominantSpan> spans =
            laneSummary ? dominantSpansFromSummary(*summary, *laneSummary, level,
                                                   int32_t(laneIndex), s.startNs, runEnd, g)
                        : dominantSpans(lane, int32_t(laneIndex), i, next - i, g);
        if (!spans.empty()) {
          // The item may be wider than its columns (widened to minWidthPx): cover it.
          spans.front().x0 = std::min(spans.front().x0, std::floor(item.x0));
          spans.back().x1 = std::max(spans.back().x1, std::ceil(item.x1));
          // Spans of neighbouring runs may share an edge column; keep x ascending.
          if (!list.dominant.empty() && list.dominant.back().lane == int32_t(laneIndex)) {
            spans.front().x0 = std::max(spans.front().x0, list.dominant.back().x1);
          }
          for (const DominantSpan& span : spans) {
            if (span.x1 > span.x0) list.dominant.push_back(span);
          }
        }
      }
      i = next;
    }
  }
  return list;
}

const DrawItem* hitTest(const DrawList& list, int32_t lane, double x) {
  struct ByLane {
    bool operator()(const DrawItem& a, int32_t b) const { return a.lane < b; }
    bool operator()(int32_t a, const DrawItem& b) const { return a < b.lane; }
  };
  auto [lo, hi] = std::equal_range(list.items.begin(), list.items.end(), lane, ByLane{});
  auto it = std::upper_bound(lo, hi, x, [](double v, const DrawItem& d) { return v < d.x0; });
  if (it == lo) return nullptr;
  --it;
  return x <= it->x1 ? &*it : nullptr;
}

}  // namespace moewb::gui
