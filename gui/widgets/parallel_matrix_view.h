// ParallelMatrixView: the all-to-all traffic matrix of a ParallelTrafficModel as a colour grid,
// drawn the way HeatmapView draws expert load (same sequential colour scale, value labels in
// cells wide enough, a legend bar, hover outline and tooltip): source ranks down, destination
// ranks across, bytes in MiB / KiB. The row sums ("sent") and column sums ("received") sit in an
// extra column and row, set off by a gap and drawn as bars on their own scale. Repaints on the
// model's signals; painting is O(W^2). GUI thread only.
#pragma once

#include "color_grid_view.h"

namespace moewb::gui {

class ParallelTrafficModel;

class ParallelMatrixView : public ColorGridView {
  Q_OBJECT

 public:
  explicit ParallelMatrixView(QWidget* parent = nullptr);

  // Shows `model` (not owned; may be null).
  void setModel(ParallelTrafficModel* model);
  // Widget rectangle of cell (row, column) of the model (sums included); empty outside.
  QRectF cellRect(int row, int column) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool cellAt(const QPoint& pos, int* row, int* column) const override;
  QString hoverText(int row, int column) const override;

 private:
  QRect gridRect() const;
  void paintCells(QPainter& p) const;
  void paintLabels(QPainter& p) const;
  void paintLegend(QPainter& p) const;

  static constexpr int kLeftPx = 74;
  static constexpr int kTopPx = 22;
  static constexpr int kLegendPx = 78;
  static constexpr int kBottomPx = 4;
  static constexpr int kSumGapPx = 6;

  ParallelTrafficModel* m_model = nullptr;
};

}  // namespace moewb::gui
