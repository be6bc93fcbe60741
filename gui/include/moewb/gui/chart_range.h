// The y range of a step chart that a few far-out points must not squash: robustRange picks the
// values an axis should cover and the ones it may clip (drawn at the top edge with a marker and
// their true value), for the step charts (ChartView) and the Step breakdown alike.
//
// The rule (RobustRangeRule, defaults in brackets): only two kinds of points may be clipped, the
// run's first steps [3] (CUDA warm-up, allocator growth, autotuning: step 0 of an H200 run took
// 2.72 s against ~345 ms for the rest) and at most a small share [1%] of the other points (the
// largest ones). The "rest" are all the other points; R is their 99th and L their 1st percentile
// (nearest rank). A candidate is clipped when it lies above
//     cut = max(f * R, R + f * (R - L), max(rest))      [f = 3]
// i.e. more than f times the rest's high end (for positive quantities such as times) and more
// than f spreads above it (so a loss of 10.8 among losses of 10.7 never counts, whatever its
// sign). Nothing is clipped when fewer than 3 values are finite or the rule gives no cut above R
// (a flat rest at or below 0). Only values far ABOVE the rest are clipped; low ones never are.
// O(n) (selection, not sorting); pure function, any thread.
#pragma once

#include <cstddef>
#include <limits>
#include <span>

namespace moewb::gui {

struct RobustRangeRule {
  size_t warmupPoints = 3;  // the run's first points, clippable whatever their number
  double clipShare = 0.01;  // of the points, at most this share (rounded down) besides those
  double factor = 3;        // how far above the rest: f in the rule above (> 1)
};

struct RobustRange {
  size_t count = 0;    // finite values seen
  size_t clipped = 0;  // values above clipAbove
  double lo = 0;       // smallest finite value (0 when there is none)
  double hi = 0;       // largest value that is not clipped (the axis covers [lo, hi])
  double fullHi = 0;   // largest finite value (the "Full range" axis covers [lo, fullHi])
  double clipAbove = std::numeric_limits<double>::infinity();  // values above are clipped
  bool clips() const { return clipped > 0; }
};

// The range of `values` (in step order; non-finite ones skipped) under `rule`. `firstIndex` is
// the index in the whole series of values[0] (a chart showing steps 40..90 passes 40), so only
// the run's own first steps count as warm-up, not the first ones of a window.
RobustRange robustRange(std::span<const double> values, size_t firstIndex = 0,
                        const RobustRangeRule& rule = {});

// The range covering both `a` and `b` (e.g. two series of one chart): lo, hi and fullHi are the
// extremes of both, counts add up, and clipAbove is the new hi when either clipped (a value of
// one series clipped below the other's hi is no longer clipped, since the axis covers it; the
// count then overstates, which callers only use as "some are clipped").
RobustRange mergeRanges(const RobustRange& a, const RobustRange& b);

}  // namespace moewb::gui
