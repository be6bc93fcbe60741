// TimelineData: lanes of time-sorted packed slices, interned names, duplicate-free appends.
#include "moewb/gui/timeline_data.h"

#include <algorithm>
#include <limits>
#include <map>

#include "moewb/gui/timeline_summary.h"

namespace moewb::gui {

void TimelineData::clear() {
  m_lanes.clear();
  m_tracks.clear();
  m_names.clear();
  m_nameIds.clear();
  m_bounds = {};
  m_sliceCount = 0;
  m_summary.reset();
  ++m_revision;
}

void TimelineData::addSummary(std::unique_ptr<TimelineSummary> part) {
  if (!part) return;
  ++m_revision;
  std::vector<int32_t> ids;
  ids.reserve(part->names.size());
  for (const std::string& name : part->names) ids.push_back(internName(name));
  const bool reserve = !part->partial && !m_summary;
  for (LaneSummary& lane : part->lanes) {
    for (std::vector<SummaryBucket>& level : lane.levels) {
      for (SummaryBucket& b : level) {
        b.nameId = b.nameId >= 0 && size_t(b.nameId) < ids.size() ? ids[size_t(b.nameId)] : 0;
      }
    }
    // Only lanes of the file's tracks (set before the summary comes) are made and reserved.
    if (!reserve || lane.levels.empty() || !track(lane.track)) continue;
    int64_t slices = 0;
    for (const SummaryBucket& b : lane.levels.front()) slices += b.count;
    // A bound on what a damaged count could make us reserve: the summary's own slice count.
    slices = std::min(slices, part->sliceCount);
    TimelineLane& target = laneFor(lane.track, lane.depth);
    if (slices > int64_t(target.slices.capacity())) {
      target.slices.reserve(size_t(slices));
      target.maxEndNs.reserve(size_t(slices));
    }
  }
  if (!m_summary) {
    m_summary = std::move(part);
  } else if (!appendSummary(m_summary.get(), std::move(*part))) {
    m_summary.reset();
  }
}

void TimelineData::dropSummary() {
  m_summary.reset();
  ++m_revision;
}

void TimelineData::setTracks(const std::vector<storage::TrackRow>& tracks) {
  m_tracks.clear();
  for (const storage::TrackRow& t : tracks) m_tracks.push_back({t.id, t.name, t.kind, t.rank});
  std::sort(m_tracks.begin(), m_tracks.end(),
            [](const TimelineTrack& a, const TimelineTrack& b) { return a.id < b.id; });
  ++m_revision;
}

const TimelineTrack* TimelineData::track(TrackId id) const {
  auto it = std::lower_bound(m_tracks.begin(), m_tracks.end(), id,
                             [](const TimelineTrack& t, TrackId v) { return t.id < v; });
  return it != m_tracks.end() && it->id == id ? &*it : nullptr;
}

const std::string& TimelineData::name(int32_t nameId) const {
  static const std::string kEmpty;
  return nameId >= 0 && size_t(nameId) < m_names.size() ? m_names[size_t(nameId)] : kEmpty;
}

int32_t TimelineData::internName(const std::string& name) {
  auto [it, inserted] = m_nameIds.try_emplace(name, int32_t(m_names.size()));
  if (inserted) m_names.push_back(name);
  return it->second;
}

TimelineLane& TimelineData::laneFor(TrackId track, int32_t depth) {
  auto key = std::make_pair(track, depth);
  auto it = std::lower_bound(m_lanes.begin(), m_lanes.end(), key,
                             [](const TimelineLane& l, const std::pair<TrackId, int32_t>& k) {
                               return std::make_pair(l.track, l.depth) < k;
                             });
  if (it != m_lanes.end() && it->track == track && it->depth == depth) return *it;
  TimelineLane lane;
  lane.track = track;
  lane.depth = depth;
  return *m_lanes.insert(it, std::move(lane));
}

// Inserts `slice` in start order unless an identical slice is there. Appends are O(1); an
// out-of-order insert lowers *dirtyFrom so the running end maximum is recomputed from there.
bool TimelineData::insertSlice(TimelineLane& lane, const TimelineSlice& slice, size_t* dirtyFrom) {
  auto& v = lane.slices;
  if (v.empty() || slice.startNs > v.back().startNs) {
    const int64_t prevMax =
        lane.maxEndNs.empty() ? std::numeric_limits<int64_t>::min() : lane.maxEndNs.back();
    v.push_back(slice);
    lane.maxEndNs.push_back(std::max(prevMax, slice.endNs()));
    return true;
  }
  auto byStart = [](const TimelineSlice& a, const TimelineSlice& b) {
    return a.startNs < b.startNs;
  };
  auto [lo, hi] = std::equal_range(v.begin(), v.end(), slice, byStart);
  for (auto it = lo; it != hi; ++it) {
    if (it->durNs == slice.durNs && it->nameId == slice.nameId) return false;
  }
  const size_t index = size_t(hi - v.begin());
  v.insert(hi, slice);
  lane.maxEndNs.insert(lane.maxEndNs.begin() + std::ptrdiff_t(index), 0);
  *dirtyFrom = std::min(*dirtyFrom, index);
  return true;
}

bool TimelineData::addOne(TrackId track, int32_t depth, const TimelineSlice& s,
                          std::map<std::pair<TrackId, int32_t>, size_t>* dirty) {
  TimelineLane& lane = laneFor(track, depth);
  size_t dirtyFrom = std::numeric_limits<size_t>::max();
  if (!insertSlice(lane, s, &dirtyFrom)) return false;
  if (dirtyFrom != std::numeric_limits<size_t>::max()) {
    auto [it, fresh] = dirty->try_emplace({track, depth}, dirtyFrom);
    if (!fresh) it->second = std::min(it->second, dirtyFrom);
  }
  if (m_sliceCount == 0) m_bounds = {s.startNs, s.endNs()};
  m_bounds.startNs = std::min(m_bounds.startNs, s.startNs);
  m_bounds.endNs = std::max(m_bounds.endNs, s.endNs());
  ++m_sliceCount;
  return true;
}

void TimelineData::repairMaxEnds(const std::map<std::pair<TrackId, int32_t>, size_t>& dirty) {
  for (const auto& [key, from] : dirty) {
    TimelineLane& lane = laneFor(key.first, key.second);
    for (size_t j = from; j < lane.slices.size(); ++j) {
      const int64_t prev = j == 0 ? std::numeric_limits<int64_t>::min() : lane.maxEndNs[j - 1];
      lane.maxEndNs[j] = std::max(prev, lane.slices[j].endNs());
    }
  }
}

int64_t TimelineData::addSlices(const std::vector<storage::SliceRow>& rows,
                                std::vector<bool>* accepted) {
  if (accepted) accepted->assign(rows.size(), false);
  std::map<std::pair<TrackId, int32_t>, size_t> dirty;
  int64_t added = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const storage::SliceRow& row = rows[i];
    TimelineSlice s;
    s.startNs = row.startNs;
    s.durNs = std::max<int64_t>(row.durNs, 0);
    s.step = row.step;
    s.layer = row.layer;
    s.nameId = internName(row.name);
    if (!addOne(row.track, row.depth, s, &dirty)) continue;
    ++added;
    if (accepted) (*accepted)[i] = true;
  }
  repairMaxEnds(dirty);
  if (added) {
    ++m_revision;
    m_summary.reset();  // the summary lacks these rows
  }
  return added;
}

int64_t TimelineData::addLoadedSlices(const std::vector<LoadedSlice>& rows,
                                      const std::vector<int32_t>& nameIds,
                                      std::vector<bool>* accepted) {
  if (accepted) accepted->assign(rows.size(), false);
  std::map<std::pair<TrackId, int32_t>, size_t> dirty;
  int64_t added = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const LoadedSlice& row = rows[i];
    TimelineSlice s;
    s.startNs = row.startNs;
    s.durNs = std::max<int64_t>(row.durNs, 0);
    s.step = row.step;
    s.layer = row.layer;
    const bool known = row.nameIndex >= 0 && size_t(row.nameIndex) < nameIds.size();
    s.nameId = known ? nameIds[size_t(row.nameIndex)] : internName(std::string());
    if (!addOne(row.track, row.depth, s, &dirty)) continue;
    ++added;
    if (accepted) (*accepted)[i] = true;
  }
  repairMaxEnds(dirty);
  if (added) ++m_revision;
  return added;
}

std::pair<size_t, size_t> TimelineData::visibleRange(const TimelineLane& lane, int64_t startNs,
                                                     int64_t endNs) {
  // First slice whose running end maximum passes the window start: nothing before it can
  // overlap. Last: the first slice starting at or after the window end.
  auto firstIt = std::upper_bound(lane.maxEndNs.begin(), lane.maxEndNs.end(), startNs);
  size_t first = size_t(firstIt - lane.maxEndNs.begin());
  auto lastIt =
      std::lower_bound(lane.slices.begin() + std::ptrdiff_t(first), lane.slices.end(), endNs,
                       [](const TimelineSlice& s, int64_t t) { return s.startNs < t; });
  size_t last = size_t(lastIt - lane.slices.begin());
  return {first, std::max(first, last)};
}

LayerSplit splitLaneByLayer(const TimelineLane& lane) {
  LayerSplit split;
  split.layers.push_back(-1);
  for (const TimelineSlice& s : lane.slices) {
    if (s.layer >= 0) split.layers.push_back(s.layer);
    // Consecutive slices mostly repeat a few layers: dedupe as we go to keep this small.
    if (split.layers.size() > 64) {
      std::sort(split.layers.begin(), split.layers.end());
      split.layers.erase(std::unique(split.layers.begin(), split.layers.end()),
                         split.layers.end());
    }
  }
  std::sort(split.layers.begin(), split.layers.end());
  split.layers.erase(std::unique(split.layers.begin(), split.layers.end()), split.layers.end());
  split.lanes.resize(split.layers.size());
  for (TimelineLane& sub : split.lanes) {
    sub.track = lane.track;
    sub.depth = lane.depth;
  }
  for (const TimelineSlice& s : lane.slices) {
    const int32_t layer = std::max(s.layer, -1);
    const auto it = std::lower_bound(split.layers.begin(), split.layers.end(), layer);
    TimelineLane& sub = split.lanes[size_t(it - split.layers.begin())];
    const int64_t prevMax =
        sub.maxEndNs.empty() ? std::numeric_limits<int64_t>::min() : sub.maxEndNs.back();
    sub.slices.push_back(s);
    sub.maxEndNs.push_back(std::max(prevMax, s.endNs()));
  }
  return split;
}

}  // namespace moewb::gui
