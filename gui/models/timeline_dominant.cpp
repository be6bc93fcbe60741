// Dominant names of folded timeline runs: per pixel column, the slice name with the most busy
// time, by exact overlap where a column holds few slices and by an even sample where it holds
// many, or from the per-level summaries (timeline_summary.h) where a level fits the zoom.
#include <algorithm>
#include <cmath>
#include <limits>

#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_summary.h"

namespace moewb::gui {

namespace {

// Busy time per name in the column being filled; runs have few distinct names.
class ColumnAccumulator {
 public:
  ColumnAccumulator(int32_t laneIndex, double nsPerPx, std::vector<DominantSpan>* out)
      : m_lane(laneIndex), m_nsPerPx(nsPerPx), m_out(out) {}

  // Adds `ns` of name `nameId` and `busyNs` of busy time (ns and more) to `column`.
  void add(int64_t column, int32_t nameId, double ns, double busyNs) {
    if (column != m_column) {
      flush();
      m_column = column;
    }
    m_busyNs += busyNs;
    for (auto& [name, total] : m_names) {
      if (name == nameId) {
        total += ns;
        return;
      }
    }
    m_names.emplace_back(nameId, ns);
  }

  // Ends the current column: its dominant name extends the last span or starts a new one.
  void flush() {
    if (m_names.empty()) return;
    auto best = m_names.begin();
    for (auto it = m_names.begin(); it != m_names.end(); ++it) {
      if (it->second > best->second || (it->second == best->second && it->first < best->first)) {
        best = it;
      }
    }
    const double busy = std::min(1.0, m_busyNs / m_nsPerPx);
    const double x = double(m_column);
    if (!m_out->empty() && m_out->back().lane == m_lane && m_out->back().nameId == best->first &&
        m_out->back().x1 == x) {
      DominantSpan& span = m_out->back();
      const double columns = span.x1 - span.x0;
      span.busyFraction = (span.busyFraction * columns + busy) / (columns + 1);
      span.x1 = x + 1;
    } else {
      m_out->push_back({m_lane, x, x + 1, best->first, busy});
    }
    m_names.clear();
    m_busyNs = 0;
  }

 private:
  int32_t m_lane;
  double m_nsPerPx;
  std::vector<DominantSpan>* m_out;
  int64_t m_column = std::numeric_limits<int64_t>::min();
  double m_busyNs = 0;
  std::vector<std::pair<int32_t, double>> m_names;
};

}  // namespace

std::vector<DominantSpan> dominantSpans(const TimelineLane& lane, int32_t laneIndex, size_t first,
                                        size_t count, const TimelineGeometry& g,
                                        size_t maxPerColumn) {
  std::vector<DominantSpan> out;
  const double nsPerPx = g.nsPerPx();
  if (!(nsPerPx > 0) || count == 0) return out;
  const int64_t lastColumn = std::max<int64_t>(0, int64_t(std::ceil(g.widthPx)) - 1);
  const size_t end = std::min(lane.slices.size(), first + count);
  auto columnOf = [&](double tNs) {
    return std::clamp(int64_t(std::floor((tNs - double(g.startNs)) / nsPerPx)), int64_t(0),
                      lastColumn);
  };
  auto columnStartNs = [&](int64_t c) { return double(g.startNs) + double(c) * nsPerPx; };
  ColumnAccumulator acc(laneIndex, nsPerPx, &out);
  const size_t sample = std::max<size_t>(1, maxPerColumn);
  int64_t cachedColumn = -1;
  size_t cachedEnd = 0;  // first slice starting at or after the end of cachedColumn
  size_t i = first;
  while (i < end) {
    const TimelineSlice& s = lane.slices[i];
    const double t0 = std::max(double(s.startNs), double(g.startNs));
    const double t1 = std::min(double(s.startNs + std::max<int64_t>(s.durNs, 1)), double(g.endNs));
    if (t1 <= t0) {
      ++i;
      continue;
    }
    const int64_t c0 = columnOf(t0);
    if (c0 != cachedColumn) {
      const double colEnd = columnStartNs(c0 + 1);
      auto it = std::lower_bound(
          lane.slices.begin() + std::ptrdiff_t(i), lane.slices.begin() + std::ptrdiff_t(end),
          colEnd, [](const TimelineSlice& x, double t) { return double(x.startNs) < t; });
      cachedColumn = c0;
      cachedEnd = size_t(it - lane.slices.begin());
    }
    const size_t inColumn = cachedEnd - i;
    if (inColumn > sample) {
      // A dense column: an even sample, each sampled slice standing for n / sample slices.
      const double weight = double(inColumn) / double(sample);
      const double colStart = columnStartNs(c0), colEnd = columnStartNs(c0 + 1);
      for (size_t k = 0; k < sample; ++k) {
        const TimelineSlice& x = lane.slices[i + k * inColumn / sample];
        const double a = std::max(double(x.startNs), colStart);
        const double b = std::min(double(x.startNs + std::max<int64_t>(x.durNs, 1)), colEnd);
        if (b > a) acc.add(c0, x.nameId, (b - a) * weight, (b - a) * weight);
      }
      i = cachedEnd;
      continue;
    }
    const int64_t c1 = columnOf(std::nextafter(t1, t0));
    for (int64_t c = c0; c <= c1; ++c) {
      const double a = std::max(t0, columnStartNs(c));
      const double b = std::min(t1, columnStartNs(c + 1));
      const double ns = std::max(b - a, 1.0);
      acc.add(c, s.nameId, ns, ns);
    }
    ++i;
  }
  acc.flush();
  return out;
}

std::vector<DominantSpan> dominantSpansFromSummary(const TimelineSummary& summary,
                                                   const LaneSummary& lane, int level,
                                                   int32_t laneIndex, int64_t startNs,
                                                   int64_t endNs, const TimelineGeometry& g) {
  std::vector<DominantSpan> out;
  const double nsPerPx = g.nsPerPx();
  if (!(nsPerPx > 0) || level < 0 || size_t(level) >= lane.levels.size()) return out;
  const int64_t a = std::max(startNs, g.startNs), b = std::min(endNs, g.endNs);
  if (b <= a) return out;
  const std::vector<SummaryBucket>& buckets = lane.levels[size_t(level)];
  const int64_t w = summary.widthNs(level);
  const int64_t firstIndex = (a - summary.originNs) / w - 1;  // may start before origin: fine
  auto it = std::lower_bound(buckets.begin(), buckets.end(), firstIndex,
                             [](const SummaryBucket& x, int64_t k) { return x.index < k; });
  const int64_t lastColumn = std::max<int64_t>(0, int64_t(std::ceil(g.widthPx)) - 1);
  ColumnAccumulator acc(laneIndex, nsPerPx, &out);
  for (; it != buckets.end(); ++it) {
    const double bucketStart = double(summary.originNs) + double(it->index) * double(w);
    const double t0 = std::max(bucketStart, double(a));
    const double t1 = std::min(bucketStart + double(w), double(b));
    if (bucketStart >= double(b)) break;
    if (t1 <= t0) continue;
    // A bucket is at most one column wide: it lies in one column or straddles two.
    const double x0 = (t0 - double(g.startNs)) / nsPerPx, x1 = (t1 - double(g.startNs)) / nsPerPx;
    const int64_t c0 = std::clamp(int64_t(std::floor(x0)), int64_t(0), lastColumn);
    const int64_t c1 = std::clamp(int64_t(std::ceil(x1)) - 1, c0, lastColumn);
    for (int64_t c = c0; c <= c1; ++c) {
      const double share =
          (std::min(x1, double(c + 1)) - std::max(x0, double(c))) * nsPerPx / double(w);
      if (share <= 0) continue;
      acc.add(c, it->nameId, double(it->dominantBusyNs) * share, double(it->busyNs) * share);
    }
  }
  acc.flush();
  return out;
}

const DominantSpan* dominantAt(const DrawList& list, int32_t lane, double x) {
  // Spans are grouped by lane in item order (lanes ascending, x ascending within a lane).
  auto lo = std::lower_bound(list.dominant.begin(), list.dominant.end(), lane,
                             [](const DominantSpan& s, int32_t l) { return s.lane < l; });
  auto hi = std::upper_bound(lo, list.dominant.end(), lane,
                             [](int32_t l, const DominantSpan& s) { return l < s.lane; });
  auto it = std::upper_bound(lo, hi, x, [](double v, const DominantSpan& s) { return v < s.x0; });
  if (it == lo) return nullptr;
  --it;
  return x < it->x1 ? &*it : nullptr;
}

}  // namespace moewb::gui
