// Range aggregates: what lies inside a selected time range, grouped by name (the rows of the
// "Selection" dock, as Perfetto's and Nsight Systems' range selections show them).
//
// aggregateHostSlices walks the host slices the timeline holds (TimelineData) that overlap the
// range: per lane two binary searches find them (TimelineData::visibleRange), then one pass sums
// them per name id into a dense array, so the cost is O(lanes * log n + slices in the range +
// names), with no allocation per slice (about 10 ms for a full-range selection of 1M slices on
// the 2-core machine: bench/RESULTS.md).
// Clipping rule: a slice counts once when it overlaps [start, end) (its start < the range's end
// and its end > the range's start, so a zero-length slice counts strictly inside), and only
// its part inside the range counts towards total, self and max. Self time is that clipped time
// minus the clipped time of its children (the slices one depth below on the same track that
// overlap it), never below 0. Pure values, any thread; the data must not change meanwhile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_geometry.h"

namespace moewb::gui {

// Everything of one name (and kind) inside a range.
struct RangeAggregateRow {
  std::string name;      // slice name (kernels: the short name when captured)
  std::string fullName;  // the full name (kernels: demangled); equal to name otherwise
  std::string kind;      // "host" for host slices; GPU work: kernel, memcpy, memset
  int64_t count = 0;     // slices overlapping the range
  int64_t totalNs = 0;   // their time inside the range, ns
  int64_t selfNs = 0;    // total minus the time of their children inside the range, ns
  int64_t maxNs = 0;     // the largest clipped time of one slice, ns
  TimeRange longest;     // that slice's whole span (not clipped), ns

  double avgNs() const { return count ? double(totalNs) / double(count) : 0.0; }
  // Share of a range of `rangeNs` (0..1; names at several depths can add up to more than 1).
  double shareOf(int64_t rangeNs) const {
    return rangeNs > 0 ? double(totalNs) / double(rangeNs) : 0.0;
  }
};

// The host slices of `data` overlapping `range` grouped by name (kind "host"), ordered by total
// descending, then name. Empty for an empty range. See the file comment for clipping and cost.
std::vector<RangeAggregateRow> aggregateHostSlices(const TimelineData& data, TimeRange range);

}  // namespace moewb::gui
