// HeatmapView: layer x expert colour grid with labels, a legend bar and hover details.
#include "heatmap_view.h"

#include <QPainter>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/expert_load_model.h"
#include "moewb/gui/palette.h"
#include "theme.h"

namespace moewb::gui {

HeatmapView::HeatmapView(QWidget* parent) : ColorGridView(parent) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void HeatmapView::setModel(ExpertLoadModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  if (m_model) {
    auto repaint = [this] { update(); };
    connect(m_model, &QAbstractItemModel::dataChanged, this, repaint);
    connect(m_model, &QAbstractItemModel::modelReset, this, repaint);
    connect(m_model, &QAbstractItemModel::rowsInserted, this, repaint);
    connect(m_model, &QAbstractItemModel::columnsInserted, this, repaint);
  }
  update();
}

double HeatmapView::colorScaleMax() const {
  const double maxLoad = m_model ? m_model->maxNormalizedLoad() : 0.0;
  return scaleMaxOr(std::max(1.5, std::ceil(maxLoad * 2.0) / 2.0));
}

QSize HeatmapView::sizeHint() const {
  return {560, 300};
}
QSize HeatmapView::minimumSizeHint() const {
  return {kLeftPx + kLegendPx + 120, 120};
}

QRect HeatmapView::gridRect() const {
  return QRect(kLeftPx, kTopPx, std::max(1, width() - kLeftPx - kLegendPx),
               std::max(1, height() - kTopPx - kBottomPx));
}

QPoint HeatmapView::cellCenter(int layer, int expert) const {
  return m_model ? cellRect(layer, expert).center().toPoint() : QPoint();
}

QRectF HeatmapView::cellRect(int layer, int expert) const {
  const QRect g = gridRect();
  const double w = double(g.width()) / std::max(1, m_model->columnCount());
  const double h = double(g.height()) / std::max(1, m_model->rowCount());
  return QRectF(g.left() + expert * w, g.top() + layer * h, w, h);
}

bool HeatmapView::cellAt(const QPoint& pos, int* layer, int* expert) const {
  if (!m_model || m_model->rowCount() == 0 || m_model->columnCount() == 0) return false;
  const QRect g = gridRect();
  if (!g.contains(pos)) return false;
  *expert = std::min(m_model->columnCount() - 1,
                     int(double(pos.x() - g.left()) * m_model->columnCount() / g.width()));
  *layer = std::min(m_model->rowCount() - 1,
                    int(double(pos.y() - g.top()) * m_model->rowCount() / g.height()));
  return true;
}

QString HeatmapView::valueText(int layer, int expert) const {
  const double v = m_model->value(layer, expert);
  if (m_model->mode() == ExpertLoadModel::Mode::kMeanOverSteps && v < 100) {
    return QString::number(v, 'f', 1);
  }
  return QString::fromStdString(formatCount(v));
}

QString HeatmapView::cellText(int layer, int expert) const {
  if (!m_model) return {};
  const char* what = m_model->mode() == ExpertLoadModel::Mode::kStep ? "tokens"
                     : m_model->mode() == ExpertLoadModel::Mode::kMaxOverSteps
                         ? "tokens (max over steps)"
                         : "tokens (mean over steps)";
  QString text = tr("layer %1, expert %2: %3 %4, %5x layer mean")
                     .arg(layer)
                     .arg(expert)
                     .arg(valueText(layer, expert))
                     .arg(QLatin1String(what))
                     .arg(m_model->normalizedLoad(layer, expert), 0, 'f', 2) +
                 aboveScaleNote(m_model->normalizedLoad(layer, expert));
  const qlonglong dropped =
      m_model->data(m_model->index(layer, expert), ExpertLoadModel::kDroppedRole).toLongLong();
  if (dropped > 0) text += tr(", %1 dropped").arg(dropped);
  return text;
}

void HeatmapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  if (!m_model || m_model->rowCount() == 0 || m_model->columnCount() == 0) {
    p.setPen(theme::dimText());
    p.drawText(rect(), Qt::AlignCenter, tr("No expert load in this trace yet."));
    return;
  }
  paintCells(p);
  paintLabels(p);
  paintLegend(p);
}

void HeatmapView::paintCells(QPainter& p) const {
  const double scale = colorScaleMax();
  const QFontMetrics fm(font());
  for (int l = 0; l < m_model->rowCount(); ++l) {
    for (int e = 0; e < m_model->columnCount(); ++e) {
      const QRectF r = cellRect(l, e);
      const QColor c = heatColor(m_model->normalizedLoad(l, e) / scale);
      p.fillRect(r.adjusted(0, 0, -1, -1), c);
      if (r.width() >= 34 && r.height() >= fm.height() + 2) {
        p.setPen(textColorOn(c));
        p.drawText(r, Qt::AlignCenter, valueText(l, e));
      }
    }
  }
  if (hoverRow() >= 0 && hoverRow() < m_model->rowCount() &&
      hoverColumn() < m_model->columnCount()) {
    p.setPen(QPen(theme::accent(), 2));
    p.drawRect(cellRect(hoverRow(), hoverColumn()).adjusted(1, 1, -2, -2));
  }
}

void HeatmapView::paintLabels(QPainter& p) const {
  const QFontMetrics fm(font());
  p.setPen(theme::dimText());
  const int experts = m_model->columnCount();
  const double cellW = double(gridRect().width()) / experts;
  const int every = std::max(1, int(std::ceil((fm.horizontalAdvance("E88") + 6) / cellW)));
  for (int e = 0; e < experts; e += every) {
    const QRectF r = cellRect(0, e);
    p.drawText(QRectF(r.left() - 20, 2, r.width() + 40, kTopPx - 4), Qt::AlignCenter,
               QStringLiteral("E%1").arg(e));
  }
  const int layers = m_model->rowCount();
  const double cellH = double(gridRect().height()) / layers;
  const int everyL = std::max(1, int(std::ceil((fm.height() + 2) / cellH)));
  for (int l = 0; l < layers; l += everyL) {
    const QRectF r = cellRect(l, 0);
    p.drawText(QRectF(2, r.top(), kLeftPx - 8, r.height()), Qt::AlignVCenter | Qt::AlignRight,
               QStringLiteral("L%1").arg(l));
  }
}

void HeatmapView::paintLegend(QPainter& p) const {
  const QRect g = gridRect();
  const QRect bar(g.right() + 18, g.top() + 26, 14, std::max(20, g.height() - 34));
  paintScaleBar(p, bar, QRect(bar.left() - 10, g.top() - 2, kLegendPx, 18),
                scaleTitle(tr("x layer mean")));
  const double scale = colorScaleMax();
  p.setPen(theme::text());
  for (double v : {0.0, 1.0, scale / 2 > 1.2 ? scale / 2 : -1.0, scale}) {
    if (v < 0) continue;
    const int y = bar.bottom() - int(std::lround(v / scale * bar.height()));
    p.drawLine(bar.right() + 1, y, bar.right() + 5, y);
    p.drawText(QRect(bar.right() + 8, y - 8, kLegendPx - 40, 16), Qt::AlignVCenter | Qt::AlignLeft,
               QString::number(v, 'g', 3) + QStringLiteral("x"));
  }
}

}  // namespace moewb::gui
