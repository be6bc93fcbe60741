// The hit test the tuner's scatter views share: which plotted point a click landed on.
#pragma once

#include <QPointF>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace moewb::gui {

// The id of the point nearest `pos` within `radiusPx` screen pixels (the first of equals), or
// none. positionOf(i) -> QPointF and idOf(i) -> int64_t are called for i < count.
template <class PositionOf, class IdOf>
std::optional<int64_t> nearestPointId(size_t count, const PositionOf& positionOf,
                                      const IdOf& idOf, const QPointF& pos, double radiusPx) {
  std::optional<int64_t> best;
  double bestDist = radiusPx;
  for (size_t i = 0; i < count; ++i) {
    const QPointF d = positionOf(i) - pos;
    const double dist = std::hypot(d.x(), d.y());
    if (dist <= bestDist) {
      bestDist = dist;
      best = idOf(i);
    }
  }
  return best;
}

}  // namespace moewb::gui
