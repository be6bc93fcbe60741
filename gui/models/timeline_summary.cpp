// TimelineSummary: the grid, the one-pass builder and the level choice (see timeline_summary.h).
#include "moewb/gui/timeline_summary.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>

namespace moewb::gui {

namespace {

// Busy time per summary name of one bucket being filled; buckets hold few distinct names.
struct NameTimes {
  std::vector<std::pair<int32_t, int64_t>> byName;  // (name index, busy ns)

  void add(int32_t name, int64_t ns) {
    for (auto& [n, total] : byName) {
      if (n == name) {
        total += ns;
        return;
      }
    }
    byName.emplace_back(name, ns);
  }
  // The name with the most busy time (ties: the smaller index) and that time.
  std::pair<int32_t, int64_t> dominant() const {
    std::pair<int32_t, int64_t> best{0, -1};
    for (const auto& [n, ns] : byName) {
      if (ns > best.second || (ns == best.second && n < best.first)) best = {n, ns};
    }
    return best;
  }
};

// A bucket still open for additions.
struct OpenBucket {
  int64_t index = 0;
  int64_t busyNs = 0;
  int32_t count = 0;
  NameTimes names;

  bool empty() const { return count == 0 && names.byName.empty(); }
};

int64_t saturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) {
    return std::numeric_limits<int64_t>::max();
  }
  return a + b;
}

}  // namespace

const LaneSummary* TimelineSummary::lane(TrackId track, int32_t depth) const {
  auto it = std::lower_bound(lanes.begin(), lanes.end(), std::make_pair(track, depth),
                             [](const LaneSummary& l, const std::pair<TrackId, int32_t>& k) {
                               return std::make_pair(l.track, l.depth) < k;
                             });
  return it != lanes.end() && it->track == track && it->depth == depth ? &*it : nullptr;
}

void chooseSummaryGrid(TimeRange span, TimelineSummary* summary) {
  const int64_t spanNs = std::max<int64_t>(1, span.endNs - span.startNs);
  summary->originNs = span.startNs;
  summary->bucketNs = std::max<int64_t>(1, spanNs / TimelineSummary::kTargetBuckets +
                                               (spanNs % TimelineSummary::kTargetBuckets != 0));
  int levels = 1;
  while (levels < 31 && summary->widthNs(levels - 1) < spanNs) ++levels;
  summary->levelCount = levels;
}

struct SummaryBuilder::State {
  // One lane being built: open level-0 buckets (consecutive indexes from the front) and one open
  // bucket per higher level.
  struct Lane {
    std::deque<OpenBucket> open0;
    std::vector<OpenBucket> openUp;  // [level - 1], index -1 = none yet
    int64_t finishedBefore = 0;      // level-0 buckets below this index are finished
    LaneSummary out;
    std::vector<size_t> handed;  // per level: buckets of `out` already taken
  };
  TimelineSummary summary;
  int64_t lastIndex0 = 0;  // highest level-0 index of the grid
  std::map<std::pair<TrackId, int32_t>, Lane> lanes;
  std::unordered_map<std::string, int32_t> nameIndex;
  int64_t outOfOrder = 0;

  Lane& laneOf(TrackId track, int32_t depth) {
    auto [it, fresh] = lanes.try_emplace({track, depth});
    if (fresh) {
      it->second.out.track = track;
      it->second.out.depth = depth;
      it->second.out.levels.resize(size_t(summary.levelCount));
      it->second.handed.assign(size_t(summary.levelCount), 0);
      it->second.openUp.resize(size_t(summary.levelCount - 1));
      for (OpenBucket& b : it->second.openUp) b.index = -1;
    }
    return it->second;
  }

  int64_t index0(int64_t tNs) const {
    const int64_t offset =
        tNs <= summary.originNs ? 0 : (tNs - summary.originNs) / summary.bucketNs;
    return std::clamp<int64_t>(offset, 0, lastIndex0);
  }

  // Finishes `bucket` of `level`: appends it to the output and merges it into its parent.
  void finishBucket(Lane& lane, int level, OpenBucket&& bucket) {
    if (bucket.empty()) return;
    const auto [name, nameNs] = bucket.names.dominant();
    lane.out.levels[size_t(level)].push_back(
        {bucket.index, bucket.busyNs, std::max<int64_t>(nameNs, 0), bucket.count, name});
    if (level + 1 >= summary.levelCount) return;
    OpenBucket& parent = lane.openUp[size_t(level)];
    const int64_t parentIndex = bucket.index >> TimelineSummary::kLevelShift;
    if (parent.index != parentIndex) {
      if (parent.index >= 0) finishBucket(lane, level + 1, std::move(parent));
      parent = OpenBucket();
      parent.index = parentIndex;
    }
    parent.busyNs = saturatingAdd(parent.busyNs, bucket.busyNs);
    parent.count += bucket.count;
    for (const auto& [n, ns] : bucket.names.byName) parent.names.add(n, ns);
  }

  // Finishes the level-0 buckets of `lane` below `index`.
  void finishBelow(Lane& lane, int64_t index) {
    while (!lane.open0.empty() && lane.open0.front().index < index) {
      OpenBucket bucket = std::move(lane.open0.front());
      lane.open0.pop_front();
      finishBucket(lane, 0, std::move(bucket));
    }
    lane.finishedBefore = std::max(lane.finishedBefore, index);
  }

  void finishLane(Lane& lane) {
    finishBelow(lane, std::numeric_limits<int64_t>::max());
    for (int level = 1; level < summary.levelCount; ++level) {
      OpenBucket& open = lane.openUp[size_t(level - 1)];
      if (open.index >= 0) finishBucket(lane, level, std::move(open));
      open = OpenBucket();
      open.index = -1;
    }
  }
};

SummaryBuilder::SummaryBuilder(TimeRange span) : m_state(std::make_unique<State>()) {
  chooseSummaryGrid(span, &m_state->summary);
  const int64_t spanNs = std::max<int64_t>(1, span.endNs - span.startNs);
  m_state->lastIndex0 = (spanNs - 1) / m_state->summary.bucketNs;
}

SummaryBuilder::~SummaryBuilder() = default;

int32_t SummaryBuilder::addName(const std::string& name) {
  auto [it, fresh] = m_state->nameIndex.try_emplace(name, int32_t(m_state->summary.names.size()));
  if (fresh) m_state->summary.names.push_back(name);
  return it->second;
}

int64_t SummaryBuilder::outOfOrder() const {
  return m_state->outOfOrder;
}

void SummaryBuilder::add(TrackId track, int32_t depth, int64_t startNs, int64_t durNs,
                         int32_t nameIndex) {
  State& st = *m_state;
  State::Lane& lane = st.laneOf(track, depth);
  const int64_t endNs = saturatingAdd(startNs, std::max<int64_t>(durNs, 1));
  const int64_t first = st.index0(startNs);
  const int64_t last = st.index0(endNs - 1);
  if (first < lane.finishedBefore) {
    ++st.outOfOrder;
    return;
  }
  st.finishBelow(lane, first);
  if (lane.open0.empty()) {
    OpenBucket b;
    b.index = first;
    lane.open0.push_back(std::move(b));
  }
  while (lane.open0.back().index < last) {
    OpenBucket b;
    b.index = lane.open0.back().index + 1;
    lane.open0.push_back(std::move(b));
  }
  const int64_t w = st.summary.bucketNs;
  const int64_t gridEndNs = st.summary.originNs + (st.lastIndex0 + 1) * w;
  const int64_t a = std::clamp(startNs, st.summary.originNs, gridEndNs);
  const int64_t b = std::clamp(endNs, st.summary.originNs, gridEndNs);
  const size_t front = size_t(first - lane.open0.front().index);
  for (int64_t k = first; k <= last; ++k) {
    OpenBucket& bucket = lane.open0[front + size_t(k - first)];
    const int64_t bucketStart = st.summary.originNs + k * w;
    const int64_t overlap = std::min(b, bucketStart + w) - std::max(a, bucketStart);
    if (k == first) ++bucket.count;
    // A slice clamped to the grid's edge still counts 1 ns where it was put.
    const int64_t ns = std::max<int64_t>(overlap, k == first ? 1 : 0);
    if (ns <= 0) continue;
    bucket.busyNs = saturatingAdd(bucket.busyNs, ns);
    bucket.names.add(nameIndex, ns);
  }
  ++st.summary.sliceCount;
}

std::unique_ptr<TimelineSummary> SummaryBuilder::takeFinished() {
  State& st = *m_state;
  auto part = std::make_unique<TimelineSummary>();
  part->originNs = st.summary.originNs;
  part->bucketNs = st.summary.bucketNs;
  part->levelCount = st.summary.levelCount;
  part->sliceCount = st.summary.sliceCount;
  part->partial = true;
  bool any = false;
  for (auto& [key, lane] : st.lanes) {
    LaneSummary out;
    out.track = lane.out.track;
    out.depth = lane.out.depth;
    out.levels.resize(lane.out.levels.size());
    bool laneAny = false;
    for (size_t l = 0; l < lane.out.levels.size(); ++l) {
      const std::vector<SummaryBucket>& all = lane.out.levels[l];
      out.levels[l].assign(all.begin() + std::ptrdiff_t(lane.handed[l]), all.end());
      laneAny = laneAny || !out.levels[l].empty();
      lane.handed[l] = all.size();
    }
    if (laneAny) part->lanes.push_back(std::move(out));
    any = any || laneAny;
  }
  if (!any) return nullptr;
  part->names = st.summary.names;
  return part;
}

void SummaryBuilder::close() {
  for (auto& [key, lane] : m_state->lanes) m_state->finishLane(lane);
}

const TimelineSummary& SummaryBuilder::all() const {
  State& st = *m_state;
  st.summary.lanes.clear();
  for (const auto& [key, lane] : st.lanes) st.summary.lanes.push_back(lane.out);
  return st.summary;
}

TimelineSummary SummaryBuilder::finish() {
  close();
  State& st = *m_state;
  st.summary.lanes.clear();
  for (auto& [key, lane] : st.lanes) st.summary.lanes.push_back(std::move(lane.out));
  TimelineSummary out = std::move(st.summary);
  m_state = std::make_unique<State>();
  return out;
}

bool appendSummary(TimelineSummary* into, TimelineSummary&& part) {
  if (into->originNs != part.originNs || into->bucketNs != part.bucketNs ||
      into->levelCount != part.levelCount) {
    return false;
  }
  for (LaneSummary& lane : part.lanes) {
    auto it = std::lower_bound(into->lanes.begin(), into->lanes.end(),
                               std::make_pair(lane.track, lane.depth),
                               [](const LaneSummary& l, const std::pair<TrackId, int32_t>& k) {
                                 return std::make_pair(l.track, l.depth) < k;
                               });
    if (it == into->lanes.end() || !(it->track == lane.track) || it->depth != lane.depth) {
      into->lanes.insert(it, std::move(lane));
      continue;
    }
    for (size_t l = 0; l < lane.levels.size() && l < it->levels.size(); ++l) {
      it->levels[l].insert(it->levels[l].end(), lane.levels[l].begin(), lane.levels[l].end());
    }
  }
  into->names = std::move(part.names);
  into->sliceCount = std::max(into->sliceCount, part.sliceCount);
  return true;
}

int summaryLevelFor(const TimelineSummary& summary, double nsPerPx) {
  int level = -1;
  for (int l = 0; l < summary.levelCount; ++l) {
    if (double(summary.widthNs(l)) <= nsPerPx) level = l;
  }
  return level;
}

}  // namespace moewb::gui
