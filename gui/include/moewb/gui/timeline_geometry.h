// TimelineGeometry: the mapping between trace time and horizontal pixels of a timeline view.
//
// A geometry is a visible window [startNs, endNs) drawn across widthPx pixels. The free functions
// derive new geometries for the user's gestures: fit the data, zoom about an anchor x (the time
// under the anchor stays put), pan by pixels; each result is clamped so the window is at least
// kMinWindowNs long and stays inside the data bounds. Tick helpers pick "nice" ruler spacings
// (1, 2, 5 x 10^k ns) and format ruler labels. Everything here is a pure value computation, O(1)
// except tickTimes (O(ticks)); no Qt, no I/O, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moewb::gui {

// The shortest window a user can zoom to.
inline constexpr int64_t kMinWindowNs = 1'000;

// A half-open time range [startNs, endNs) on the trace's clock.
struct TimeRange {
  int64_t startNs = 0;  // first instant, ns
  int64_t endNs = 0;    // exclusive end, ns

  int64_t durNs() const { return endNs - startNs; }
  bool isEmpty() const { return endNs <= startNs; }
  bool operator==(const TimeRange&) const = default;
};

struct TimelineGeometry {
  int64_t startNs = 0;   // time at x = 0, ns
  int64_t endNs = 1;     // time at x = widthPx, ns (exclusive)
  double widthPx = 1.0;  // drawable width, pixels (> 0)

  int64_t durNs() const { return endNs - startNs; }
  // Nanoseconds covered by one pixel (> 0 for a valid geometry).
  double nsPerPx() const;
  // Pixel x of time tNs (may be outside [0, widthPx] for times outside the window).
  double xOf(int64_t tNs) const;
  // Time at pixel x as a double (no rounding), the exact inverse of xOf.
  double timeAt(double x) const;
  bool operator==(const TimelineGeometry&) const = default;
};

// Geometry showing all of `bounds` across `widthPx` (at least kMinWindowNs; widthPx >= 1).
TimelineGeometry fitGeometry(TimeRange bounds, double widthPx);

// Returns `g` with its window length clamped to [kMinWindowNs, max(bounds length, kMinWindowNs)]
// and shifted to lie inside `bounds` (a window longer than the bounds starts at bounds.startNs).
TimelineGeometry clampGeometry(TimelineGeometry g, TimeRange bounds);

// Zooms by `factor` (> 1 zooms in, < 1 out) keeping the time under `anchorX` at `anchorX`, then
// clamps to `bounds`. The anchor moves only when clamping bites (min window or a data edge).
// A non-positive or non-finite factor returns clampGeometry(g, bounds).
TimelineGeometry zoomGeometry(const TimelineGeometry& g, double anchorX, double factor,
                              TimeRange bounds);

// Shifts the window by `shiftPx` pixels' worth of time (positive = later times come into view),
// then clamps to `bounds`. A mouse drag of dx pixels to the right is panGeometry(g, -dx, bounds).
TimelineGeometry panGeometry(const TimelineGeometry& g, double shiftPx, TimeRange bounds);

// Geometry showing [startNs, endNs) across g.widthPx, clamped to `bounds` (e.g. zoom to a slice).
TimelineGeometry showRange(const TimelineGeometry& g, TimeRange range, TimeRange bounds);

// Smallest 1/2/5 x 10^k ns step whose ticks are at least minPxPerTick apart (>= 1 ns).
int64_t niceTickStepNs(double nsPerPx, double minPxPerTick);

// Ruler tick times: every multiple of stepNs, counted from originNs, inside the window.
std::vector<int64_t> tickTimes(const TimelineGeometry& g, int64_t originNs, int64_t stepNs);

// Label of a ruler tick `offsetNs` after the origin, in the unit that fits `stepNs` with just
// enough decimals to tell neighbouring ticks apart: "0", "250 us", "1.5 ms", "2 s".
std::string formatTickLabel(int64_t offsetNs, int64_t stepNs);

// Labels longer than this many significant digits make the ruler switch to relative labels.
inline constexpr int kMaxRulerDigits = 4;

// The ruler's labels of `ticks` (tickTimes(g, originNs, stepNs)), in the unit that fits the zoom:
// formatTickLabel(t - originNs, stepNs) while every label needs at most kMaxRulerDigits
// significant digits; otherwise (zoomed in far from the origin, where labels would read
// "31797.0001 s") the first tick keeps its full label and the others are relative to it in the
// step's unit ("+100 us", "+200 us"), and `relative` is set. O(ticks).
struct RulerLabels {
  std::vector<std::string> labels;  // one per tick
  bool relative = false;            // labels after the first are offsets from the first tick
};
RulerLabels rulerLabels(const std::vector<int64_t>& ticks, int64_t originNs, int64_t stepNs);

}  // namespace moewb::gui
