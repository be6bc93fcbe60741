// ParallelPanel: the Parallelism dock's content for a ParallelModel. From top to bottom:
// selectors for step (or all), layer (or all) and a2a phase (or all); a summary line (ranks,
// EP groups, bytes that crossed ranks); the traffic matrix (ParallelMatrixView) with a hover
// line; the table of routed rows and expert load per rank; and the collectives of the selected
// step sorted by wait. Selectors follow the model (a live run's new steps extend the step list).
// A click on a collective row emits collectiveActivated; showCollective selects the row of a
// collective picked elsewhere (the timeline) without emitting. GUI thread only.
#pragma once

#include <QWidget>

#include "moewb/storage/parallel_queries.h"

class QComboBox;
class QLabel;
class QModelIndex;
class QSortFilterProxyModel;
class QTableView;

namespace moewb::gui {

class ParallelMatrixView;
class ParallelModel;

class ParallelPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ParallelPanel(QWidget* parent = nullptr);

  // Shows `model` (not owned).
  void setModel(ParallelModel* model);
  ParallelMatrixView* matrixView() const { return m_matrix; }
  QTableView* rankTable() const { return m_rankTable; }
  QTableView* collectiveTable() const { return m_collectiveTable; }
  QComboBox* stepSelector() const { return m_step; }
  QComboBox* layerSelector() const { return m_layer; }
  QComboBox* phaseSelector() const { return m_phase; }
  QString summaryText() const;

 public slots:
  // Switches to `match`'s step when the collectives table shows another one, then selects its
  // row (none when it is not there).
  void showCollective(const storage::MatchedCollective& match);

 signals:
  // The user picked a collective in the table.
  void collectiveActivated(const storage::MatchedCollective& match);
  // A selection change failed to read the file.
  void message(const QString& text);

 private:
  void syncControls();
  void onCollectiveClicked(const QModelIndex& index);

  ParallelModel* m_model = nullptr;
  QComboBox* m_step = nullptr;
  QComboBox* m_layer = nullptr;
  QComboBox* m_phase = nullptr;
  QLabel* m_summary = nullptr;
  QLabel* m_hover = nullptr;
  QLabel* m_collectiveTitle = nullptr;
  ParallelMatrixView* m_matrix = nullptr;
  QTableView* m_rankTable = nullptr;
  QTableView* m_collectiveTable = nullptr;
  QSortFilterProxyModel* m_collectiveProxy = nullptr;
  bool m_syncing = false;
};

}  // namespace moewb::gui
