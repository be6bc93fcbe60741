// ColorGridView: what the colour-grid widgets (HeatmapView, ParallelMatrixView) share: the
// hovered cell (tracked on mouse moves, outlined by the subclass's painting, shown as a tooltip
// and reported through hoverTextChanged) and the vertical bar of the sequential colour scale.
// Subclasses say where the cells are (cellAt) and what a hovered cell reads (hoverText).
// The top of the colour scale is the data's own maximum (auto) unless a fixed maximum is set
// (setFixedScaleMax), so that two runs' grids compare; values above it draw in the top colour.
// GUI thread only.
#pragma once

#include <QWidget>

class QPainter;

namespace moewb::gui {

class ColorGridView : public QWidget {
  Q_OBJECT

 public:
  using QWidget::QWidget;

  // Fixes the top of the colour scale at `maxValue` (in the grid's unit, e.g. "x layer mean");
  // 0 (or less, or NaN) = auto: the subclass's data maximum. Repaints.
  void setFixedScaleMax(double maxValue);
  // The fixed maximum, or 0 when the scale is automatic.
  double fixedScaleMax() const { return m_fixedScaleMax; }
  // The legend's title: `unit` (e.g. "x layer mean") in auto mode, "fixed scale" when fixed
  // (the legend's ticks carry the unit and the maximum in use).
  QString scaleTitle(const QString& unit) const;
  // ", above scale" when `value` is above the fixed maximum, else empty (hover text suffix).
  QString aboveScaleNote(double value) const;

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

  // The top of the colour scale: fixedScaleMax() when set, else `autoMax`.
  double scaleMaxOr(double autoMax) const {
    return m_fixedScaleMax > 0 ? m_fixedScaleMax : autoMax;
  }

  // Draws the colour scale as the bar `bar` (heatColor 0 at the bottom to 1 at the top) with its
  // outline, and `title` left-aligned in `titleRect` above it.
  static void paintScaleBar(QPainter& p, const QRect& bar, const QRect& titleRect,
                            const QString& title);

 private:
  int m_hoverRow = -1;
  int m_hoverColumn = -1;
  double m_fixedScaleMax = 0;  // 0 = auto
};

}  // namespace moewb::gui
