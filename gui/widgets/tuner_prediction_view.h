// TunerPredictionView: the Tuner window's chart of the cost model's predicted step time (x, ms)
// against the measured one (y, ms) of a study's trials that carry a prediction (strategy "model",
// docs/TUNER.md "The cost model"), painted with QPainter: both axes over the same range, the
// diagonal (prediction = measurement) and a +-10% band around it, one dot per trial, the pick as
// a larger ring in the accent colour, the selected trial outlined, and a title with the error
// (median and max of |predicted - measured| / measured). A click selects the nearest point
// within a few pixels (trialClicked). Painting is O(points); GUI thread only.
#pragma once

#include <QPointF>
#include <QRectF>
#include <QWidget>
#include <cstdint>
#include <optional>
#include <vector>

#include "moewb/gui/chart_axis.h"

namespace moewb::gui {

struct TunerPredictionPoint {
  int64_t trialId = 0;
  double predictedMs = 0;  // x
  double measuredMs = 0;   // y
  bool isPick = false;
};

// |predicted - measured| / measured over `points` (those with measuredMs > 0).
struct PredictionError {
  size_t count = 0;
  double median = 0;
  double max = 0;
};
PredictionError predictionError(const std::vector<TunerPredictionPoint>& points);

class TunerPredictionView : public QWidget {
  Q_OBJECT

 public:
  explicit TunerPredictionView(QWidget* parent = nullptr);

  // Replaces the points and recomputes the (shared) axis range; clears the selection.
  void setPoints(std::vector<TunerPredictionPoint> points);
  const std::vector<TunerPredictionPoint>& points() const { return m_points; }
  // Outlines trial `trialId` (none when no point has it, or with nullopt).
  void setSelectedTrial(std::optional<int64_t> trialId);
  std::optional<int64_t> selectedTrial() const { return m_selected; }
  // The title line: "Predicted vs measured: N trials, error median a%, max b%" (elided to the
  // widget's width when painted).
  QString titleText() const;
  // The widget position of point `index` under the current size; of a value pair (x predicted,
  // y measured) for the diagonal's ends.
  QPointF pointPosition(size_t index) const;
  QPointF toScreen(double predictedMs, double measuredMs) const;
  // The trial of the point within `radiusPx` of widget position `pos`, nearest first.
  std::optional<int64_t> trialAt(const QPointF& pos, double radiusPx = 8) const;
  const AxisTicks& axis() const { return m_axis; }

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  void trialClicked(qint64 trialId);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  QRectF plotRect() const;
  void paintAxes(QPainter& p, const QRectF& plot) const;
  void paintDiagonal(QPainter& p) const;
  void paintPoints(QPainter& p) const;

  std::vector<TunerPredictionPoint> m_points;
  std::optional<int64_t> m_selected;
  AxisTicks m_axis;  // the same range on x (predicted) and y (measured)
};

}  // namespace moewb::gui
