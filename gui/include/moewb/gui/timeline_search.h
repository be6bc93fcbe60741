// TimelineSearch: Ctrl-F search of the timeline's host slices by name (substring, case-
// insensitive), with a current match to step through (Perfetto UI's and Nsight Systems' search).
//
// run() first matches the interned names (few; QString case folding), then collects every slice
// whose name id matched in one pass over the lanes: O(slices + names * name length), about 5 ms
// at 1M slices. Matches are kept twice: all of them ordered by start time (then lane), for
// next/previous, and per lane in slice order, so painting the visible window finds its matches
// by binary search (O(log matches + visible matches)). The result refers to slices by (lane,
// index): run() again when the data changes (dataRevision tells). Pure value, any thread.
#pragma once

#include <QString>
#include <cstdint>
#include <vector>

#include "moewb/gui/timeline_data.h"

namespace moewb::gui {

// One matching slice.
struct SearchMatch {
  int32_t lane = 0;     // index into TimelineData::lanes()
  int32_t index = 0;    // index into that lane's slices
  int64_t startNs = 0;  // the slice's start (the order of matches), ns
  bool operator==(const SearchMatch&) const = default;
};

class TimelineSearch {
 public:
  // Finds the slices of `data` whose name contains `text` (case-insensitive; an empty text finds
  // nothing). Resets the current match.
  void run(const TimelineData& data, const QString& text);
  // Forgets the text and the matches.
  void clear();

  const QString& text() const { return m_text; }
  // All matches by start time, then lane.
  const std::vector<SearchMatch>& matches() const { return m_matches; }
  // The matching slice indices of lane `lane`, ascending (empty for an unknown lane).
  const std::vector<int32_t>& laneMatches(size_t lane) const;
  // TimelineData::revision() when run() last ran.
  uint64_t dataRevision() const { return m_revision; }
  // Index into matches() of the current match, -1 when none is current.
  int current() const { return m_current; }
  // Makes match `index` current (-1: none); out-of-range values become -1.
  void setCurrent(int index);
  // Moves to the next (forward) or previous match and returns its index (-1 without matches).
  // Without a current match, next goes to the first match starting at or after `fromNs` (the
  // first of all when none does) and previous to the last match starting before `fromNs` (the
  // last of all when none does); otherwise both wrap around at the ends.
  int step(bool forward, int64_t fromNs);
  // Whether the slice (lane, index) is a match. O(log matches of that lane).
  bool isMatch(size_t lane, int32_t index) const;

 private:
  QString m_text;
  std::vector<SearchMatch> m_matches;
  std::vector<std::vector<int32_t>> m_perLane;
  uint64_t m_revision = 0;
  int m_current = -1;
};

}  // namespace moewb::gui
