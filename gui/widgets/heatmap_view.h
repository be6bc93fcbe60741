// HeatmapView: the expert load of every (layer, expert) as a colour grid, read from an
// ExpertLoadModel. Colour encodes the normalised load (tokens / layer mean: 1.0 = balanced), with
// a legend bar; cells large enough also print their value. Hovering a cell outlines it, shows a
// tooltip and reports the cell's text through hoverTextChanged (ColorGridView). Repaints on the model's signals;
// painting is O(layers * experts). GUI thread only.
#pragma once

#include "color_grid_view.h"

namespace moewb::gui {

class ExpertLoadModel;

class HeatmapView : public ColorGridView {
  Q_OBJECT

 public:
  explicit HeatmapView(QWidget* parent = nullptr);

  // Shows `model` (not owned; may be null).
  void setModel(ExpertLoadModel* model);
  // Upper end of the colour scale in "x layer mean": the fixed maximum when one is set
  // (ColorGridView::setFixedScaleMax), else from the data (>= 1.5).
  double colorScaleMax() const;
  // Description of a cell: layer, expert, value, normalised load, dropped tokens.
  QString cellText(int layer, int expert) const;
  // Widget centre of cell (layer, expert) (for tests).
  QPoint cellCenter(int layer, int expert) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool cellAt(const QPoint& pos, int* layer, int* expert) const override;
  QString hoverText(int layer, int expert) const override { return cellText(layer, expert); }

 private:
  QRect gridRect() const;
  QRectF cellRect(int layer, int expert) const;
  void paintCells(QPainter& p) const;
  void paintLabels(QPainter& p) const;
  void paintLegend(QPainter& p) const;
  QString valueText(int layer, int expert) const;

  static constexpr int kLeftPx = 40;
  static constexpr int kTopPx = 22;
  static constexpr int kLegendPx = 100;
  static constexpr int kBottomPx = 6;

  ExpertLoadModel* m_model = nullptr;
};

}  // namespace moewb::gui
