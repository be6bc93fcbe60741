// ChartView: axes, ticks, one line series and a hover readout.
#include "chart_view.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "theme.h"

namespace moewb::gui {

namespace {
constexpr double kLeftPx = 62, kRightPx = 14, kTopPx = 28, kBottomPx = 38;
constexpr double kMarkerHitPx = 5;  // hover distance that picks a marker
}  // namespace

ChartView::ChartView(QWidget* parent) : QWidget(parent), m_color(theme::series(0)) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_format = [](double v) { return QString::number(v, 'g', 3); };
  setPoints({});
}

void ChartView::setTitle(const QString& title) {
  m_title = title;
  update();
}

void ChartView::setAxisTitles(const QString& x, const QString& y) {
  m_xTitle = x;
  m_yTitle = y;
  update();
}

void ChartView::setColor(const QColor& color) {
  m_color = color;
  update();
}

void ChartView::setValueFormat(std::function<QString(double)> format) {
  m_format = std::move(format);
  update();
}

void ChartView::setPoints(std::vector<QPointF> points) {
  m_points = std::move(points);
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (!m_points.empty()) {
    x0 = x1 = m_points.front().x();
    y0 = y1 = m_points.front().y();
    for (const QPointF& pt : m_points) {
      x0 = std::min(x0, pt.x());
      x1 = std::max(x1, pt.x());
      y0 = std::min(y0, pt.y());
      y1 = std::max(y1, pt.y());
    }
  }
  m_x = niceAxis(x0, x1 > x0 ? x1 : x0 + 1, 6);
  m_y = niceAxis(y0, y1, 4);
  if (m_hover >= int(m_points.size())) m_hover = -1;
  update();
}

void ChartView::setMarkers(std::vector<ChartMarker> markers) {
  m_markers = std::move(markers);
  if (m_hoverMarker >= int(m_markers.size())) m_hoverMarker = -1;
  update();
}

int ChartView::markerAt(double px) const {
  const QRectF plot = plotRect();
  int best = -1;
  double bestDist = kMarkerHitPx;
  for (size_t i = 0; i < m_markers.size(); ++i) {
    if (m_markers[i].x < m_x.min || m_markers[i].x > m_x.max) continue;
    const double d = std::fabs(toScreen({m_markers[i].x, m_y.min}).x() - px);
    if (d <= bestDist && px >= plot.left() - kMarkerHitPx && px <= plot.right() + kMarkerHitPx) {
      bestDist = d;
      best = int(i);
    }
  }
  return best;
}

QSize ChartView::sizeHint() const {
  return {420, 200};
}
QSize ChartView::minimumSizeHint() const {
  return {220, 130};
}

QRectF ChartView::plotRect() const {
  return QRectF(kLeftPx, kTopPx, std::max(10.0, width() - kLeftPx - kRightPx),
                std::max(10.0, height() - kTopPx - kBottomPx));
}

QPointF ChartView::toScreen(const QPointF& v) const {
  const QRectF r = plotRect();
  const double fx = (v.x() - m_x.min) / (m_x.max - m_x.min);
  const double fy = (v.y() - m_y.min) / (m_y.max - m_y.min);
  return {r.left() + fx * r.width(), r.bottom() - fy * r.height()};
}

void ChartView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  p.setRenderHint(QPainter::Antialiasing, false);
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  p.setPen(theme::text());
  p.drawText(QRectF(kLeftPx, 4, width() - kLeftPx - kRightPx, kTopPx - 8),
             Qt::AlignLeft | Qt::AlignVCenter, m_title);
  p.setFont(font());
  const QRectF plot = plotRect();
  paintAxes(p, plot);
  if (m_points.empty()) {
    p.setPen(theme::dimText());
    p.drawText(plot, Qt::AlignCenter, tr("no steps yet"));
    return;
  }
  paintMarkers(p, plot);
  paintSeries(p, plot);
  paintHover(p, plot);
}

void ChartView::paintMarkers(QPainter& p, const QRectF& plot) const {
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  for (size_t i = 0; i < m_markers.size(); ++i) {
    const ChartMarker& m = m_markers[i];
    if (m.x < m_x.min || m.x > m_x.max) continue;
    const double x = std::round(toScreen({m.x, m_y.min}).x()) + 0.5;
    const bool hovered = int(i) == m_hoverMarker;
    QColor line = theme::marker();
    line.setAlpha(hovered ? 255 : 190);
    p.setPen(QPen(line, hovered ? 2 : 1, Qt::DashLine));
    p.drawLine(QPointF(x, plot.top() + 6), QPointF(x, plot.bottom()));
    // A small flag at the top of the plot marks the event even where the series hides the line.
    QPainterPath flag;
    flag.moveTo(x - 5, plot.top());
    flag.lineTo(x + 5, plot.top());
    flag.lineTo(x, plot.top() + 7);
    flag.closeSubpath();
    p.fillPath(flag, theme::marker());
  }
  p.restore();
}

void ChartView::paintAxes(QPainter& p, const QRectF& plot) const {
  const QFontMetrics fm(font());
  for (double v : m_y.values) {
    const double y = toScreen({m_x.min, v}).y();
    p.setPen(theme::gridLine());
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    p.setPen(theme::dimText());
    p.drawText(QRectF(0, y - 9, kLeftPx - 8, 18), Qt::AlignRight | Qt::AlignVCenter, m_format(v));
  }
  // X ticks: thin them out so labels never collide.
  const int labelPx = fm.horizontalAdvance(QString::number(m_x.max)) + 16;
  const double tickPx = plot.width() / std::max<size_t>(1, m_x.values.size() - 1);
  const size_t every = size_t(std::max(1.0, std::ceil(labelPx / std::max(tickPx, 1.0))));
  for (size_t i = 0; i < m_x.values.size(); i += every) {
    const double x = toScreen({m_x.values[i], m_y.min}).x();
    p.setPen(theme::axisLine());
    p.drawLine(QPointF(x, plot.bottom()), QPointF(x, plot.bottom() + 4));
    p.setPen(theme::dimText());
    p.drawText(QRectF(x - 40, plot.bottom() + 5, 80, 16), Qt::AlignHCenter | Qt::AlignTop,
               QString::number(m_x.values[i], 'g', 6));
  }
  p.setPen(theme::axisLine());
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  p.drawLine(plot.bottomLeft(), plot.topLeft());
  p.setPen(theme::dimText());
  p.drawText(QRectF(plot.left(), height() - 17, plot.width(), 16), Qt::AlignCenter, m_xTitle);
  p.drawText(QRectF(kLeftPx, 4, width() - kLeftPx - kRightPx, kTopPx - 8),
             Qt::AlignRight | Qt::AlignVCenter, m_yTitle);
}

void ChartView::paintSeries(QPainter& p, const QRectF& plot) const {
  p.save();
  p.setClipRect(plot.adjusted(-3, -3, 3, 3));
  p.setRenderHint(QPainter::Antialiasing, true);
  QPainterPath path(toScreen(m_points.front()));
  for (size_t i = 1; i < m_points.size(); ++i) path.lineTo(toScreen(m_points[i]));
  p.setPen(QPen(m_color, 2));
  p.drawPath(path);
  if (plot.width() / double(m_points.size()) >= 8) {
    p.setBrush(m_color);
    for (const QPointF& pt : m_points) p.drawEllipse(toScreen(pt), 2.5, 2.5);
  }
  p.restore();
}

void ChartView::paintHover(QPainter& p, const QRectF& plot) const {
  if (m_hover < 0) return;
  const QPointF v = m_points[size_t(m_hover)];
  const QPointF s = toScreen(v);
  p.setPen(QPen(theme::axisLine(), 1, Qt::DashLine));
  p.drawLine(QPointF(s.x(), plot.top()), QPointF(s.x(), plot.bottom()));
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QPen(Qt::white, 1.5));
  p.setBrush(m_color);
  p.drawEllipse(s, 4, 4);
  const QString text = QStringLiteral("%1 %2: %3").arg(m_xTitle).arg(v.x()).arg(m_format(v.y()));
  const QFontMetrics fm(font());
  QRectF box(0, 0, fm.horizontalAdvance(text) + 12, fm.height() + 6);
  box.moveTopLeft(QPointF(std::min(s.x() + 8, plot.right() - box.width()), plot.top() + 4));
  p.setPen(theme::axisLine());
  p.setBrush(theme::window());
  p.drawRect(box);
  p.setPen(theme::text());
  p.drawText(box, Qt::AlignCenter, text);
}

void ChartView::mouseMoveEvent(QMouseEvent* event) {
  int best = -1;
  double bestDist = 1e30;
  const double x = event->position().x();
  for (size_t i = 0; i < m_points.size(); ++i) {
    const double d = std::fabs(toScreen(m_points[i]).x() - x);
    if (d < bestDist) {
      bestDist = d;
      best = int(i);
    }
  }
  if (!plotRect().adjusted(-8, 0, 8, 0).contains(event->position())) best = -1;
  const int marker = markerAt(x);
  if (best != m_hover || marker != m_hoverMarker) {
    m_hover = best;
    m_hoverMarker = marker;
    update();
  }
  QWidget::mouseMoveEvent(event);
}

void ChartView::leaveEvent(QEvent* event) {
  m_hover = -1;
  m_hoverMarker = -1;
  update();
  QWidget::leaveEvent(event);
}

bool ChartView::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int marker = markerAt(help->pos().x());
    if (marker >= 0) {
      QToolTip::showText(help->globalPos(), m_markers[size_t(marker)].text, this);
    } else {
      QToolTip::hideText();
      event->ignore();
    }
    return true;
  }
  return QWidget::event(event);
}

}  // namespace moewb::gui
