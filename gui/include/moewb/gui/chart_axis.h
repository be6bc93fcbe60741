// Axis scaling for the workbench's line charts: a "nice" range and tick values (1, 2, 5 x 10^k
// steps) that cover the data, so tick labels are round numbers. Pure functions, O(ticks).
#pragma once

#include <vector>

namespace moewb::gui {

struct AxisTicks {
  double min = 0;              // axis start (a multiple of step, <= data minimum)
  double max = 1;              // axis end (a multiple of step, >= data maximum)
  double step = 1;             // distance between ticks (> 0)
  std::vector<double> values;  // min, min + step, ..., max
};

// Ticks for data in [lo, hi] with at most about maxTicks intervals (>= 1). A degenerate or
// non-finite range is widened around its value (e.g. [5, 5] -> [4, 6]).
AxisTicks niceAxis(double lo, double hi, int maxTicks);

}  // namespace moewb::gui
