// StepBreakdownView: the per-step time breakdown as a stacked bar chart (the "Step breakdown"
// dock): one bar per step, split into the TimeCategory parts of step_breakdown.h, bottom to top
// in category order, with a legend of the categories present and the source ("from GPU kernels"
// or "from host phases"). A run with more steps than the plot has pixel columns is drawn one bar
// per column with the mean parts of its steps and a tick at its slowest step's duration
// (columnsOf, computed once per data change, resize or step window, never per paint), so painting
// costs O(pixels). Hover shows the step's (or column's) parts in ms and % (hoverText); a click
// emits stepClicked with the step (a column's slowest). A parallel trace's data (shownBreakdown)
// draws per step the slowest rank's bar, whose hover names that rank, its step time, the median
// rank's and the gap, or one chosen rank's bars; the legend line says which. setStepWindow
// limits the x axis to a step range (follow mode). The y axis leaves out the few far-out steps
// robustRange picks (chart_range.h: a warm-up first step of 2.7 s among steps of 345 ms): their
// bars run to the top edge with a break mark and their true duration as a label; the hover gives
// every part in full, and the context menu's "Full range" shows every bar to scale. GUI thread
// only.
#pragma once

#include <QWidget>
#include <optional>
#include <vector>

#include "moewb/gui/chart_axis.h"
#include "moewb/gui/chart_range.h"
#include "moewb/gui/step_breakdown.h"

class QAction;

namespace moewb::gui {

class StepBreakdownView : public QWidget {
  Q_OBJECT

 public:
  explicit StepBreakdownView(QWidget* parent = nullptr);

  // Shows `data` (a copy is kept).
  void setData(const StepBreakdownSet& data);
  const StepBreakdownSet& data() const { return m_data; }
  // Shows only steps in [first, last] (nullopt: every step).
  void setStepWindow(std::optional<std::pair<int64_t, int64_t>> steps);
  std::optional<std::pair<int64_t, int64_t>> stepWindow() const { return m_window; }
  // Text shown in the plot while there are no steps ("reading..." while the model reads).
  void setEmptyText(const QString& text);
  // The bars as laid out now (plot pixels from the plot's left edge).
  const std::vector<BreakdownColumn>& columns() const { return m_columns; }
  // The plot area in widget coordinates.
  QRectF plotRect() const;
  // Index into columns() of the bar under widget point `pos`, or -1.
  int columnAt(const QPointF& pos) const;
  // The hover text of the bar under `pos`: step (or step range), duration and each part in ms
  // and %; "" when no bar is there.
  QString hoverText(const QPointF& pos) const;
  // The legend line ("from GPU kernels (...)" / "from host phases (...)"), naming the ranks
  // shown: rank 0 (one rank), "per step the slowest of N ranks" or "rank R of N".
  QString sourceText() const;
  // The hover line of a slowest-rank step `b` (slowestPerStep): its rank and duration, the
  // median rank's and the gap in ms and % of the median.
  static QString rankText(const StepBreakdown& b);
  // Whether the y axis covers every step (true) or leaves out the far-out ones (false, the
  // default); the context menu's checkable "Full range" action sets it.
  void setFullRange(bool on);
  bool fullRange() const { return m_fullRange; }
  QAction* fullRangeAction() const { return m_fullRangeAction; }
  // The y axis (ms) as laid out now.
  const AxisTicks& yAxis() const { return m_y; }
  // Indices into columns() of the bars that reach above the y axis (their slowest step or their
  // stack), in x order; empty in full range.
  const std::vector<size_t>& clippedColumns() const { return m_clipped; }

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  // The user clicked the bar of `step` (for a column of several steps: its slowest).
  void stepClicked(qint64 step);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void relayout();
  void paintLegend(QPainter& p) const;
  void paintAxes(QPainter& p, const QRectF& plot) const;
  void paintBars(QPainter& p, const QRectF& plot) const;
  // The break marks and true durations of the bars above the axis.
  void paintClipped(QPainter& p, const QRectF& plot) const;
  // The y axis's top in ns, and the clipped columns, for the columns laid out now.
  void fitYAxis(size_t first, size_t last);
  // The categories with any time in the data, in stacking order.
  std::vector<TimeCategory> presentCategories() const;

  StepBreakdownSet m_data;
  std::optional<std::pair<int64_t, int64_t>> m_window;
  std::vector<BreakdownColumn> m_columns;
  AxisTicks m_y;  // ms
  bool m_fullRange = false;
  QAction* m_fullRangeAction = nullptr;
  std::vector<size_t> m_clipped;  // indices into m_columns of the bars above the axis
  QString m_emptyText;
  int m_hover = -1;  // hovered column
};

}  // namespace moewb::gui
