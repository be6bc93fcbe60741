// StepBreakdownView: stacked bars per step, legend, hover readout and click (see the header).
#include "step_breakdown_view.h"

#include <QAction>
#include <QMouseEvent>
#include <QPainter>
#include <algorithm>
#include <cmath>

#include "theme.h"

namespace moewb::gui {

namespace {
constexpr double kLeftPx = 56, kRightPx = 12, kBottomPx = 22;
constexpr double kSwatchPx = 10, kItemGapPx = 12;

QString ms(double ns) {
  const double v = ns / 1e6;
  return QString::number(v, 'f', v >= 100 ? 1 : (v >= 1 ? 2 : 3));
}
}  // namespace

StepBreakdownView::StepBreakdownView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_emptyText = tr("no steps yet");
  setToolTip(tr("Time per step by kind of work; hover a bar for its parts, click to select the "
                "step"));
  m_fullRangeAction = new QAction(tr("Full range"), this);
  m_fullRangeAction->setCheckable(true);
  m_fullRangeAction->setToolTip(tr("Let the y axis cover every step, also the far-out ones "
                                   "(such as a warm-up first step) drawn cut at the top"));
  connect(m_fullRangeAction, &QAction::toggled, this, &StepBreakdownView::setFullRange);
  addAction(m_fullRangeAction);
  setContextMenuPolicy(Qt::ActionsContextMenu);
}

void StepBreakdownView::setFullRange(bool on) {
  if (on == m_fullRange) return;
  m_fullRange = on;
  if (m_fullRangeAction->isChecked() != on) m_fullRangeAction->setChecked(on);
  relayout();
}

void StepBreakdownView::setData(const StepBreakdownSet& data) {
  m_data = data;
  relayout();
}

void StepBreakdownView::setStepWindow(std::optional<std::pair<int64_t, int64_t>> steps) {
  if (steps == m_window) return;
  m_window = steps;
  relayout();
}

void StepBreakdownView::setEmptyText(const QString& text) {
  m_emptyText = text;
  update();
}

QString StepBreakdownView::sourceText() const {
  if (m_data.steps.empty()) return {};
  QString ranks = tr("rank 0");
  if (m_data.isParallel()) {
    ranks = m_data.shownRank ? tr("rank %1 of %2").arg(*m_data.shownRank).arg(m_data.ranks.size())
                             : tr("per step the slowest of %1 ranks").arg(m_data.ranks.size());
  }
  return m_data.source == BreakdownSource::kGpuKernels
             ? tr("from GPU kernels (%1; communication: the part no compute overlapped)")
                   .arg(ranks)
             : tr("from host phases (%1; no GPU capture in this trace)").arg(ranks);
}

std::vector<TimeCategory> StepBreakdownView::presentCategories() const {
  std::array<bool, kTimeCategoryCount> any{};
  for (const StepBreakdown& s : m_data.steps) {
    for (size_t k = 0; k < any.size(); ++k) any[k] = any[k] || s.ns[k] > 0;
  }
  std::vector<TimeCategory> out;
  for (size_t k = 0; k < any.size(); ++k) {
    if (any[k]) out.push_back(TimeCategory(k));
  }
  return out;
}

QRectF StepBreakdownView::plotRect() const {
  const QFontMetrics fm(font());
  const double top = 6 + 2.0 * fm.height() + 6;  // the source line and one legend row
  return QRectF(kLeftPx, top, std::max(10.0, width() - kLeftPx - kRightPx),
                std::max(10.0, height() - top - kBottomPx));
}

void StepBreakdownView::relayout() {
  m_columns.clear();
  m_hover = -1;
  const auto& steps = m_data.steps;
  size_t first = 1, last = 0;  // the steps laid out (none)
  if (!steps.empty()) {
    first = 0;
    last = steps.size() - 1;
    if (m_window) {
      auto byStep = [](const StepBreakdown& s, int64_t step) { return s.step < step; };
      first = size_t(std::lower_bound(steps.begin(), steps.end(), m_window->first, byStep) -
                     steps.begin());
      const auto end = std::upper_bound(
          steps.begin(), steps.end(), m_window->second,
          [](int64_t step, const StepBreakdown& s) { return step < s.step; });
      last = size_t(end - steps.begin());
      if (last == 0 || first >= last) {
        first = 1;
        last = 0;  // nothing in the window
      } else {
        --last;
      }
    }
    if (first <= last) m_columns = columnsOf(steps, first, last, plotRect().width());
  }
  fitYAxis(first, last);
  update();
}

void StepBreakdownView::fitYAxis(size_t first, size_t last) {
  double top = 0;
  for (const BreakdownColumn& c : m_columns) top = std::max(top, c.maxDurNs);
  if (!m_fullRange && !m_columns.empty()) {
    std::vector<double> durNs;
    durNs.reserve(last - first + 1);
    for (size_t i = first; i <= last; ++i) durNs.push_back(double(m_data.steps[i].durNs));
    const RobustRange range = robustRange(durNs, first);
    if (range.clips()) top = range.hi;
  }
  m_y = niceAxis(0, top > 0 ? top / 1e6 : 1, std::clamp(int(plotRect().height() / 28), 1, 5));
  m_clipped.clear();
  const double axisNs = m_y.max * 1e6;
  for (size_t i = 0; i < m_columns.size(); ++i) {
    const BreakdownColumn& c = m_columns[i];
    double stackNs = 0;
    for (double v : c.meanNs) stackNs += v;
    if (c.maxDurNs > axisNs || stackNs > axisNs) m_clipped.push_back(i);
  }
}

int StepBreakdownView::columnAt(const QPointF& pos) const {
  const QRectF plot = plotRect();
  if (pos.y() < plot.top() || pos.y() > plot.bottom() + 2 || m_columns.empty()) return -1;
  const double x = pos.x() - plot.left();
  auto it = std::upper_bound(m_columns.begin(), m_columns.end(), x,
                             [](double v, const BreakdownColumn& c) { return v < c.x1; });
  if (it == m_columns.end() || x < it->x0) return -1;
  return int(it - m_columns.begin());
}

QString StepBreakdownView::hoverText(const QPointF& pos) const {
  const int index = columnAt(pos);
  if (index < 0) return {};
  const BreakdownColumn& c = m_columns[size_t(index)];
  const auto& steps = m_data.steps;
  QStringList lines;
  double total = 0;
  for (double v : c.meanNs) total += v;
  const bool slowestView = m_data.isParallel() && !m_data.shownRank;
  const StepBreakdown& slowest = steps[c.slowest];
  if (c.first == c.last) {
    lines << tr("step %1: %2 ms").arg(slowest.step).arg(ms(total));
  } else {
    lines << tr("steps %1-%2 (%3 steps), mean %4 ms; slowest: step %5, %6 ms")
                 .arg(steps[c.first].step)
                 .arg(steps[c.last].step)
                 .arg(c.last - c.first + 1)
                 .arg(ms(total))
                 .arg(slowest.step)
                 .arg(ms(c.maxDurNs));
  }
  if (slowestView) lines << rankText(slowest);
  if (m_data.isParallel() && m_data.shownRank) lines << tr("rank %1").arg(*m_data.shownRank);
  for (int k = kTimeCategoryCount - 1; k >= 0; --k) {
    const double v = c.meanNs[size_t(k)];
    if (v <= 0) continue;
    lines << tr("%1: %2 ms (%3%)")
                 .arg(QString::fromLatin1(timeCategoryName(TimeCategory(k))))
                 .arg(ms(v))
                 .arg(total > 0 ? 100.0 * v / total : 0.0, 0, 'f', 1);
  }
  if (std::binary_search(m_clipped.begin(), m_clipped.end(), size_t(index))) {
    lines << tr("above the axis, cut at %1 ms (right-click > Full range shows it to scale)")
                 .arg(QString::number(m_y.max, 'g', 4));
  }
  return lines.join(QLatin1Char('\n'));
}

QString StepBreakdownView::rankText(const StepBreakdown& b) {
  const int64_t gapNs = b.durNs - b.medianDurNs;
  const double gapPercent = b.medianDurNs > 0 ? 100.0 * double(gapNs) / double(b.medianDurNs) : 0;
  return tr("slowest of %1 ranks: rank %2, %3 ms; median rank %4: %5 ms; gap %6 ms (%7%)")
      .arg(b.rankCount)
      .arg(b.rank)
      .arg(ms(double(b.durNs)))
      .arg(b.medianRank)
      .arg(ms(double(b.medianDurNs)))
      .arg(ms(double(gapNs)))
      .arg(gapPercent, 0, 'f', 1);
}

void StepBreakdownView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  paintLegend(p);
  const QRectF plot = plotRect();
  paintAxes(p, plot);
  if (m_columns.empty()) {
    p.setPen(theme::dimText());
    p.drawText(plot, Qt::AlignCenter,
               m_data.steps.empty() ? m_emptyText : tr("no steps in the window"));
    return;
  }
  paintBars(p, plot);
  paintClipped(p, plot);
  if (m_hover < 0 || size_t(m_hover) >= m_columns.size()) return;
  const BreakdownColumn& c = m_columns[size_t(m_hover)];
  const QString text = hoverText(QPointF(plot.left() + (c.x0 + c.x1) / 2, plot.center().y()));
  const QStringList lines = text.split(QLatin1Char('\n'));
  const QFontMetrics fm(font());
  int textPx = 0;
  for (const QString& line : lines) textPx = std::max(textPx, fm.horizontalAdvance(line));
  QRectF box(0, 0, textPx + 12, fm.height() * double(lines.size()) + 6);
  const double x = plot.left() + c.x1 + 8;
  box.moveTopLeft(QPointF(x + box.width() > plot.right() ? plot.left() + c.x0 - 8 - box.width()
                                                         : x,
                          plot.top() + 4));
  box.moveLeft(std::max(box.left(), 0.0));
  p.setPen(theme::axisLine());
  p.setBrush(theme::window());
  p.drawRect(box);
  p.setPen(theme::text());
  for (qsizetype i = 0; i < lines.size(); ++i) {
    p.drawText(QRectF(box.left() + 6, box.top() + 3 + double(i) * fm.height(), box.width() - 12,
                      fm.height()),
               Qt::AlignLeft | Qt::AlignVCenter, lines[i]);
  }
}

void StepBreakdownView::paintLegend(QPainter& p) const {
  const QFontMetrics fm(font());
  p.setPen(theme::dimText());
  p.drawText(QRectF(kLeftPx, 4, width() - kLeftPx - kRightPx, fm.height()),
             Qt::AlignLeft | Qt::AlignVCenter, fm.elidedText(sourceText(), Qt::ElideRight,
                                                             width() - int(kLeftPx + kRightPx)));
  double x = kLeftPx;
  const double y = 6 + fm.height();
  for (TimeCategory c : presentCategories()) {
    const QString name = QString::fromLatin1(timeCategoryName(c));
    const double w = kSwatchPx + 4 + fm.horizontalAdvance(name);
    if (x + w > width() - kRightPx) break;  // one row; hover names every part anyway
    p.fillRect(QRectF(x, y + (fm.height() - kSwatchPx) / 2, kSwatchPx, kSwatchPx),
               timeCategoryColor(c));
    p.setPen(theme::text());
    p.drawText(QRectF(x + kSwatchPx + 4, y, w, fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
               name);
    x += w + kItemGapPx;
  }
}

void StepBreakdownView::paintAxes(QPainter& p, const QRectF& plot) const {
  const QFontMetrics fm(font());
  for (double v : m_y.values) {
    const double y = plot.bottom() - (v - m_y.min) / (m_y.max - m_y.min) * plot.height();
    p.setPen(theme::gridLine());
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    p.setPen(theme::dimText());
    p.drawText(QRectF(0, y - 9, kLeftPx - 6, 18), Qt::AlignRight | Qt::AlignVCenter,
               QString::number(v, 'g', 4));
  }
  p.setPen(theme::axisLine());
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  p.drawLine(plot.bottomLeft(), plot.topLeft());
  p.setPen(theme::dimText());
  p.drawText(QRectF(2, plot.top() - fm.height() - 2, kLeftPx, fm.height()),
             Qt::AlignLeft | Qt::AlignVCenter, tr("ms"));
  if (m_columns.empty()) return;
  const auto& steps = m_data.steps;
  const QString first = tr("step %1").arg(steps[m_columns.front().first].step);
  const QString last = tr("step %1").arg(steps[m_columns.back().last].step);
  p.drawText(QRectF(plot.left(), plot.bottom() + 3, plot.width(), kBottomPx - 4),
             Qt::AlignLeft | Qt::AlignTop, first);
  p.drawText(QRectF(plot.left(), plot.bottom() + 3, plot.width(), kBottomPx - 4),
             Qt::AlignRight | Qt::AlignTop, last);
}

void StepBreakdownView::paintBars(QPainter& p, const QRectF& plot) const {
  const double scale = plot.height() / ((m_y.max - m_y.min) * 1e6);  // px per ns
  for (size_t i = 0; i < m_columns.size(); ++i) {
    const BreakdownColumn& c = m_columns[i];
    // Bars of a few pixels or more get a one-pixel gap so neighbouring steps read apart.
    const double w = c.x1 - c.x0;
    const double gap = w >= 4 ? std::min(2.0, w * 0.15) : 0;
    const double left = plot.left() + c.x0 + gap / 2, width = std::max(1.0, w - gap);
    double y = plot.bottom();
    for (size_t k = 0; k < size_t(kTimeCategoryCount); ++k) {
      // A stack above the axis is cut at the plot's top (paintClipped marks it).
      const double h = std::min(c.meanNs[k] * scale, y - plot.top());
      if (h <= 0) continue;
      QColor color = timeCategoryColor(TimeCategory(k));
      if (int(i) == m_hover) color = color.lighter(125);
      p.fillRect(QRectF(left, y - h, width, h), color);
      y -= h;
    }
    if (c.first != c.last) {  // the slowest step of the column, as a tick
      const double top = std::max(plot.bottom() - c.maxDurNs * scale, plot.top());
      p.fillRect(QRectF(left, top, width, 1.5), theme::text());
    }
  }
}

void StepBreakdownView::paintClipped(QPainter& p, const QRectF& plot) const {
  if (m_clipped.empty()) return;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  QFont small = font();
  if (small.pointSizeF() > 0) small.setPointSizeF(small.pointSizeF() * 0.85);
  p.setFont(small);
  const QFontMetricsF fm(small);
  QColor back = theme::base();
  back.setAlpha(210);
  double lastRight = -1e300;
  for (size_t i : m_clipped) {
    const BreakdownColumn& c = m_columns[i];
    const double left = plot.left() + c.x0, right = plot.left() + c.x1;
    // A break mark: a slanted band of the background, edged in the text colour, across the bar
    // under its top (visible on every category's colour).
    const double slant = std::min(3.0, (right - left) / 4);
    QPolygonF band;
    const double y0 = plot.top() + 7, y1 = plot.top() + 11;
    band << QPointF(left - 1, y0 + slant) << QPointF(right + 1, y0 - slant)
         << QPointF(right + 1, y1 - slant) << QPointF(left - 1, y1 + slant);
    p.setPen(QPen(theme::text(), 1));
    p.setBrush(theme::base());
    p.drawPolygon(band);
    // Its true duration (the slowest step's, for a column of several), at the bar's left when
    // it fits, else beside it, where it clears the last label drawn.
    const QString text = ms(c.maxDurNs) + tr(" ms");
    const double w = fm.horizontalAdvance(text) + 6;
    double x = right - left >= w + 4 ? left + 2 : right + 2;
    if (x + w > plot.right()) x = left - 2 - w;
    if (x < lastRight + 3 || x < plot.left()) continue;
    const QRectF box(x, plot.top() + 15, w, fm.height());
    p.fillRect(box, back);
    p.setPen(theme::text());
    p.drawText(box, Qt::AlignCenter, text);
    lastRight = box.right();
  }
  p.restore();
}

void StepBreakdownView::resizeEvent(QResizeEvent* event) {
  relayout();
  QWidget::resizeEvent(event);
}

void StepBreakdownView::mousePressEvent(QMouseEvent* event) {
  const int index = event->button() == Qt::LeftButton ? columnAt(event->position()) : -1;
  if (index >= 0) {
    emit stepClicked(m_data.steps[m_columns[size_t(index)].slowest].step);
    event->accept();
    return;
  }
  QWidget::mousePressEvent(event);
}

void StepBreakdownView::mouseMoveEvent(QMouseEvent* event) {
  const int index = columnAt(event->position());
  if (index != m_hover) {
    m_hover = index;
    update();
  }
  QWidget::mouseMoveEvent(event);
}

void StepBreakdownView::leaveEvent(QEvent* event) {
  m_hover = -1;
  update();
  QWidget::leaveEvent(event);
}

QSize StepBreakdownView::sizeHint() const {
  return {460, 220};
}

QSize StepBreakdownView::minimumSizeHint() const {
  return {160, 60};
}

}  // namespace moewb::gui
