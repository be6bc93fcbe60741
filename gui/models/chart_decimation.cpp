// Chart decimation (min/max per pixel column) and nearest-point search.
#include "moewb/gui/chart_decimation.h"

#include <algorithm>
#include <cmath>

namespace moewb::gui {

std::vector<ChartColumn> decimateSeries(const std::vector<QPointF>& points, double x0, double x1,
                                        int columns) {
  std::vector<ChartColumn> out;
  if (points.empty() || !(x1 > x0) || columns < 1) return out;
  for (const QPointF& pt : points) {
    if (!std::isfinite(pt.y()) || !std::isfinite(pt.x())) continue;
    const double at = std::floor((pt.x() - x0) * double(columns) / (x1 - x0));
    const int column = std::clamp(int(at), 0, columns - 1);
    if (out.empty() || out.back().column != column) {
      out.push_back({column, pt.y(), pt.y(), pt, pt, pt, 0});
    }
    ChartColumn& c = out.back();
    c.yMin = std::min(c.yMin, pt.y());
    if (pt.y() > c.yMax) {
      c.yMax = pt.y();
      c.highest = pt;
    }
    c.last = pt;
    ++c.count;
  }
  return out;
}

int nearestPointIndex(const std::vector<QPointF>& points, double x) {
  if (points.empty()) return -1;
  auto it = std::lower_bound(points.begin(), points.end(), x,
                             [](const QPointF& pt, double v) { return pt.x() < v; });
  if (it == points.begin()) return 0;
  if (it == points.end()) return int(points.size()) - 1;
  const auto before = std::prev(it);
  return x - before->x() <= it->x() - x ? int(before - points.begin()) : int(it - points.begin());
}

}  // namespace moewb::gui
