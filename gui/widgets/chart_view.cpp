// ChartView: axes, ticks, line series with a legend and a hover readout.
#include "chart_view.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <algorithm>
#include <limits>
#include <cmath>

#include "theme.h"

namespace moewb::gui {

namespace {
constexpr double kLeftPx = 62, kRightPx = 14, kTopPx = 28, kBottomPx = 38;
constexpr double kMarkerHitPx = 5;  // hover distance that picks a marker
}  // namespace

ChartView::ChartView(QWidget* parent)
    : QWidget(parent), m_color(theme::series(0)), m_plotTop(kTopPx) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_format = [](double v) { return QString::number(v, 'g', 3); };
  m_emptyText = tr("no steps yet");
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
  if (m_series.size() == 1 && m_series.front().name.isEmpty()) m_series.front().color = color;
  update();
}

void ChartView::setValueFormat(std::function<QString(double)> format) {
  m_format = std::move(format);
  update();
}

void ChartView::setPoints(std::vector<QPointF> points) {
  std::vector<ChartSeries> one;
  one.push_back({QString(), m_color, std::move(points)});
  setSeries(std::move(one));
}

const std::vector<QPointF>& ChartView::points() const {
  static const std::vector<QPointF> kNone;
  return m_series.empty() ? kNone : m_series.front().points;
}

void ChartView::setSeries(std::vector<ChartSeries> series) {
  m_series = std::move(series);
  recomputeAxes();
  const std::vector<QRectF> legend = legendItems();
  m_plotTop = legend.empty() ? kTopPx : legend.back().bottom() + 8;
  if (!hasPoints()) m_hasHover = false;
  updateDecimation();
  update();
}

void ChartView::setYFromZero(bool on) {
  m_yFromZero = on;
  recomputeAxes();
  updateDecimation();
  update();
}

void ChartView::setXWindow(std::optional<std::pair<double, double>> window) {
  if (window == m_xWindow) return;
  m_xWindow = window;
  recomputeAxes();
  updateDecimation();
  update();
}

std::pair<size_t, size_t> ChartView::visibleRange(const ChartSeries& s) const {
  if (!m_xWindow) return {0, s.points.size()};
  auto lo = std::lower_bound(s.points.begin(), s.points.end(), m_xWindow->first,
                             [](const QPointF& pt, double v) { return pt.x() < v; });
  auto hi = std::upper_bound(s.points.begin(), s.points.end(), m_xWindow->second,
                             [](double v, const QPointF& pt) { return v < pt.x(); });
  const size_t begin = size_t(lo - s.points.begin()), end = size_t(hi - s.points.begin());
  return {begin > 0 ? begin - 1 : 0, std::min(end + 1, s.points.size())};
}

void ChartView::updateDecimation() {
  const int columns = std::max(1, int(std::ceil(plotRect().width())));
  m_columns.assign(m_series.size(), {});
  for (size_t i = 0; i < m_series.size(); ++i) {
    // Up to two points per column are drawn as they are (markers and all).
    const auto [begin, end] = visibleRange(m_series[i]);
    if (end - begin <= size_t(2 * columns)) continue;
    if (!m_xWindow) {
      m_columns[i] = decimateSeries(m_series[i].points, m_x.min, m_x.max, columns);
      continue;
    }
    const auto& all = m_series[i].points;
    const std::vector<QPointF> part(all.begin() + std::ptrdiff_t(begin),
                                    all.begin() + std::ptrdiff_t(end));
    m_columns[i] = decimateSeries(part, m_x.min, m_x.max, columns);
  }
}

const std::vector<ChartColumn>& ChartView::decimated(size_t index) const {
  static const std::vector<ChartColumn> kNone;
  return index < m_columns.size() ? m_columns[index] : kNone;
}

void ChartView::setEmptyText(const QString& text) {
  m_emptyText = text;
  update();
}

bool ChartView::hasPoints() const {
  for (const ChartSeries& s : m_series) {
    if (!s.points.empty()) return true;
  }
  return false;
}

void ChartView::recomputeAxes() {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool first = true;
  for (const ChartSeries& s : m_series) {
    for (const QPointF& pt : s.points) {
      if (m_xWindow && (pt.x() < m_xWindow->first || pt.x() > m_xWindow->second)) continue;
      if (first) {
        x0 = x1 = pt.x();
        y0 = y1 = pt.y();
        first = false;
      }
      x0 = std::min(x0, pt.x());
      x1 = std::max(x1, pt.x());
      y0 = std::min(y0, pt.y());
      y1 = std::max(y1, pt.y());
    }
  }
  if (m_yFromZero) {
    y0 = std::min(y0, 0.0);
    y1 = std::max(y1, 0.0);
  }
  if (m_xWindow) {
    x0 = m_xWindow->first;
    x1 = m_xWindow->second;
  }
  m_x = niceAxis(x0, x1 > x0 ? x1 : x0 + 1, 6);
  // Fewer y ticks on a short chart, so their labels never overlap.
  m_y = niceAxis(y0, y1, std::clamp(int(plotRect().height() / 24), 1, 4));
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
  // Five charts share a column: small enough that the window fits 1280x720.
  return {180, 72};
}

QRectF ChartView::plotRect() const {
  return QRectF(kLeftPx, m_plotTop, std::max(10.0, width() - kLeftPx - kRightPx),
                std::max(10.0, height() - m_plotTop - kBottomPx));
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
  paintLegend(p);
  const QRectF plot = plotRect();
  paintAxes(p, plot);
  if (!hasPoints()) {
    p.setPen(theme::dimText());
    p.drawText(plot, Qt::AlignCenter, m_emptyText);
    return;
  }
  paintMarkers(p, plot);
  paintSeries(p, plot);
  paintHover(p, plot);
}

namespace {
constexpr double kSwatchPx = 14, kSwatchGapPx = 5, kItemGapPx = 14;

QPen seriesPen(const ChartSeries& s, double width) {
  QPen pen(s.color, width);
  if (s.dashed) pen.setDashPattern({3, 2});
  return pen;
}
}  // namespace

std::vector<QRectF> ChartView::legendItems() const {
  std::vector<QRectF> items;
  int named = 0;
  for (const ChartSeries& s : m_series) named += s.name.isEmpty() ? 0 : 1;
  if (named < 2) return items;
  const QFontMetrics fm(font());
  const double right = std::max(kLeftPx + 40, width() - kRightPx);
  double x = kLeftPx, y = kTopPx - 4;
  for (const ChartSeries& s : m_series) {
    const double w = kSwatchPx + kSwatchGapPx + fm.horizontalAdvance(s.name) + 2;
    if (x > kLeftPx && x + w > right) {
      x = kLeftPx;
      y += fm.height();
    }
    items.emplace_back(x, y, w, fm.height());
    x += w + kItemGapPx;
  }
  return items;
}

void ChartView::paintLegend(QPainter& p) const {
  const std::vector<QRectF> items = legendItems();
  p.save();
  for (size_t i = 0; i < items.size(); ++i) {
    const ChartSeries& s = m_series[i];
    const QRectF& box = items[i];
    const double y = std::round(box.center().y()) + 0.5;
    p.setPen(seriesPen(s, 3));
    p.drawLine(QPointF(box.left(), y), QPointF(box.left() + kSwatchPx, y));
    p.setPen(theme::dimText());
    p.drawText(box.adjusted(kSwatchPx + kSwatchGapPx, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               s.name);
  }
  p.restore();
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
  // A label is drawn only where it clears the last one drawn (a short chart keeps its grid
  // lines but not every label: overlapping labels read as one garbled number).
  double lastLabelY = std::numeric_limits<double>::infinity();
  for (double v : m_y.values) {
    const double y = toScreen({m_x.min, v}).y();
    p.setPen(theme::gridLine());
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    if (lastLabelY - y < fm.height()) continue;
    lastLabelY = y;
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
  for (size_t index = 0; index < m_series.size(); ++index) {
    const ChartSeries& s = m_series[index];
    if (s.points.empty()) continue;
    const std::vector<ChartColumn>& columns = decimated(index);
    if (!columns.empty()) {
      // Per column: in at its first point, the min..max stroke, out from its last point.
      QPainterPath path(toScreen(columns.front().first));
      for (const ChartColumn& c : columns) {
        const double x = plot.left() + double(c.column) + 0.5;
        path.lineTo(toScreen(c.first));
        path.lineTo(QPointF(x, toScreen({0, c.yMin}).y()));
        path.lineTo(QPointF(x, toScreen({0, c.yMax}).y()));
        path.lineTo(toScreen(c.last));
      }
      p.setPen(seriesPen(s, 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawPath(path);
      continue;
    }
    const auto [begin, end] = visibleRange(s);
    if (begin >= end) continue;
    QPainterPath path(toScreen(s.points[begin]));
    for (size_t i = begin + 1; i < end; ++i) path.lineTo(toScreen(s.points[i]));
    p.setPen(seriesPen(s, 2));
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
    if (plot.width() / double(end - begin) >= 8) {
      p.setBrush(s.color);
      for (size_t i = begin; i < end; ++i) p.drawEllipse(toScreen(s.points[i]), 2.5, 2.5);
    }
  }
  p.restore();
}

namespace {
// The point of `points` (x ascending) at exactly x, or nullptr.
const QPointF* pointAt(const std::vector<QPointF>& points, double x) {
  auto it = std::lower_bound(points.begin(), points.end(), x,
                             [](const QPointF& pt, double v) { return pt.x() < v; });
  return it != points.end() && it->x() == x ? &*it : nullptr;
}
}  // namespace

void ChartView::paintHover(QPainter& p, const QRectF& plot) const {
  if (!m_hasHover) return;
  const double sx = toScreen({m_hoverX, m_y.min}).x();
  p.setPen(QPen(theme::axisLine(), 1, Qt::DashLine));
  p.drawLine(QPointF(sx, plot.top()), QPointF(sx, plot.bottom()));
  p.setRenderHint(QPainter::Antialiasing, true);
  // One line per series that has a point here ("name: value"), under an "x: <x>" header when
  // there are several; a single unnamed series reads "<x title> <x>: <value>" as one line.
  QStringList lines;
  std::vector<QColor> colors;
  const bool several = m_series.size() > 1;
  if (several) {
    lines << QStringLiteral("%1 %2").arg(m_xTitle).arg(m_hoverX);
    colors.push_back(QColor());
  }
  for (const ChartSeries& s : m_series) {
    const QPointF* pt = pointAt(s.points, m_hoverX);
    if (!pt) continue;
    p.setPen(QPen(Qt::white, 1.5));
    p.setBrush(s.color);
    p.drawEllipse(toScreen(*pt), 4, 4);
    if (several) {
      lines << QStringLiteral("%1: %2").arg(s.name, m_format(pt->y()));
    } else {
      lines << QStringLiteral("%1 %2: %3").arg(m_xTitle).arg(pt->x()).arg(m_format(pt->y()));
    }
    colors.push_back(s.color);
  }
  const QFontMetrics fm(font());
  int textPx = 0;
  for (const QString& line : lines) textPx = std::max(textPx, fm.horizontalAdvance(line));
  const double swatchPx = several ? 14 : 0;
  QRectF box(0, 0, textPx + swatchPx + 12, fm.height() * double(lines.size()) + 6);
  box.moveTopLeft(QPointF(std::min(sx + 8, plot.right() - box.width()), plot.top() + 4));
  p.setPen(theme::axisLine());
  p.setBrush(theme::window());
  p.drawRect(box);
  for (qsizetype i = 0; i < lines.size(); ++i) {
    const QRectF row(box.left() + 6, box.top() + 3 + double(i) * fm.height(), box.width() - 12,
                     fm.height());
    if (colors[size_t(i)].isValid()) {
      p.fillRect(QRectF(row.left(), row.center().y() - 1.5, 10, 3), colors[size_t(i)]);
    }
    p.setPen(theme::text());
    p.drawText(row.adjusted(several ? swatchPx : 0, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               lines[i]);
  }
}

std::optional<double> ChartView::nearestX(double px) const {
  const QRectF r = plotRect();
  const double value = m_x.min + (px - r.left()) / r.width() * (m_x.max - m_x.min);
  std::optional<double> best;
  double bestDist = 0;
  for (const ChartSeries& s : m_series) {
    const int i = nearestPointIndex(s.points, value);
    if (i < 0) continue;
    const double x = s.points[size_t(i)].x();
    const double d = std::fabs(x - value);
    if (!best || d < bestDist) {
      best = x;
      bestDist = d;
    }
  }
  return best;
}

std::optional<double> ChartView::hoverX() const {
  return m_hasHover ? std::optional<double>(m_hoverX) : std::nullopt;
}

void ChartView::mouseMoveEvent(QMouseEvent* event) {
  const double x = event->position().x();
  const std::optional<double> nearest = nearestX(x);
  bool found = nearest.has_value();
  const double bestX = nearest.value_or(0);
  if (!plotRect().adjusted(-8, 0, 8, 0).contains(event->position())) found = false;
  const int marker = markerAt(x);
  if (found != m_hasHover || (found && bestX != m_hoverX) || marker != m_hoverMarker) {
    m_hasHover = found;
    m_hoverX = bestX;
    m_hoverMarker = marker;
    update();
  }
  QWidget::mouseMoveEvent(event);
}

void ChartView::resizeEvent(QResizeEvent* event) {
  const std::vector<QRectF> legend = legendItems();
  m_plotTop = legend.empty() ? kTopPx : legend.back().bottom() + 8;
  recomputeAxes();
  updateDecimation();
  QWidget::resizeEvent(event);
}

void ChartView::leaveEvent(QEvent* event) {
  m_hasHover = false;
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
