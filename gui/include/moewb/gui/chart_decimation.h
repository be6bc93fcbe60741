// Per-pixel decimation and hit testing for the workbench's line charts, so a chart of 200k steps
// draws O(pixels) segments and answers a hover in O(log n).
//
// decimateSeries cuts the x axis into pixel columns and keeps, per column that holds points, the
// smallest and largest y (and the point holding the largest, for the marker of a point above a
// clipped axis) and the first and last point (for the line into and out of the column).
// Drawing a vertical stroke min..max per column plus the joins between columns gives the same
// picture as drawing every point: no peak is lost. Computed once per resize, zoom or data change
// (O(n)), never per paint. nearestPointIndex finds the point whose x is closest to a given x by
// binary search. Pure functions on x-ascending points; no Qt widgets, safe from any thread.
#pragma once

#include <QPointF>
#include <cstddef>
#include <vector>

namespace moewb::gui {

// The points of one pixel column of a chart.
struct ChartColumn {
  int column = 0;    // pixel column, 0 = the plot's left edge
  double yMin = 0;   // smallest y of its points
  double yMax = 0;   // largest y of its points
  QPointF first;     // its first point (smallest x)
  QPointF last;      // its last point (largest x)
  QPointF highest;   // its point with the largest y (the first of equals)
  size_t count = 0;  // points in the column
};

// The non-empty columns of `points` (x ascending) on an x axis [x0, x1] drawn across `columns`
// pixel columns (>= 1), in column order. Points outside [x0, x1] go to the nearest edge column;
// non-finite y values are skipped. Empty when x1 <= x0 or there are no points. O(n).
std::vector<ChartColumn> decimateSeries(const std::vector<QPointF>& points, double x0, double x1,
                                        int columns);

// Index of the point of `points` (x ascending) whose x is nearest to `x` (the earlier one on a
// tie); -1 when `points` is empty. O(log n).
int nearestPointIndex(const std::vector<QPointF>& points, double x);

}  // namespace moewb::gui
