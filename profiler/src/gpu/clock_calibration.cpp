// ClockCalibration (see clock_calibration.h).
#include "gpu/clock_calibration.h"

#include <algorithm>

namespace moewb::profiler::gpu {

void ClockCalibration::add(int64_t cuptiNs, int64_t steadyNs) {
  if (!m_points.empty() && cuptiNs <= m_points.back().cuptiNs) return;
  m_points.push_back({cuptiNs, steadyNs - cuptiNs});
}

int64_t ClockCalibration::toSteady(int64_t cuptiNs) const {
  if (m_points.empty()) return cuptiNs;
  auto after = std::upper_bound(m_points.begin(), m_points.end(), cuptiNs,
                                [](int64_t ts, const Point& p) { return ts < p.cuptiNs; });
  if (after == m_points.begin()) return cuptiNs + m_points.front().offsetNs;
  if (after == m_points.end()) return cuptiNs + m_points.back().offsetNs;
  const Point& a = *(after - 1);
  const Point& b = *after;
  const double t = double(cuptiNs - a.cuptiNs) / double(b.cuptiNs - a.cuptiNs);
  return cuptiNs + a.offsetNs + int64_t(t * double(b.offsetNs - a.offsetNs));
}

}  // namespace moewb::profiler::gpu
