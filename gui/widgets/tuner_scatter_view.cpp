// TunerScatterView (see tuner_scatter_view.h).
#include "tuner_scatter_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <cmath>
#include <limits>

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

QString tickLabel(double v) {
  return QString::number(v, 'g', 6);  // 80000, not 8e+04
}

}  // namespace

TunerScatterView::TunerScatterView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(false);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void TunerScatterView::setPoints(std::vector<TunerScatterPoint> points) {
  m_points = std::move(points);
  m_selected.reset();
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y1 = -x0;
  for (const TunerScatterPoint& p : m_points) {
    x0 = std::min(x0, p.stepTimeMs);
    x1 = std::max(x1, p.stepTimeMs);
    y1 = std::max(y1, p.peakMiB);
  }
  if (m_points.empty()) x0 = 0, x1 = 1, y1 = 1;
  // A margin of 5% so dots on the extremes are not cut by the axes; memory from zero.
  const double pad = (x1 - x0) * 0.05;
  m_x = niceAxis(std::max(0.0, x0 - pad), x1 + pad, 5);
  m_y = niceAxis(0, y1 * 1.05, 4);
  update();
}

void TunerScatterView::setSelectedTrial(std::optional<int64_t> trialId) {
  m_selected = trialId;
  update();
}

QRectF TunerScatterView::plotRect() const {
  return QRectF(kLeftPx, kTopPx, std::max(1.0, width() - kLeftPx - kRightPx),
                std::max(1.0, height() - kTopPx - kBottomPx));
}

QPointF TunerScatterView::toScreen(double xMs, double yMiB) const {
  const QRectF plot = plotRect();
  const double fx = (xMs - m_x.min) / std::max(1e-12, m_x.max - m_x.min);
  const double fy = (yMiB - m_y.min) / std::max(1e-12, m_y.max - m_y.min);
  return {plot.left() + fx * plot.width(), plot.bottom() - fy * plot.height()};
}

QPointF TunerScatterView::pointPosition(size_t index) const {
  return index < m_points.size() ? toScreen(m_points[index].stepTimeMs, m_points[index].peakMiB)
                                 : QPointF();
}

std::optional<int64_t> TunerScatterView::trialAt(const QPointF& pos, double radiusPx) const {
  return nearestPointId(
      m_points.size(), [&](size_t i) { return pointPosition(i); },
      [&](size_t i) { return m_points[i].trialId; }, pos, radiusPx);
}

QSize TunerScatterView::sizeHint() const {
  return {480, 300};
}

QSize TunerScatterView::minimumSizeHint() const {
  return {240, 160};
}

void TunerScatterView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
  if (auto trial = trialAt(event->position())) {
    setSelectedTrial(*trial);
    emit trialClicked(*trial);
  }
}

void TunerScatterView::paintAxes(QPainter& p, const QRectF& plot) const {
  p.setPen(theme::gridLine());
  for (double v : m_x.values) {
    const double x = toScreen(v, m_y.min).x();
    p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
  }
  for (double v : m_y.values) {
    const double y = toScreen(m_x.min, v).y();
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
  }
  p.setPen(theme::axisLine());
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  p.drawLine(plot.bottomLeft(), plot.topLeft());
  p.setPen(theme::dimText());
  for (double v : m_x.values) {
    const double x = toScreen(v, m_y.min).x();
    p.drawText(QRectF(x - 40, plot.bottom() + 4, 80, 16), Qt::AlignHCenter, tickLabel(v));
  }
  for (double v : m_y.values) {
    const double y = toScreen(m_x.min, v).y();
    p.drawText(QRectF(0, y - 8, kLeftPx - 6, 16), Qt::AlignRight | Qt::AlignVCenter, tickLabel(v));
  }
  p.drawText(QRectF(plot.left(), plot.bottom() + 20, plot.width(), 18), Qt::AlignHCenter,
             tr("step time (ms, median)"));
  p.save();
  p.translate(12, plot.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-plot.height() / 2, -8, plot.height(), 16), Qt::AlignHCenter,
             tr("peak memory (MiB)"));
  p.restore();
}

void TunerScatterView::paintFront(QPainter& p) const {
  std::vector<const TunerScatterPoint*> front;
  for (const TunerScatterPoint& pt : m_points) {
    if (pt.onPareto) front.push_back(&pt);
  }
  std::sort(front.begin(), front.end(), [](const auto* a, const auto* b) {
    return a->stepTimeMs != b->stepTimeMs ? a->stepTimeMs < b->stepTimeMs : a->peakMiB < b->peakMiB;
  });
  if (front.empty()) return;
  // The front as a staircase: from each point right to the next point's step time, then down.
  QPainterPath path(toScreen(front.front()->stepTimeMs, front.front()->peakMiB));
  for (size_t i = 1; i < front.size(); ++i) {
    path.lineTo(toScreen(front[i]->stepTimeMs, front[i - 1]->peakMiB));
    path.lineTo(toScreen(front[i]->stepTimeMs, front[i]->peakMiB));
  }
  p.setPen(QPen(theme::series(1), 1.5, Qt::DashLine));
  p.setBrush(Qt::NoBrush);
  p.drawPath(path);
}

void TunerScatterView::paintPoints(QPainter& p) const {
  for (const TunerScatterPoint& pt : m_points) {
    const QPointF c = toScreen(pt.stepTimeMs, pt.peakMiB);
    p.setPen(Qt::NoPen);
    p.setBrush(pt.onPareto ? theme::series(1) : theme::dimText());
    p.drawEllipse(c, kDotPx, kDotPx);
    if (pt.isPick) {
      p.setPen(QPen(theme::accent(), 2.5));
      p.setBrush(Qt::NoBrush);
      p.drawEllipse(c, kPickRingPx, kPickRingPx);
      p.setPen(theme::text());
      p.drawText(c + QPointF(kPickRingPx + 3, -kPickRingPx), tr("pick (trial %1)").arg(pt.trialId));
    }
    if (m_selected && *m_selected == pt.trialId && !pt.isPick) {
      p.setPen(QPen(theme::text(), 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawEllipse(c, kDotPx + 3, kDotPx + 3);
    }
  }
}

void TunerScatterView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), theme::base());
  const QRectF plot = plotRect();
  p.setPen(theme::text());
  p.drawText(QRectF(0, 4, width(), 20), Qt::AlignHCenter,
             tr("Step time vs peak memory (dashed: Pareto front)"));
  if (m_points.empty()) {
    p.setPen(theme::dimText());
    p.drawText(plot, Qt::AlignCenter, tr("no measured trials"));
    return;
  }
  paintAxes(p, plot);
  paintFront(p);
  paintPoints(p);
}

}  // namespace moewb::gui
