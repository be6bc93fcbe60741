// ChartView: a small line chart (one series) painted with QPainter: title, axes with round tick
// labels (niceAxis), axis titles, the line with point markers when sparse, vertical event markers
// (config changes: a dashed line with a flag and a tooltip) and a hover readout of the nearest
// point. Used for loss per step and step time per step. Painting is O(points + markers);
// GUI thread only. Qt Charts is deliberately not a dependency.
#pragma once

#include <QPointF>
#include <QWidget>
#include <functional>
#include <vector>

#include "moewb/gui/chart_axis.h"

class QPainter;

namespace moewb::gui {

// A vertical marker at x (in series units), e.g. "the learning rate changed at step 120".
struct ChartMarker {
  double x = 0;
  QString text;  // tooltip, one line per event
};

class ChartView : public QWidget {
  Q_OBJECT

 public:
  explicit ChartView(QWidget* parent = nullptr);

  void setTitle(const QString& title);
  void setAxisTitles(const QString& x, const QString& y);
  void setColor(const QColor& color);
  // Formats y values for tick labels and the hover readout (default: 3 significant digits).
  void setValueFormat(std::function<QString(double)> format);
  // Replaces the series (x ascending); recomputes the axes.
  void setPoints(std::vector<QPointF> points);
  const std::vector<QPointF>& points() const { return m_points; }
  // Replaces the markers (x ascending); markers outside the x axis are not drawn.
  void setMarkers(std::vector<ChartMarker> markers);
  const std::vector<ChartMarker>& markers() const { return m_markers; }
  // Index of the marker drawn within a few pixels of widget x `px`, or -1.
  int markerAt(double px) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF plotRect() const;
  QPointF toScreen(const QPointF& value) const;
  void paintAxes(QPainter& p, const QRectF& plot) const;
  void paintSeries(QPainter& p, const QRectF& plot) const;
  void paintHover(QPainter& p, const QRectF& plot) const;
  void paintMarkers(QPainter& p, const QRectF& plot) const;

  QString m_title;
  QString m_xTitle;
  QString m_yTitle;
  QColor m_color;
  std::function<QString(double)> m_format;
  std::vector<QPointF> m_points;
  std::vector<ChartMarker> m_markers;
  AxisTicks m_x;
  AxisTicks m_y;
  int m_hover = -1;        // index of the hovered point
  int m_hoverMarker = -1;  // index of the hovered marker
};

}  // namespace moewb::gui
