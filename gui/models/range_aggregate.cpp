// aggregateHostSlices: host slices inside a range, per name, clipped (see range_aggregate.h).
#include "moewb/gui/range_aggregate.h"

#include <algorithm>

namespace moewb::gui {

namespace {

// Running sums of one name id.
struct NameSums {
  int64_t count = 0;
  int64_t totalNs = 0;
  int64_t selfNs = 0;
  int64_t maxNs = -1;  // -1: no slice yet
  TimeRange longest;
};

// The clipped time of lane `children`'s slices inside [a, b), starting the scan at *cursor and
// moving *cursor past the children that end by b (parents of one lane come in start order and do
// not overlap, so those children cannot overlap a later parent).
int64_t childTimeIn(const TimelineLane& children, size_t* cursor, int64_t a, int64_t b) {
  const auto& c = children.slices;
  int64_t sum = 0;
  for (size_t k = *cursor; k < c.size() && c[k].startNs < b; ++k) {
    sum += std::max<int64_t>(0, std::min(c[k].endNs(), b) - std::max(c[k].startNs, a));
  }
  while (*cursor < c.size() && c[*cursor].endNs() <= b) ++*cursor;
  return sum;
}

// Adds lane `lane`'s slices overlapping `range` to `sums` (indexed by name id); `children` is
// the lane one depth below on the same track, or nullptr.
void addLane(const TimelineLane& lane, const TimelineLane* children, TimeRange range,
             std::vector<NameSums>& sums) {
  const auto [first, last] = TimelineData::visibleRange(lane, range.startNs, range.endNs);
  if (first >= last) return;
  size_t cursor = 0;
  if (children) {
    cursor = TimelineData::visibleRange(*children, lane.slices[first].startNs, range.endNs).first;
  }
  for (size_t i = first; i < last; ++i) {
    const TimelineSlice& s = lane.slices[i];
    // visibleRange keeps every slice after the first overlapping one; skip those that end
    // before the range (a long earlier slice kept the running maximum high).
    if (s.endNs() <= range.startNs) continue;
    const int64_t a = std::max(s.startNs, range.startNs);
    const int64_t b = std::min(s.endNs(), range.endNs);
    const int64_t clipped = std::max<int64_t>(b - a, 0);
    const int64_t child = children ? childTimeIn(*children, &cursor, a, b) : 0;
    NameSums& n = sums[size_t(s.nameId)];
    ++n.count;
    n.totalNs += clipped;
    n.selfNs += std::max<int64_t>(clipped - child, 0);
    if (clipped > n.maxNs) {
      n.maxNs = clipped;
      n.longest = {s.startNs, s.endNs()};
    }
  }
}

}  // namespace

std::vector<RangeAggregateRow> aggregateHostSlices(const TimelineData& data, TimeRange range) {
  std::vector<RangeAggregateRow> rows;
  if (range.endNs <= range.startNs) return rows;
  std::vector<NameSums> sums(data.names().size());
  const auto& lanes = data.lanes();
  for (size_t i = 0; i < lanes.size(); ++i) {
    const bool hasChildren = i + 1 < lanes.size() && lanes[i + 1].track == lanes[i].track &&
                             lanes[i + 1].depth == lanes[i].depth + 1;
    addLane(lanes[i], hasChildren ? &lanes[i + 1] : nullptr, range, sums);
  }
  for (size_t id = 0; id < sums.size(); ++id) {
    const NameSums& n = sums[id];
    if (n.count == 0) continue;
    RangeAggregateRow row;
    row.name = data.name(int32_t(id));
    row.fullName = row.name;
    row.kind = "host";
    row.count = n.count;
    row.totalNs = n.totalNs;
    row.selfNs = n.selfNs;
    row.maxNs = std::max<int64_t>(n.maxNs, 0);
    row.longest = n.longest;
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const RangeAggregateRow& a, const RangeAggregateRow& b) {
    return a.totalNs != b.totalNs ? a.totalNs > b.totalNs : a.name < b.name;
  });
  return rows;
}

}  // namespace moewb::gui
