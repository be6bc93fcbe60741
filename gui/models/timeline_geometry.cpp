// Time <-> pixel math of the timeline: fit, clamp, zoom about an anchor, pan, ruler ticks.
#include "moewb/gui/timeline_geometry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace moewb::gui {

double TimelineGeometry::nsPerPx() const {
  return double(std::max<int64_t>(durNs(), 1)) / std::max(widthPx, 1e-9);
}

double TimelineGeometry::xOf(int64_t tNs) const {
  return double(tNs - startNs) / nsPerPx();
}

double TimelineGeometry::timeAt(double x) const {
  return double(startNs) + x * nsPerPx();
}

namespace {

// Bounds with at least kMinWindowNs of room, so an empty trace still has a valid window.
TimeRange usableBounds(TimeRange bounds) {
  if (bounds.durNs() < kMinWindowNs) bounds.endNs = bounds.startNs + kMinWindowNs;
  return bounds;
}

}  // namespace

TimelineGeometry fitGeometry(TimeRange bounds, double widthPx) {
  bounds = usableBounds(bounds);
  return {bounds.startNs, bounds.endNs, std::max(widthPx, 1.0)};
}

TimelineGeometry clampGeometry(TimelineGeometry g, TimeRange bounds) {
  bounds = usableBounds(bounds);
  g.widthPx = std::max(g.widthPx, 1.0);
  const int64_t len = std::clamp(g.durNs(), kMinWindowNs, bounds.durNs());
  int64_t start = g.startNs;
  if (start < bounds.startNs) start = bounds.startNs;
  if (start > bounds.endNs - len) start = bounds.endNs - len;
  g.startNs = start;
  g.endNs = start + len;
  return g;
}

TimelineGeometry zoomGeometry(const TimelineGeometry& g, double anchorX, double factor,
                              TimeRange bounds) {
  if (!(factor > 0) || !std::isfinite(factor)) return clampGeometry(g, bounds);
  const TimeRange usable = usableBounds(bounds);
  const double anchorNs = g.timeAt(anchorX);
  const double fraction = anchorX / std::max(g.widthPx, 1.0);
  const double wanted = double(g.durNs()) / factor;
  const int64_t len = std::clamp<int64_t>(std::llround(wanted), kMinWindowNs, usable.durNs());
  TimelineGeometry out = g;
  out.startNs = std::llround(anchorNs - fraction * double(len));
  out.endNs = out.startNs + len;
  return clampGeometry(out, bounds);
}

TimelineGeometry panGeometry(const TimelineGeometry& g, double shiftPx, TimeRange bounds) {
  TimelineGeometry out = g;
  const int64_t shiftNs = std::llround(shiftPx * g.nsPerPx());
  out.startNs += shiftNs;
  out.endNs += shiftNs;
  return clampGeometry(out, bounds);
}

TimelineGeometry showRange(const TimelineGeometry& g, TimeRange range, TimeRange bounds) {
  TimelineGeometry out = g;
  out.startNs = range.startNs;
  out.endNs = std::max(range.endNs, range.startNs + kMinWindowNs);
  if (out.durNs() == kMinWindowNs && range.durNs() < kMinWindowNs) {
    const int64_t mid = range.startNs + range.durNs() / 2;
    out.startNs = mid - kMinWindowNs / 2;
    out.endNs = out.startNs + kMinWindowNs;
  }
  return clampGeometry(out, bounds);
}

int64_t niceTickStepNs(double nsPerPx, double minPxPerTick) {
  const double wanted = std::max(nsPerPx * minPxPerTick, 1.0);
  int64_t decade = 1;
  while (true) {
    for (int64_t m : {1, 2, 5}) {
      if (double(decade * m) >= wanted) return decade * m;
    }
    if (decade > INT64_MAX / 100) return decade * 10;
    decade *= 10;
  }
}

std::vector<int64_t> tickTimes(const TimelineGeometry& g, int64_t originNs, int64_t stepNs) {
  std::vector<int64_t> ticks;
  if (stepNs <= 0 || g.durNs() <= 0 || g.durNs() / stepNs > 100'000) return ticks;
  // First multiple of stepNs (relative to originNs) at or after the window start.
  const int64_t rel = g.startNs - originNs;
  int64_t k = rel / stepNs;
  if (k * stepNs < rel) ++k;
  for (int64_t t = originNs + k * stepNs; t < g.endNs; t += stepNs) ticks.push_back(t);
  return ticks;
}

std::string formatTickLabel(int64_t offsetNs, int64_t stepNs) {
  if (offsetNs == 0) return "0";
  struct Unit {
    int64_t ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {
      {1'000'000'000, "s"}, {1'000'000, "ms"}, {1'000, "us"}, {1, "ns"}};
  const int64_t mag = std::max<int64_t>(std::llabs(offsetNs), stepNs);
  Unit unit = kUnits[3];
  for (const Unit& u : kUnits) {
    if (mag >= u.ns) {
      unit = u;
      break;
    }
  }
  // Decimals: enough that one step is visible in the last digit.
  int decimals = 0;
  for (int64_t scale = unit.ns; scale > 1 && stepNs % scale != 0; scale /= 10) ++decimals;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, double(offsetNs) / double(unit.ns),
                unit.name);
  return buf;
}

namespace {
// Significant digits of the number in a label ("0.0250 ms" -> 3, "31797.0001 s" -> 9).
int significantDigits(const std::string& label) {
  int digits = 0;
  bool leading = true;
  for (char c : label) {
    if (c < '0' || c > '9') continue;
    if (leading && c == '0') continue;
    leading = false;
    ++digits;
  }
  return digits;
}
}  // namespace

RulerLabels rulerLabels(const std::vector<int64_t>& ticks, int64_t originNs, int64_t stepNs) {
  RulerLabels out;
  int widest = 0;
  for (int64_t t : ticks) {
    out.labels.push_back(formatTickLabel(t - originNs, stepNs));
    widest = std::max(widest, significantDigits(out.labels.back()));
  }
  if (widest <= kMaxRulerDigits || ticks.size() < 2) return out;
  out.relative = true;
  for (size_t i = 1; i < ticks.size(); ++i) {
    out.labels[i] = "+" + formatTickLabel(ticks[i] - ticks.front(), stepNs);
  }
  return out;
}

}  // namespace moewb::gui
