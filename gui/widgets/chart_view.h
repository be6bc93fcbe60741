// ChartView: a small line chart painted with QPainter: title, axes with round tick labels
// (niceAxis), axis titles, one or more line series (point markers when sparse; a legend in rows
// under the title when a series is named), vertical event markers (config changes: a dashed line
// with a flag and a tooltip) and a hover readout of the nearest x (every series' value there).
// Used for loss, step time, grad norm, learning rate and the memory account per step. A series
// with more points than the plot has pixel columns is drawn from its per-column min/max
// (chart_decimation.h, computed once per data change or resize), so painting costs O(pixels +
// markers) however many steps the run has; hovering finds the nearest point by binary search
// (O(log n) per series). The y axis leaves out the few far-out points robustRange picks (the
// first steps' warm-up, chart_range.h): each is drawn at the plot's top edge with an arrow and
// its true value, and the hover readout gives it too; the context menu's "Full range" shows every
// point. The title and the y unit share the row above the plot when they fit, else the unit goes
// to a second row (tall charts) or both are elided (short ones), so they never overlap.
// GUI thread only. Qt Charts is deliberately not a dependency.
#pragma once

#include <QPointF>
#include <QWidget>
#include <functional>
#include <optional>
#include <vector>

#include "moewb/gui/chart_axis.h"
#include "moewb/gui/chart_decimation.h"
#include "moewb/gui/chart_range.h"

class QAction;
class QPainter;

namespace moewb::gui {

// A vertical marker at x (in series units), e.g. "the learning rate changed at step 120".
struct ChartMarker {
  double x = 0;
  QString text;  // tooltip, one line per event
};

// One line of a chart; `name` labels it in the legend (drawn when any series is named) and the
// hover readout.
struct ChartSeries {
  QString name;
  QColor color;
  std::vector<QPointF> points;  // x ascending
  bool dashed = false;          // dashed line, for a series that often lies on another one
};

// A point above the y axis (left out by the robust range): drawn at the top edge with an arrow.
struct ChartClip {
  size_t series = 0;  // index of its series
  QPointF point;      // its true x and y (for a dense series: its pixel column's highest point)
};

class ChartView : public QWidget {
  Q_OBJECT

 public:
  explicit ChartView(QWidget* parent = nullptr);

  void setTitle(const QString& title);
  QString title() const { return m_title; }
  void setAxisTitles(const QString& x, const QString& y);
  void setColor(const QColor& color);
  // Formats y values for tick labels and the hover readout (default: 3 significant digits).
  void setValueFormat(std::function<QString(double)> format);
  // Replaces the series with one unnamed series in the chart's colour (x ascending); recomputes
  // the axes.
  void setPoints(std::vector<QPointF> points);
  // The first series' points (empty when there is none).
  const std::vector<QPointF>& points() const;
  // Replaces all series; recomputes the axes over all of them.
  void setSeries(std::vector<ChartSeries> series);
  const std::vector<ChartSeries>& series() const { return m_series; }
  // Keeps 0 on the y axis (for quantities such as bytes). Default off.
  void setYFromZero(bool on);
  // Shows only x in [window.first, window.second] (the y axis fits the points there); nullopt
  // shows every point. Follow mode keeps the charts on the last steps with it.
  void setXWindow(std::optional<std::pair<double, double>> window);
  std::optional<std::pair<double, double>> xWindow() const { return m_xWindow; }
  // Text shown in the plot when no series has a point (default "no steps yet").
  void setEmptyText(const QString& text);
  QString emptyText() const { return m_emptyText; }
  // Replaces the markers (x ascending); markers outside the x axis are not drawn.
  void setMarkers(std::vector<ChartMarker> markers);
  const std::vector<ChartMarker>& markers() const { return m_markers; }
  // Index of the marker drawn within a few pixels of widget x `px`, or -1.
  int markerAt(double px) const;
  // The x (in series units) of the point nearest to widget x `px` over all series, if any
  // series has points; what a hover at `px` reads out. O(series * log points).
  std::optional<double> nearestX(double px) const;
  // The hovered point's x, if the mouse is over the plot.
  std::optional<double> hoverX() const;
  // Per-pixel columns of series `index` as last drawn (empty for a sparse series that is drawn
  // point by point).
  const std::vector<ChartColumn>& decimated(size_t index) const;
  // Whether the y axis covers every point (true) or leaves out the far-out ones robustRange
  // picks (false, the default). The context menu's checkable "Full range" action sets it.
  void setFullRange(bool on);
  bool fullRange() const { return m_fullRange; }
  QAction* fullRangeAction() const { return m_fullRangeAction; }
  // The y axis as laid out now (min, max, ticks).
  const AxisTicks& yAxis() const { return m_y; }
  // The visible points above the y axis, in series order then x order; empty in full range.
  const std::vector<ChartClip>& clippedPoints() const { return m_clipped; }
  // The hover readout as drawn, one entry per line (a value above the axis says so); empty when
  // nothing is hovered.
  QStringList hoverLines() const;
  // The boxes of the title and of the y unit as laid out now (widget coordinates, the width of
  // the text drawn, elided or not); empty for an empty text. They never intersect.
  QRectF titleRect() const { return m_titleRect; }
  QRectF unitRect() const { return m_unitRect; }

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF plotRect() const;
  QPointF toScreen(const QPointF& value) const;
  void paintAxes(QPainter& p, const QRectF& plot) const;
  void paintSeries(QPainter& p, const QRectF& plot) const;
  void paintHover(QPainter& p, const QRectF& plot) const;
  void paintMarkers(QPainter& p, const QRectF& plot) const;
  void paintLegend(QPainter& p) const;
  void paintHeader(QPainter& p) const;
  void paintClipped(QPainter& p, const QRectF& plot) const;
  // The hover readout's lines with their swatch colours (invalid: no swatch).
  std::vector<std::pair<QString, QColor>> hoverRows() const;
  // Lays out the title and unit (m_titleRect, m_unitRect and their texts), the legend and the
  // plot's top for the current size, fonts and texts.
  void updateLayout();
  // Whether the title, the unit or a legend name is drawn elided (the tooltip then has them).
  bool headerElided() const;
  // The title, the unit and the series names, one a line (the header's tooltip).
  QString headerText() const;
  // Index into m_clipped of the arrow within a few pixels of widget point `pos`, or -1.
  int clipAt(const QPointF& pos) const;
  // Boxes of the legend items (swatch and name), flowed in rows from y = `top`; empty unless
  // two or more series are named.
  std::vector<QRectF> legendItems(double top) const;
  void recomputeAxes();
  // Recomputes the per-column min/max of every dense series for the current plot width, and the
  // points above the y axis.
  void updateDecimation();
  bool hasPoints() const;
  // Indices [begin, end) of `s`'s points inside the x window, with one neighbour on each side
  // (so lines run to the plot's edges); every point without a window.
  std::pair<size_t, size_t> visibleRange(const ChartSeries& s) const;

  QString m_title;
  QString m_xTitle;
  QString m_yTitle;
  QColor m_color;
  std::function<QString(double)> m_format;
  QString m_emptyText;
  std::vector<ChartSeries> m_series;
  std::vector<std::vector<ChartColumn>> m_columns;  // per series; empty when drawn point by point
  std::vector<ChartMarker> m_markers;
  AxisTicks m_x;
  AxisTicks m_y;
  bool m_yFromZero = false;
  std::optional<std::pair<double, double>> m_xWindow;
  double m_plotTop;       // top of the plot: below the title and the legend rows
  double m_headerBottom;  // bottom of the title and unit rows (the legend starts there)
  QRectF m_titleRect;     // the title's text box
  QRectF m_unitRect;      // the y unit's text box
  QString m_titleShown;   // the title as drawn (elided when narrow)
  QString m_unitShown;    // the y unit as drawn
  bool m_fullRange = false;
  QAction* m_fullRangeAction = nullptr;
  std::vector<ChartClip> m_clipped;  // visible points above the y axis
  bool m_hasHover = false;  // whether m_hoverX is a hovered point's x
  double m_hoverX = 0;
  int m_hoverMarker = -1;  // index of the hovered marker
};

}  // namespace moewb::gui
