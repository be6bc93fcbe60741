// ClockCalibration: maps CUPTI timestamps (ns, CUPTI's own clock) into the host steady clock of
// the engine's events. Each calibration point pairs one cuptiGetTimestamp() with the steady
// clock read around it; a timestamp maps with the offset interpolated linearly between the points
// around it (the last point's offset after it, the first's before it), which follows slow drift
// between the two clocks. Cost: O(log points) per conversion. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace moewb::profiler::gpu {

class ClockCalibration {
 public:
  // Adds a point; points must come with rising cuptiNs.
  void add(int64_t cuptiNs, int64_t steadyNs);
  // cuptiNs in the steady domain (cuptiNs itself while there is no point).
  int64_t toSteady(int64_t cuptiNs) const;
  bool empty() const { return m_points.empty(); }
  int64_t firstOffsetNs() const { return m_points.empty() ? 0 : m_points.front().offsetNs; }
  int64_t lastOffsetNs() const { return m_points.empty() ? 0 : m_points.back().offsetNs; }

 private:
  struct Point {
    int64_t cuptiNs;
    int64_t offsetNs;  // steady - cupti
  };
  std::vector<Point> m_points;
};

}  // namespace moewb::profiler::gpu
