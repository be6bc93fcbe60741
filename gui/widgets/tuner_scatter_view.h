// TunerScatterView: the Tuner window's chart of step time (x, ms) against peak memory (y, MiB) of
// a study's measured candidates, painted with QPainter (ChartView draws lines over ascending x,
// not a scatter): one dot per point, the Pareto front as a step line through its points, the pick
// as a larger ring in the accent colour, the selected trial outlined. A click selects the nearest
// point within a few pixels (trialClicked). Axes use niceAxis (chart_axis.h). Painting is
// O(points); GUI thread only.
#pragma once

#include <QPointF>
#include <QRectF>
#include <QWidget>
#include <cstdint>
#include <optional>
#include <vector>

#include "moewb/gui/chart_axis.h"

namespace moewb::gui {

struct TunerScatterPoint {
  int64_t trialId = 0;
  double stepTimeMs = 0;  // x
  double peakMiB = 0;     // y
  bool onPareto = false;
  bool isPick = false;
};

class TunerScatterView : public QWidget {
  Q_OBJECT

 public:
  explicit TunerScatterView(QWidget* parent = nullptr);

  // Replaces the points and recomputes the axes; clears the selection.
  void setPoints(std::vector<TunerScatterPoint> points);
  const std::vector<TunerScatterPoint>& points() const { return m_points; }
  // Outlines trial `trialId` (none when no point has it, or with nullopt).
  void setSelectedTrial(std::optional<int64_t> trialId);
  std::optional<int64_t> selectedTrial() const { return m_selected; }
  // The widget position of point `index` under the current size (for tests and hit testing).
  QPointF pointPosition(size_t index) const;
  // The trial of the point within `radiusPx` of widget position `pos`, nearest first.
  std::optional<int64_t> trialAt(const QPointF& pos, double radiusPx = 8) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  void trialClicked(qint64 trialId);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  QRectF plotRect() const;
  QPointF toScreen(double xMs, double yMiB) const;
  void paintAxes(QPainter& p, const QRectF& plot) const;
  void paintFront(QPainter& p) const;
  void paintPoints(QPainter& p) const;

  std::vector<TunerScatterPoint> m_points;
  std::optional<int64_t> m_selected;
  AxisTicks m_x;
  AxisTicks m_y;
};

}  // namespace moewb::gui
