// ColorGridView: what the colour-grid widgets (HeatmapView, ParallelMatrixView) share: the
// hovered cell (tracked on mouse moves, outlined by the subclass's painting, shown as a tooltip
// and reported through hoverTextChanged) and the vertical bar of the sequential colour scale.
// Subclasses say where the cells are (cellAt) and what a hovered cell reads (hoverText).
// GUI thread only.
#pragma once

#include <QWidget>

class QPainter;

namespace moewb::gui {

class ColorGridView : public QWidget {
  Q_OBJECT

 public:
  using QWidget::QWidget;

 signals:
  void hoverTextChanged(const QString& text);

 protected:
  // The cell under `pos`; false outside every cell.
  virtual bool cellAt(const QPoint& pos, int* row, int* column) const = 0;
  // The text of cell (row, column) for its tooltip and hoverTextChanged.
  virtual QString hoverText(int row, int column) const = 0;
  // The hovered cell, or -1 / -1.
  int hoverRow() const { return m_hoverRow; }
  int hoverColumn() const { return m_hoverColumn; }

  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

  // Draws the colour scale as the bar `bar` (heatColor 0 at the bottom to 1 at the top) with its
  // outline, and `title` left-aligned in `titleRect` above it.
  static void paintScaleBar(QPainter& p, const QRect& bar, const QRect& titleRect,
                            const QString& title);

 private:
  int m_hoverRow = -1;
  int m_hoverColumn = -1;
};

}  // namespace moewb::gui
