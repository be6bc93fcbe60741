// ChartView: axes, ticks, line series, points above the axis and the hover readout (the title,
// unit and legend layout is in chart_view_layout.cpp).
#include "chart_view.h"

#include <QAction>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <algorithm>
#include <limits>
#include <cmath>

#include "chart_view_metrics.h"
#include "theme.h"

namespace moewb::gui {

using namespace chart_metrics;

ChartView::ChartView(QWidget* parent)
    : QWidget(parent), m_color(theme::series(0)), m_plotTop(kTopPx), m_headerBottom(kTopPx - 4) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_format = [](double v) { return QString::number(v, 'g', 3); };
  m_emptyText = tr("no steps yet");
  m_fullRangeAction = new QAction(tr("Full range"), this);
  m_fullRangeAction->setCheckable(true);
  m_fullRangeAction->setToolTip(tr("Let the y axis cover every point, also the far-out ones "
                                   "(such as a warm-up first step) drawn as arrows at the top"));
  connect(m_fullRangeAction, &QAction::toggled, this, &ChartView::setFullRange);
  addAction(m_fullRangeAction);
  setContextMenuPolicy(Qt::ActionsContextMenu);
  setPoints({});
}

void ChartView::setTitle(const QString& title) {
  m_title = title;
  updateLayout();
  recomputeAxes();
  updateDecimation();
  update();
}

void ChartView::setAxisTitles(const QString& x, const QString& y) {
  m_xTitle = x;
  m_yTitle = y;
  updateLayout();
  recomputeAxes();
  updateDecimation();
  update();
}

void ChartView::setFullRange(bool on) {
  if (on == m_fullRange) return;
  m_fullRange = on;
  if (m_fullRangeAction->isChecked() != on) m_fullRangeAction->setChecked(on);
  recomputeAxes();
  updateDecimation();
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
  updateLayout();
  recomputeAxes();
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
  m_clipped.clear();
  auto clipped = [this](size_t series, const QPointF& pt) {
    if (pt.y() > m_y.max && std::isfinite(pt.y()) && pt.x() >= m_x.min && pt.x() <= m_x.max) {
      m_clipped.push_back({series, pt});
    }
  };
  for (size_t i = 0; i < m_series.size(); ++i) {
    // Up to two points per column are drawn as they are (markers and all).
    const auto [begin, end] = visibleRange(m_series[i]);
    const auto& all = m_series[i].points;
    if (end - begin <= size_t(2 * columns)) {
      for (size_t k = begin; k < end; ++k) clipped(i, all[k]);
      continue;
    }
    if (!m_xWindow) {
      m_columns[i] = decimateSeries(all, m_x.min, m_x.max, columns);
    } else {
      const std::vector<QPointF> part(all.begin() + std::ptrdiff_t(begin),
                                      all.begin() + std::ptrdiff_t(end));
      m_columns[i] = decimateSeries(part, m_x.min, m_x.max, columns);
    }
    for (const ChartColumn& c : m_columns[i]) clipped(i, c.highest);
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
  RobustRange range;
  std::vector<double> ys;
  for (const ChartSeries& s : m_series) {
    // The window's points are consecutive; the first one's index tells robustRange whether
    // they include the run's first steps.
    size_t firstIndex = 0;
    ys.clear();
    for (size_t i = 0; i < s.points.size(); ++i) {
      const QPointF& pt = s.points[i];
      if (m_xWindow && (pt.x() < m_xWindow->first || pt.x() > m_xWindow->second)) continue;
      if (ys.empty()) firstIndex = i;
      ys.push_back(pt.y());
      if (first) {
        x0 = x1 = pt.x();
        first = false;
      }
      x0 = std::min(x0, pt.x());
      x1 = std::max(x1, pt.x());
    }
    range = mergeRanges(range, robustRange(ys, firstIndex));
  }
  if (range.count > 0) {
    y0 = range.lo;
    y1 = m_fullRange ? range.fullHi : range.hi;
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
  // A point above the axis (clipped by the robust range) sits on the plot's top edge.
  const double fy = std::min((v.y() - m_y.min) / (m_y.max - m_y.min), 1.0);
  return {r.left() + fx * r.width(), r.bottom() - fy * r.height()};
}

void ChartView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  p.setRenderHint(QPainter::Antialiasing, false);
  paintHeader(p);
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
  paintClipped(p, plot);
  paintHover(p, plot);
}

void ChartView::paintClipped(QPainter& p, const QRectF& plot) const {
  if (m_clipped.empty()) return;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  QFont small = font();
  if (small.pointSizeF() > 0) small.setPointSizeF(small.pointSizeF() * 0.85);
  p.setFont(small);
  const QFontMetricsF fm(small);
  std::vector<std::pair<double, size_t>> order;  // screen x, index into m_clipped
  order.reserve(m_clipped.size());
  for (size_t i = 0; i < m_clipped.size(); ++i) {
    order.emplace_back(toScreen(m_clipped[i].point).x(), i);
  }
  std::sort(order.begin(), order.end());
  // An arrow per point; its true value beside it where the label clears the last one drawn.
  double lastRight = -std::numeric_limits<double>::infinity();
  QColor back = theme::base();
  back.setAlpha(210);
  for (const auto& [x, i] : order) {
    const ChartClip& c = m_clipped[i];
    const QColor color = m_series[c.series].color;
    QPainterPath arrow;
    arrow.moveTo(x, plot.top() - 1);
    arrow.lineTo(x - 4, plot.top() + kArrowPx);
    arrow.lineTo(x + 4, plot.top() + kArrowPx);
    arrow.closeSubpath();
    p.setPen(QPen(theme::base(), 1));
    p.setBrush(color);
    p.drawPath(arrow);
    const QString text = m_format(c.point.y());
    const double w = fm.horizontalAdvance(text) + 4;
    double left = x + 6;
    if (left + w > plot.right()) left = x - 6 - w;
    if (left < lastRight + 3 || left < plot.left()) continue;
    const QRectF box(left, plot.top() + 1, w, fm.height());
    p.fillRect(box, back);
    p.setPen(theme::text());
    p.drawText(box, Qt::AlignCenter, text);
    lastRight = box.right();
  }
  p.restore();
}

int ChartView::clipAt(const QPointF& pos) const {
  const QRectF plot = plotRect();
  if (pos.y() < plot.top() - 4 || pos.y() > plot.top() + kArrowPx + 4) return -1;
  int best = -1;
  double bestDist = 6;
  for (size_t i = 0; i < m_clipped.size(); ++i) {
    const double d = std::fabs(toScreen(m_clipped[i].point).x() - pos.x());
    if (d <= bestDist) {
      bestDist = d;
      best = int(i);
    }
  }
  return best;
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

std::vector<std::pair<QString, QColor>> ChartView::hoverRows() const {
  // One line per series that has a point here ("name: value"), under an "x: <x>" header when
  // there are several; a single series reads "<x title> <x>: <value>" as one line, after its
  // name if it has one ("rank 2, step 40: 351"). A
  // value above the axis says so (its arrow sits at the top edge).
  std::vector<std::pair<QString, QColor>> rows;
  if (!m_hasHover) return rows;
  const bool several = m_series.size() > 1;
  if (several) rows.emplace_back(QStringLiteral("%1 %2").arg(m_xTitle).arg(m_hoverX), QColor());
  for (const ChartSeries& s : m_series) {
    const QPointF* pt = pointAt(s.points, m_hoverX);
    if (!pt) continue;
    QString value = m_format(pt->y());
    if (pt->y() > m_y.max) value += tr(" (above the axis)");
    if (several) {
      rows.emplace_back(QStringLiteral("%1: %2").arg(s.name, value), s.color);
    } else {
      const QString who = s.name.isEmpty() ? QString() : s.name + QStringLiteral(", ");
      rows.emplace_back(QStringLiteral("%1%2 %3: %4").arg(who, m_xTitle).arg(pt->x()).arg(value),
                        s.color);
    }
  }
  return rows;
}

QStringList ChartView::hoverLines() const {
  QStringList lines;
  for (const auto& row : hoverRows()) lines << row.first;
  return lines;
}

void ChartView::paintHover(QPainter& p, const QRectF& plot) const {
  if (!m_hasHover) return;
  const double sx = toScreen({m_hoverX, m_y.min}).x();
  p.setPen(QPen(theme::axisLine(), 1, Qt::DashLine));
  p.drawLine(QPointF(sx, plot.top()), QPointF(sx, plot.bottom()));
  p.setRenderHint(QPainter::Antialiasing, true);
  for (const ChartSeries& s : m_series) {
    const QPointF* pt = pointAt(s.points, m_hoverX);
    if (!pt) continue;
    p.setPen(QPen(Qt::white, 1.5));
    p.setBrush(s.color);
    p.drawEllipse(toScreen(*pt), 4, 4);
  }
  const std::vector<std::pair<QString, QColor>> rows = hoverRows();
  const bool several = m_series.size() > 1;
  const QFontMetrics fm(font());
  int textPx = 0;
  for (const auto& row : rows) textPx = std::max(textPx, fm.horizontalAdvance(row.first));
  const double swatchPx = several ? 14 : 0;
  QRectF box(0, 0, textPx + swatchPx + 12, fm.height() * double(rows.size()) + 6);
  box.moveTopLeft(QPointF(std::min(sx + 8, plot.right() - box.width()), plot.top() + 4));
  p.setPen(theme::axisLine());
  p.setBrush(theme::window());
  p.drawRect(box);
  for (size_t i = 0; i < rows.size(); ++i) {
    const QRectF row(box.left() + 6, box.top() + 3 + double(i) * fm.height(), box.width() - 12,
                     fm.height());
    if (rows[i].second.isValid()) {
      p.fillRect(QRectF(row.left(), row.center().y() - 1.5, 10, 3), rows[i].second);
    }
    p.setPen(theme::text());
    p.drawText(row.adjusted(several ? swatchPx : 0, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               rows[i].first);
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
  updateLayout();
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
    const int clip = clipAt(help->pos());
    if (clip >= 0) {
      const ChartClip& c = m_clipped[size_t(clip)];
      const QString& name = m_series[c.series].name;
      QToolTip::showText(help->globalPos(),
                         tr("%1%2 %3: %4, above the axis\n(right-click > Full range shows "
                            "every point)")
                             .arg(name.isEmpty() ? QString() : name + QStringLiteral(", "))
                             .arg(m_xTitle)
                             .arg(c.point.x())
                             .arg(m_format(c.point.y())),
                         this);
    } else if (marker >= 0) {
      QToolTip::showText(help->globalPos(), m_markers[size_t(marker)].text, this);
    } else if (help->pos().y() < m_plotTop - 4 && headerElided()) {
      QToolTip::showText(help->globalPos(), headerText(), this);
    } else {
      QToolTip::hideText();
      event->ignore();
    }
    return true;
  }
  return QWidget::event(event);
}

}  // namespace moewb::gui
