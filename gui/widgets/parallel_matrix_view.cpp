// ParallelMatrixView: src x dst traffic grid with sum row / column, legend and hover details.
#include "parallel_matrix_view.h"

#include <QPainter>
#include <algorithm>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/palette.h"
#include "moewb/gui/parallel_traffic_model.h"
#include "theme.h"

namespace moewb::gui {

ParallelMatrixView::ParallelMatrixView(QWidget* parent) : ColorGridView(parent) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void ParallelMatrixView::setModel(ParallelTrafficModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  if (m_model) {
    auto repaint = [this] { update(); };
    connect(m_model, &QAbstractItemModel::dataChanged, this, repaint);
    connect(m_model, &QAbstractItemModel::modelReset, this, repaint);
  }
  update();
}

QSize ParallelMatrixView::sizeHint() const {
  return {460, 260};
}

QSize ParallelMatrixView::minimumSizeHint() const {
  return {kLeftPx + kLegendPx + 160, 90};
}

QRect ParallelMatrixView::gridRect() const {
  return QRect(kLeftPx, kTopPx, std::max(1, width() - kLeftPx - kLegendPx),
               std::max(1, height() - kTopPx - kBottomPx));
}

// W rank columns share the grid width less the gap; the sum column is one more cell after it.
QRectF ParallelMatrixView::cellRect(int row, int column) const {
  if (!m_model || row < 0 || column < 0 || row >= m_model->rowCount() ||
      column >= m_model->columnCount()) {
    return {};
  }
  const QRect g = gridRect();
  const int cells = m_model->columnCount();
  const int w = m_model->worldSize();
  const double cw = double(g.width() - kSumGapPx) / cells;
  const double ch = double(g.height() - kSumGapPx) / cells;
  const double x = g.left() + column * cw + (column == w ? kSumGapPx : 0);
  const double y = g.top() + row * ch + (row == w ? kSumGapPx : 0);
  return QRectF(x, y, cw, ch);
}

bool ParallelMatrixView::cellAt(const QPoint& pos, int* row, int* column) const {
  if (!m_model) return false;
  for (int r = 0; r < m_model->rowCount(); ++r) {
    for (int c = 0; c < m_model->columnCount(); ++c) {
      if (cellRect(r, c).contains(pos)) {
        *row = r;
        *column = c;
        return true;
      }
    }
  }
  return false;
}

void ParallelMatrixView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  if (!m_model || m_model->worldSize() == 0) {
    p.setPen(theme::dimText());
    p.drawText(rect(), Qt::AlignCenter, tr("No all-to-all traffic in this trace."));
    return;
  }
  paintCells(p);
  paintLabels(p);
  paintLegend(p);
}

void ParallelMatrixView::paintCells(QPainter& p) const {
  const QFontMetrics fm(font());
  const int w = m_model->worldSize();
  for (int r = 0; r <= w; ++r) {
    for (int c = 0; c <= w; ++c) {
      const QRectF cell = cellRect(r, c).adjusted(0, 0, -1, -1);
      const QString text = m_model->data(m_model->index(r, c)).toString();
      QColor textColor = theme::text();
      if (m_model->isSum(r, c)) {
        // Sums: a bar on their own scale over the alternate background.
        p.fillRect(cell, theme::alternate());
        const double share = std::clamp(m_model->heat(r, c), 0.0, 1.0);
        QColor bar = theme::accent();
        bar.setAlpha(110);
        if (c == w && r != w) {  // a source's sent bytes: a horizontal bar
          p.fillRect(QRectF(cell.left(), cell.top(), cell.width() * share, cell.height()), bar);
        } else if (r == w && c != w) {  // a destination's received bytes: a vertical bar
          const double h = cell.height() * share;
          p.fillRect(QRectF(cell.left(), cell.bottom() - h, cell.width(), h), bar);
        }
      } else {
        const QColor color = heatColor(m_model->heat(r, c));
        p.fillRect(cell, color);
        textColor = textColorOn(color);
      }
      if (cell.width() >= fm.horizontalAdvance(text) + 6 && cell.height() >= fm.height() + 2) {
        p.setPen(textColor);
        p.drawText(cell, Qt::AlignCenter, text);
      }
    }
  }
  if (hoverRow() >= 0 && hoverColumn() >= 0) {
    p.setPen(QPen(theme::accent(), 2));
    p.drawRect(cellRect(hoverRow(), hoverColumn()).adjusted(1, 1, -2, -2));
  }
}

void ParallelMatrixView::paintLabels(QPainter& p) const {
  const int w = m_model->worldSize();
  p.setPen(theme::dimText());
  for (int c = 0; c <= w; ++c) {
    const QRectF r = cellRect(0, c);
    p.drawText(QRectF(r.left(), 2, r.width(), kTopPx - 4), Qt::AlignCenter,
               m_model->headerData(c, Qt::Horizontal).toString());
  }
  for (int row = 0; row <= w; ++row) {
    const QRectF r = cellRect(row, 0);
    p.drawText(QRectF(2, r.top(), kLeftPx - 8, r.height()), Qt::AlignVCenter | Qt::AlignRight,
               m_model->headerData(row, Qt::Vertical).toString());
  }
}

void ParallelMatrixView::paintLegend(QPainter& p) const {
  const QRect g = gridRect();
  const QRect bar(g.right() + 16, g.top() + 22, 14, std::max(20, g.height() - 30));
  paintScaleBar(p, bar, QRect(bar.left() - 8, g.top() - 4, kLegendPx, 18), tr("bytes"));
  int64_t maxCell = 0;
  for (int64_t b : m_model->matrix().bytes) maxCell = std::max(maxCell, b);
  p.setPen(theme::text());
  for (double f : {0.0, 0.5, 1.0}) {
    const int y = bar.bottom() - int(std::lround(f * bar.height()));
    p.drawLine(bar.right() + 1, y, bar.right() + 5, y);
    p.drawText(QRect(bar.right() + 7, y - 8, kLegendPx - 30, 16), Qt::AlignVCenter | Qt::AlignLeft,
               QString::fromStdString(formatBytes(int64_t(std::llround(f * double(maxCell))))));
  }
}

QString ParallelMatrixView::hoverText(int row, int column) const {
  return m_model->data(m_model->index(row, column), Qt::ToolTipRole).toString();
}

}  // namespace moewb::gui
