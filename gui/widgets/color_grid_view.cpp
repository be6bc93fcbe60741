// ColorGridView: hover tracking and the colour-scale bar of the colour grids (see the header).
#include "color_grid_view.h"

#include <QLinearGradient>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <cmath>

#include "moewb/gui/palette.h"
#include "theme.h"

namespace moewb::gui {

void ColorGridView::setFixedScaleMax(double maxValue) {
  const double fixed = maxValue > 0 && std::isfinite(maxValue) ? maxValue : 0.0;
  if (fixed == m_fixedScaleMax) return;
  m_fixedScaleMax = fixed;
  update();
}

QString ColorGridView::scaleTitle(const QString& unit) const {
  return m_fixedScaleMax > 0 ? tr("fixed scale") : unit;
}

QString ColorGridView::aboveScaleNote(double value) const {
  return m_fixedScaleMax > 0 && value > m_fixedScaleMax ? tr(", above scale") : QString();
}

void ColorGridView::mouseMoveEvent(QMouseEvent* event) {
  int row = -1, column = -1;
  if (!cellAt(event->position().toPoint(), &row, &column)) row = column = -1;
  if (row != m_hoverRow || column != m_hoverColumn) {
    m_hoverRow = row;
    m_hoverColumn = column;
    const QString text = row >= 0 ? hoverText(row, column) : QString();
    emit hoverTextChanged(text);
    if (row >= 0) {
      QToolTip::showText(event->globalPosition().toPoint(), text, this);
    } else {
      QToolTip::hideText();
    }
    update();
  }
  QWidget::mouseMoveEvent(event);
}

void ColorGridView::leaveEvent(QEvent* event) {
  m_hoverRow = m_hoverColumn = -1;
  emit hoverTextChanged({});
  update();
  QWidget::leaveEvent(event);
}

void ColorGridView::paintScaleBar(QPainter& p, const QRect& bar, const QRect& titleRect,
                                  const QString& title) {
  QLinearGradient gradient(bar.bottomLeft(), bar.topLeft());
  for (int i = 0; i <= 10; ++i) gradient.setColorAt(i / 10.0, heatColor(i / 10.0));
  p.fillRect(bar, gradient);
  p.setPen(theme::axisLine());
  p.drawRect(bar.adjusted(0, 0, -1, -1));
  p.setPen(theme::dimText());
  p.drawText(titleRect, Qt::AlignLeft | Qt::AlignVCenter, title);
}

}  // namespace moewb::gui
