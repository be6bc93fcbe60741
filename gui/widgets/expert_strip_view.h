// ExpertStripView: one MoE layer's expert load over time, read from an ExpertTimeModel: a heat
// strip with experts on the y axis and steps on the x axis (at most one column per pixel; a
// decimated column shows the maximum over its steps, see expert_time_model.h), coloured like the
// heat map (tokens / that step's expert mean, "x layer mean", same colour scale and legend), and
// below it a small line chart of the layer's imbalance (max / mean) and drop rate per column.
// Hovering a cell reports step(s), expert, tokens, dropped and bias (tooltip and
// hoverTextChanged); a click on a cell emits cellClicked with the covered step where that expert
// had the most tokens. A fixed colour scale (setFixedScaleMax) replaces the data's maximum.
// The step chosen elsewhere (setMarkedStep) is drawn as a vertical line.
// Painting is O(steps * experts) when the data or the width changed, O(columns * experts)
// otherwise. GUI thread only.
#pragma once

#include <vector>

#include "color_grid_view.h"
#include "moewb/gui/expert_time_model.h"

namespace moewb::gui {

class ExpertStripView : public ColorGridView {
  Q_OBJECT

 public:
  explicit ExpertStripView(QWidget* parent = nullptr);

  // Shows `model` (not owned; may be null).
  void setModel(ExpertTimeModel* model);
  // Draws a line at `step` (-1 = none).
  void setMarkedStep(qint64 step);
  // The strip's cell area in widget pixels (experts top to bottom, steps left to right).
  QRect stripRect() const;
  // The columns painted last (rebuilt when the data or the width changes).
  const std::vector<ExpertTimeModel::Column>& columns() const;
  // Widget centre of the cell of column `column`, expert `expert` (for tests and tooltips).
  QPoint cellCenter(int column, int expert) const;
  // Upper end of the colour scale in "x layer mean": the fixed maximum when one is set
  // (ColorGridView::setFixedScaleMax), else the model's colorScaleMax().
  double colorScaleMax() const;
  // Description of a cell: step(s), expert, tokens, dropped, bias ("above scale" when the
  // cell's load is above a fixed maximum).
  QString cellText(int expert, int column) const;
  // The step of column `column` where `expert` had the most tokens (the first on ties).
  qint64 hotStep(int column, int expert) const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  // A cell was clicked: the step chosen as hotStep, and the expert.
  void cellClicked(qint64 step, int expert);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool cellAt(const QPoint& pos, int* expert, int* column) const override;
  QString hoverText(int expert, int column) const override { return cellText(expert, column); }

 private:
  QRect seriesRect() const;
  QRectF cellRect(int column, int expert) const;
  void ensureColumns() const;
  void paintCells(QPainter& p) const;
  void paintLabels(QPainter& p) const;
  void paintSeries(QPainter& p) const;
  void paintLegend(QPainter& p) const;

  static constexpr int kLeftPx = 40;
  static constexpr int kTopPx = 6;
  static constexpr int kLegendPx = 100;
  static constexpr int kAxisPx = 16;    // step labels under the strip
  static constexpr int kSeriesPx = 46;  // imbalance / drop-rate chart

  ExpertTimeModel* m_model = nullptr;
  qint64 m_markedStep = -1;
  mutable std::vector<ExpertTimeModel::Column> m_columns;
  mutable int m_columnsWidth = -1;  // strip width the columns were built for; -1 = stale
};

}  // namespace moewb::gui
