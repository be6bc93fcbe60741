// ExpertStripView: expert x step heat strip, imbalance and drop-rate line, hover and click.
#include "expert_strip_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/palette.h"
#include "theme.h"

namespace moewb::gui {

ExpertStripView::ExpertStripView(QWidget* parent) : ColorGridView(parent) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void ExpertStripView::setModel(ExpertTimeModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  m_columnsWidth = -1;
  if (m_model) {
    connect(m_model, &ExpertTimeModel::changed, this, [this] {
      m_columnsWidth = -1;
      update();
    });
  }
  update();
}

void ExpertStripView::setMarkedStep(qint64 step) {
  if (step == m_markedStep) return;
  m_markedStep = step;
  update();
}

double ExpertStripView::colorScaleMax() const {
  return scaleMaxOr(m_model ? m_model->colorScaleMax() : 1.5);
}

QSize ExpertStripView::sizeHint() const {
  return {560, 300};
}
QSize ExpertStripView::minimumSizeHint() const {
  return {kLeftPx + kLegendPx + 120, kTopPx + 60 + kAxisPx + kSeriesPx};
}

QRect ExpertStripView::stripRect() const {
  return QRect(kLeftPx, kTopPx, std::max(1, width() - kLeftPx - kLegendPx),
               std::max(1, height() - kTopPx - kAxisPx - kSeriesPx));
}

QRect ExpertStripView::seriesRect() const {
  const QRect s = stripRect();
  return QRect(s.left(), s.bottom() + 1 + kAxisPx, s.width(), kSeriesPx - 6);
}

const std::vector<ExpertTimeModel::Column>& ExpertStripView::columns() const {
  ensureColumns();
  return m_columns;
}

void ExpertStripView::ensureColumns() const {
  const int w = stripRect().width();
  if (m_columnsWidth == w) return;
  m_columnsWidth = w;
  m_columns = m_model ? m_model->columns(w) : std::vector<ExpertTimeModel::Column>{};
}

QRectF ExpertStripView::cellRect(int column, int expert) const {
  const QRect g = stripRect();
  const double w = double(g.width()) / std::max<size_t>(1, m_columns.size());
  const double h = double(g.height()) / std::max(1, m_model ? m_model->expertCount() : 1);
  return QRectF(g.left() + column * w, g.top() + expert * h, w, h);
}

QPoint ExpertStripView::cellCenter(int column, int expert) const {
  ensureColumns();
  return cellRect(column, expert).center().toPoint();
}

bool ExpertStripView::cellAt(const QPoint& pos, int* expert, int* column) const {
  ensureColumns();
  if (!m_model || m_columns.empty() || m_model->expertCount() == 0) return false;
  const QRect g = stripRect();
  if (!g.contains(pos)) return false;
  const int n = int(m_columns.size());
  const int experts = m_model->expertCount();
  *column = std::min(n - 1, int(double(pos.x() - g.left()) * n / g.width()));
  *expert = std::min(experts - 1, int(double(pos.y() - g.top()) * experts / g.height()));
  return true;
}

qint64 ExpertStripView::hotStep(int column, int expert) const {
  ensureColumns();
  if (!m_model || column < 0 || size_t(column) >= m_columns.size()) return -1;
  const ExpertTimeModel::Column& c = m_columns[size_t(column)];
  const int first = m_model->stepIndex(c.firstStep);
  qint64 best = c.firstStep;
  int64_t bestTokens = -1;
  for (int i = first; i >= 0 && i < first + c.stepCount; ++i) {
    const int64_t t = m_model->tokens(i, expert);
    if (t > bestTokens) {
      bestTokens = t;
      best = m_model->steps()[size_t(i)];
    }
  }
  return best;
}

QString ExpertStripView::cellText(int expert, int column) const {
  ensureColumns();
  if (!m_model || column < 0 || size_t(column) >= m_columns.size()) return {};
  const ExpertTimeModel::Column& c = m_columns[size_t(column)];
  const size_t e = size_t(expert);
  QString steps = c.stepCount > 1 ? tr("steps %1-%2 (max of %3 steps)")
                                        .arg(c.firstStep)
                                        .arg(c.lastStep)
                                        .arg(c.stepCount)
                                  : tr("step %1").arg(c.firstStep);
  return tr("layer %1, expert %2, %3: %4 tokens, %5x layer mean%8, %6 dropped, bias %7")
      .arg(m_model->layer())
      .arg(expert)
      .arg(steps)
      .arg(QString::fromStdString(formatCount(double(c.tokens[e]))))
      .arg(c.load[e], 0, 'f', 2)
      .arg(c.dropped[e])
      .arg(c.bias[e], 0, 'g', 4)
      .arg(aboveScaleNote(c.load[e]));
}

void ExpertStripView::mousePressEvent(QMouseEvent* event) {
  int expert = -1, column = -1;
  if (event->button() == Qt::LeftButton &&
      cellAt(event->position().toPoint(), &expert, &column)) {
    emit cellClicked(hotStep(column, expert), expert);
    event->accept();
    return;
  }
  ColorGridView::mousePressEvent(event);
}

void ExpertStripView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  ensureColumns();
  if (!m_model || m_columns.empty()) {
    p.setPen(theme::dimText());
    p.drawText(rect(), Qt::AlignCenter, tr("No expert load in this trace yet."));
    return;
  }
  paintCells(p);
  paintLabels(p);
  paintSeries(p);
  paintLegend(p);
}

void ExpertStripView::paintCells(QPainter& p) const {
  const double scale = colorScaleMax();
  const int experts = m_model->expertCount();
  for (size_t c = 0; c < m_columns.size(); ++c) {
    for (int e = 0; e < experts; ++e) {
      const QRectF r = cellRect(int(c), e);
      // Leave a 1 px gap only where cells are wide enough to show it.
      const QRectF fill = r.width() >= 4 ? r.adjusted(0, 0, -1, -1) : r.adjusted(0, 0, 0, -1);
      p.fillRect(fill, heatColor(m_columns[c].load[size_t(e)] / scale));
    }
  }
  for (size_t c = 0; c < m_columns.size(); ++c) {
    if (m_markedStep < m_columns[c].firstStep || m_markedStep > m_columns[c].lastStep) continue;
    const QRectF r = cellRect(int(c), 0);
    p.setPen(QPen(theme::accent(), 1, Qt::DashLine));
    const double x = r.center().x();
    p.drawLine(QPointF(x, stripRect().top()), QPointF(x, seriesRect().bottom()));
  }
  if (hoverRow() >= 0 && hoverRow() < experts && size_t(hoverColumn()) < m_columns.size()) {
    p.setPen(QPen(theme::accent(), 2));
    p.drawRect(cellRect(hoverColumn(), hoverRow()).adjusted(0, 0, -1, -1));
  }
}

void ExpertStripView::paintLabels(QPainter& p) const {
  const QFontMetrics fm(font());
  p.setPen(theme::dimText());
  const int experts = m_model->expertCount();
  const double cellH = double(stripRect().height()) / experts;
  const int every = std::max(1, int(std::ceil((fm.height() + 2) / cellH)));
  for (int e = 0; e < experts; e += every) {
    const QRectF r = cellRect(0, e);
    p.drawText(QRectF(2, r.top(), kLeftPx - 8, r.height()), Qt::AlignVCenter | Qt::AlignRight,
               QStringLiteral("E%1").arg(e));
  }
  // Step labels: the first and last step, and a few between where they fit.
  const QRect s = stripRect();
  const int labelW = fm.horizontalAdvance(QStringLiteral("step 000000")) + 8;
  const int labelCount = std::max(1, s.width() / labelW);
  const int n = int(m_columns.size());
  for (int k = 0; k <= std::min(labelCount, n - 1); ++k) {
    const int c = n == 1 ? 0 : int(std::lround(double(k) * (n - 1) / std::max(1, labelCount)));
    const QRectF r = cellRect(std::min(c, n - 1), 0);
    const Qt::Alignment align = k == 0 ? Qt::AlignLeft : k == labelCount ? Qt::AlignRight
                                                                    : Qt::AlignHCenter;
    const double left = k == 0 ? r.left() : k == labelCount ? r.right() - labelW
                                                       : r.center().x() - labelW / 2.0;
    p.drawText(QRectF(left, s.bottom() + 1, labelW, kAxisPx), align | Qt::AlignVCenter,
               QString::number(m_columns[size_t(std::min(c, n - 1))].firstStep));
  }
}

void ExpertStripView::paintSeries(QPainter& p) const {
  const QRect r = seriesRect();
  p.setPen(theme::axisLine());
  p.drawLine(r.bottomLeft(), r.bottomRight());
  double maxImb = 1.0, maxDrop = 0.0;
  for (const auto& c : m_columns) {
    maxImb = std::max(maxImb, c.imbalance);
    maxDrop = std::max(maxDrop, c.dropRate);
  }
  auto line = [&](auto value, double top, QColor color) {
    QPainterPath path;
    for (size_t c = 0; c < m_columns.size(); ++c) {
      const double x = cellRect(int(c), 0).center().x();
      const double y = r.bottom() - (top > 0 ? value(m_columns[c]) / top : 0.0) * r.height();
      if (c == 0) path.moveTo(x, y); else path.lineTo(x, y);
    }
    p.setPen(QPen(color, 1.5));
    p.drawPath(path);
  };
  line([](const ExpertTimeModel::Column& c) { return c.imbalance; }, maxImb, theme::series(0));
  line([](const ExpertTimeModel::Column& c) { return c.dropRate; }, maxDrop, theme::series(1));
  const QRect key(r.right() + 8, r.top() - 4, kLegendPx - 10, r.height() + 8);
  p.setPen(theme::series(0));
  p.drawText(key, Qt::AlignTop | Qt::AlignLeft, tr("imbal. %1x").arg(maxImb, 0, 'f', 2));
  p.setPen(theme::series(1));
  p.drawText(key, Qt::AlignBottom | Qt::AlignLeft,
             tr("drop %1%").arg(maxDrop * 100.0, 0, 'f', 1));
}

void ExpertStripView::paintLegend(QPainter& p) const {
  const QRect g = stripRect();
  const QRect bar(g.right() + 18, g.top() + 22, 14, std::max(20, g.height() - 26));
  paintScaleBar(p, bar, QRect(bar.left() - 10, g.top() - 2, kLegendPx, 18),
                scaleTitle(tr("x layer mean")));
  const double scale = colorScaleMax();
  p.setPen(theme::text());
  for (double v : {0.0, 1.0, scale}) {
    const int y = bar.bottom() - int(std::lround(v / scale * bar.height()));
    p.drawLine(bar.right() + 1, y, bar.right() + 5, y);
    p.drawText(QRect(bar.right() + 8, y - 8, kLegendPx - 40, 16), Qt::AlignVCenter | Qt::AlignLeft,
               QString::number(v, 'g', 3) + QStringLiteral("x"));
  }
}

}  // namespace moewb::gui
