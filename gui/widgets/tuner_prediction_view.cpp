// TunerPredictionView (see tuner_prediction_view.h).
#include "tuner_prediction_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <algorithm>
#include <cmath>

#include "nearest_point.h"
#include "theme.h"

namespace moewb::gui {
namespace {

constexpr double kLeftPx = 64;
constexpr double kRightPx = 16;
constexpr double kTopPx = 28;
constexpr double kBottomPx = 40;
constexpr double kDotPx = 4;
constexpr double kPickRingPx = 8;
constexpr double kBand = 0.10;  // the +-10% lines around the diagonal

QString tickLabel(double v) {
  return QString::number(v, 'g', 4);
}

}  // namespace

PredictionError predictionError(const std::vector<TunerPredictionPoint>& points) {
  std::vector<double> errors;
  for (const TunerPredictionPoint& p : points) {
    if (p.measuredMs > 0) errors.push_back(std::abs(p.predictedMs - p.measuredMs) / p.measuredMs);
  }
  PredictionError out;
  out.count = errors.size();
  if (errors.empty()) return out;
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  out.median = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
  out.max = errors.back();
  return out;
}

TunerPredictionView::TunerPredictionView(QWidget* parent) : QWidget(parent) {
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void TunerPredictionView::setPoints(std::vector<TunerPredictionPoint> points) {
  m_points = std::move(points);
  m_selected.reset();
  // Both axes over the points' range with a margin (down to 0 only when the points reach near
  // it): trials of one study often lie within a few percent of each other.
  double lo = 0, hi = 0;
  for (const TunerPredictionPoint& p : m_points) {
    const double a = std::min(p.predictedMs, p.measuredMs);
    const double b = std::max(p.predictedMs, p.measuredMs);
    lo = hi == 0 ? a : std::min(lo, a);
    hi = std::max(hi, b);
  }
  const double pad = std::max(0.05 * hi, 0.15 * (hi - lo));
  m_axis = hi > 0 ? niceAxis(std::max(0.0, lo - pad), hi + pad, 5) : niceAxis(0, 1, 5);
  update();
}

void TunerPredictionView::setSelectedTrial(std::optional<int64_t> trialId) {
  m_selected = trialId;
  update();
}

QString TunerPredictionView::titleText() const {
  const PredictionError e = predictionError(m_points);
  if (e.count == 0) return tr("Predicted vs measured: no trial with a prediction");
  return tr("Predicted vs measured: %1 trials, error median %2%, max %3%")
      .arg(e.count)
      .arg(100 * e.median, 0, 'f', 1)
      .arg(100 * e.max, 0, 'f', 1);
}

QRectF TunerPredictionView::plotRect() const {
  return QRectF(kLeftPx, kTopPx, std::max(1.0, width() - kLeftPx - kRightPx),
                std::max(1.0, height() - kTopPx - kBottomPx));
}

QPointF TunerPredictionView::toScreen(double predictedMs, double measuredMs) const {
  const QRectF plot = plotRect();
  const double span = std::max(1e-12, m_axis.max - m_axis.min);
  const double fx = (predictedMs - m_axis.min) / span;
  const double fy = (measuredMs - m_axis.min) / span;
  return {plot.left() + fx * plot.width(), plot.bottom() - fy * plot.height()};
}

QPointF TunerPredictionView::pointPosition(size_t index) const {
  return index < m_points.size() ? toScreen(m_points[index].predictedMs, m_points[index].measuredMs)
                                 : QPointF();
}

std::optional<int64_t> TunerPredictionView::trialAt(const QPointF& pos, double radiusPx) const {
  return nearestPointId(
      m_points.size(), [&](size_t i) { return pointPosition(i); },
      [&](size_t i) { return m_points[i].trialId; }, pos, radiusPx);
}

QSize TunerPredictionView::sizeHint() const {
  return {360, 300};
}

QSize TunerPredictionView::minimumSizeHint() const {
  return {200, 160};
}

void TunerPredictionView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
  if (auto trial = trialAt(event->position())) {
    setSelectedTrial(*trial);
    emit trialClicked(*trial);
  }
}

void TunerPredictionView::paintAxes(QPainter& p, const QRectF& plot) const {
  p.setPen(theme::gridLine());
  for (double v : m_axis.values) {
    const QPointF at = toScreen(v, v);
    p.drawLine(QPointF(at.x(), plot.top()), QPointF(at.x(), plot.bottom()));
    p.drawLine(QPointF(plot.left(), at.y()), QPointF(plot.right(), at.y()));
  }
  p.setPen(theme::axisLine());
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  p.drawLine(plot.bottomLeft(), plot.topLeft());
  p.setPen(theme::dimText());
  for (double v : m_axis.values) {
    const QPointF at = toScreen(v, v);
    p.drawText(QRectF(at.x() - 40, plot.bottom() + 4, 80, 16), Qt::AlignHCenter, tickLabel(v));
    p.drawText(QRectF(0, at.y() - 8, kLeftPx - 6, 16), Qt::AlignRight | Qt::AlignVCenter,
               tickLabel(v));
  }
  p.drawText(QRectF(plot.left(), plot.bottom() + 20, plot.width(), 18), Qt::AlignHCenter,
             tr("predicted step time (ms)"));
  p.save();
  p.translate(12, plot.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-plot.height() / 2, -8, plot.height(), 16), Qt::AlignHCenter,
             tr("measured step time (ms)"));
  p.restore();
}

void TunerPredictionView::paintDiagonal(QPainter& p) const {
  const double lo = m_axis.min, hi = m_axis.max;
  p.save();
  p.setClipRect(plotRect());  // the band's lines start and end outside an axis that is not from 0
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(theme::series(1), 1.5));
  p.drawLine(toScreen(lo, lo), toScreen(hi, hi));
  // measured = predicted * (1 +- band), clipped to the plot
  p.setPen(QPen(theme::dimText(), 1, Qt::DashLine));
  p.drawLine(toScreen(lo, lo * (1 + kBand)), toScreen(hi / (1 + kBand), hi));
  p.drawLine(toScreen(lo, lo * (1 - kBand)), toScreen(hi, hi * (1 - kBand)));
  p.restore();
}

void TunerPredictionView::paintPoints(QPainter& p) const {
  for (const TunerPredictionPoint& pt : m_points) {
    const QPointF c = toScreen(pt.predictedMs, pt.measuredMs);
    p.setPen(Qt::NoPen);
    p.setBrush(theme::series(0));
    p.drawEllipse(c, kDotPx, kDotPx);
    if (pt.isPick) {
      p.setPen(QPen(theme::accent(), 2.5));
      p.setBrush(Qt::NoBrush);
      p.drawEllipse(c, kPickRingPx, kPickRingPx);
    }
    if (m_selected && *m_selected == pt.trialId) {
      p.setPen(QPen(theme::text(), 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawEllipse(c, kDotPx + 3, kDotPx + 3);
    }
  }
}

void TunerPredictionView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), theme::base());
  const QRectF plot = plotRect();
  p.setPen(theme::text());
  p.drawText(QRectF(0, 4, width(), 20), Qt::AlignHCenter,
             p.fontMetrics().elidedText(titleText(), Qt::ElideRight, width() - 8));
  if (m_points.empty()) {
    p.setPen(theme::dimText());
    p.drawText(plot, Qt::AlignCenter, tr("no trial with a prediction (strategy model)"));
    return;
  }
  paintAxes(p, plot);
  paintDiagonal(p);
  paintPoints(p);
}

}  // namespace moewb::gui
