// Nice axis ranges and ticks for line charts.
#include "moewb/gui/chart_axis.h"

#include <algorithm>
#include <cmath>

namespace moewb::gui {

namespace {

double niceStep(double raw) {
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * decade >= raw * (1 - 1e-9)) return m * decade;
  }
  return 10 * decade;
}

}  // namespace

AxisTicks niceAxis(double lo, double hi, int maxTicks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double pad = std::fabs(lo) > 0 ? std::fabs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  AxisTicks axis;
  axis.step = niceStep((hi - lo) / double(std::max(maxTicks, 1)));
  axis.min = std::floor(lo / axis.step + 1e-9) * axis.step;
  axis.max = std::ceil(hi / axis.step - 1e-9) * axis.step;
  const int n = int(std::lround((axis.max - axis.min) / axis.step));
  for (int i = 0; i <= n; ++i) axis.values.push_back(axis.min + axis.step * i);
  return axis;
}

}  // namespace moewb::gui
