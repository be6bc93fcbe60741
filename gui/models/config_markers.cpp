// Config-change markers: grouping change rows by time (timeline) or step (charts).
#include "moewb/gui/config_markers.h"

#include <QStringList>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <numeric>

#include "moewb/gui/config_change_model.h"

namespace moewb::gui {

namespace {

// Row indexes of `changes` ordered by `key` (stable, so equal keys keep row order).
template <typename Key>
std::vector<int> sortedRows(const std::vector<storage::ConfigChangeRow>& changes, Key key) {
  std::vector<int> order(changes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return key(changes[size_t(a)]) < key(changes[size_t(b)]); });
  return order;
}

// Whether `next`, the change after `prev` in time, belongs to the same live patch.
bool samePatch(const storage::ConfigChangeRow& prev, const storage::ConfigChangeRow& next) {
  // In double: the times come from the file and their difference may leave int64.
  const double gapNs = double(next.tsNs) - double(prev.tsNs);
  return next.step == prev.step && next.source == prev.source && gapNs >= 0 &&
         gapNs <= double(kPatchGapNs);
}

}  // namespace

std::vector<ConfigMarker> timelineMarkers(const std::vector<storage::ConfigChangeRow>& changes,
                                          const TimelineGeometry& g, double mergePx) {
  std::vector<ConfigMarker> markers;
  const std::vector<int> order = sortedRows(changes, [](const auto& r) { return r.tsNs; });
  for (size_t k = 0; k < order.size();) {
    // order[k, end) is one patch, placed at its first change.
    size_t end = k + 1;
    while (end < order.size() &&
           samePatch(changes[size_t(order[end - 1])], changes[size_t(order[end])])) {
      ++end;
    }
    const storage::ConfigChangeRow& first = changes[size_t(order[k])];
    if (first.tsNs >= g.startNs && first.tsNs < g.endNs) {
      const double x = g.xOf(first.tsNs);
      if (markers.empty() || x - markers.back().x > mergePx) {
        markers.push_back({x, first.step, first.tsNs, {}});
      }
      markers.back().rows.insert(markers.back().rows.end(), order.begin() + std::ptrdiff_t(k),
                                 order.begin() + std::ptrdiff_t(end));
    }
    k = end;
  }
  return markers;
}

std::vector<ConfigMarker> stepMarkers(const std::vector<storage::ConfigChangeRow>& changes) {
  std::vector<ConfigMarker> markers;
  for (int i : sortedRows(changes, [](const auto& r) { return r.step; })) {
    const storage::ConfigChangeRow& row = changes[size_t(i)];
    if (!markers.empty() && markers.back().step == row.step) {
      markers.back().rows.push_back(i);
      continue;
    }
    markers.push_back({double(row.step), row.step, row.tsNs, {i}});
  }
  return markers;
}

int markerNear(const std::vector<ConfigMarker>& markers, double x, double tolerance) {
  auto it = std::lower_bound(markers.begin(), markers.end(), x,
                             [](const ConfigMarker& m, double v) { return m.x < v; });
  int best = -1;
  double bestDist = tolerance;
  for (auto candidate : {it, it == markers.begin() ? markers.end() : std::prev(it)}) {
    if (candidate == markers.end()) continue;
    const double d = std::fabs(candidate->x - x);
    if (d <= bestDist) {
      bestDist = d;
      best = int(candidate - markers.begin());
    }
  }
  return best;
}

QString markerText(const ConfigMarker& marker,
                   const std::vector<storage::ConfigChangeRow>& changes) {
  QStringList lines;
  for (int i : marker.rows) {
    if (i >= 0 && size_t(i) < changes.size()) lines << describeConfigChange(changes[size_t(i)]);
  }
  return lines.join(QLatin1Char('\n'));
}

}  // namespace moewb::gui
