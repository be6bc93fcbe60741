// Layout constants and the series pen shared by ChartView's source files (chart_view.cpp:
// axes, series, hover; chart_view_layout.cpp: title, unit and legend). Private to gui_widgets.
#pragma once

#include <QPen>

#include "chart_view.h"

namespace moewb::gui::chart_metrics {

inline constexpr double kLeftPx = 62;              // left margin: the y tick labels
inline constexpr double kRightPx = 14;             // right margin
inline constexpr double kTopPx = 28;               // plot top with one title row and no legend
inline constexpr double kBottomPx = 38;            // bottom margin: x tick labels and the x title
inline constexpr double kNarrowLeftPx = 6;         // the title row's left over the tick margin
inline constexpr double kTitleRowPx = kTopPx - 8;  // the title row's height, from y = 4
inline constexpr double kHeaderGapPx = 12;         // least space between the title and the unit
inline constexpr double kMinPlotPx = 40;           // plot height a second header row must leave
inline constexpr double kMarkerHitPx = 5;          // hover distance that picks a marker
inline constexpr double kArrowPx = 7;              // height of the arrow of a point above the axis
inline constexpr double kSwatchPx = 14, kSwatchGapPx = 5, kItemGapPx = 14;  // legend items

// The pen of series `s`'s line (dashed if the series is).
inline QPen seriesPen(const ChartSeries& s, double width) {
  QPen pen(s.color, width);
  if (s.dashed) pen.setDashPattern({3, 2});
  return pen;
}

}  // namespace moewb::gui::chart_metrics
