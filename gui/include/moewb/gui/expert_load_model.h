// ExpertLoadModel: routed tokens per (layer, expert) as a table model for the expert heat map.
// Rows are decoder layers, columns are experts.
//
// The model keeps, per step, a [layers, experts] grid of tokens summed over ranks, plus the
// running per-cell maximum and sum over steps. A cell shows, depending on the mode, the tokens of
// the chosen step, the maximum over steps or the mean over steps (sum / number of steps held).
// Roles: DisplayRole = that value (qlonglong; double in mean mode), kNormalizedLoadRole = value /
// mean of its row (1.0 = perfectly balanced layer), kDroppedRole = tokens dropped (step mode, 0
// otherwise). appendRows grows the grid (rowsInserted/columnsInserted) and refreshes values;
// appending rows of new steps costs O(rows + layers * experts).
// GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "moewb/storage/rows.h"

namespace moewb::gui {

class ExpertLoadModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum class Mode { kStep, kMaxOverSteps, kMeanOverSteps };
  // One step's cells, [layers * experts] layer-major: tokens and dropped summed over ranks, the
  // router bias summed over the rows read (biasRows of them; the mean is biasSum / biasRows).
  struct Grid {
    std::vector<int64_t> tokens;   // [layers * experts]
    std::vector<int64_t> dropped;  // [layers * experts]
    std::vector<double> biasSum;   // [layers * experts]
    std::vector<int32_t> biasRows; // [layers * experts]
  };
  static constexpr int kNormalizedLoadRole = Qt::UserRole + 1;  // double
  static constexpr int kDroppedRole = Qt::UserRole + 2;         // qlonglong

  explicit ExpertLoadModel(QObject* parent = nullptr);

  // Replaces all data (model reset). The chosen step becomes the last step.
  void setRows(const std::vector<storage::ExpertLoadRow>& rows);
  // Adds rows (new steps, or more ranks of known steps). When the chosen step was the last one it
  // follows to the new last step (live view).
  void appendRows(const std::vector<storage::ExpertLoadRow>& rows);

  // Chooses what the cells show; emits dataChanged for every cell when it changes.
  void setMode(Mode mode);
  Mode mode() const { return m_mode; }
  // Chooses the step shown in kStep mode (a step without rows shows zeros).
  void setStep(int64_t step);
  int64_t step() const { return m_step; }
  // Steps that have rows, ascending. O(steps).
  std::vector<int64_t> steps() const;
  // The first and last step that have rows; {0, 0} with hasSteps() false when none. O(1).
  std::pair<int64_t, int64_t> stepRange() const;
  bool hasSteps() const { return !m_grids.empty(); }
  // Every step's grid, by step (for views over time, e.g. ExpertTimeModel). O(1).
  const std::map<int64_t, Grid>& grids() const { return m_grids; }

  // The value and normalised load of a cell in the current mode (0 outside the grid).
  double value(int layer, int expert) const;
  double normalizedLoad(int layer, int expert) const;
  // Largest normalised load of any cell in the current mode (>= 1 when any tokens exist).
  double maxNormalizedLoad() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 signals:
  // The set of steps or the chosen step changed (for step sliders).
  void stepsChanged();

 private:
  void resize(int layers, int experts);
  void addToGrid(const storage::ExpertLoadRow& row);
  // The same into `grid`, which must be m_grids[row.step].
  void addToGrid(const storage::ExpertLoadRow& row, Grid& grid);
  void recomputeAggregates();
  void emitAllChanged();
  double rowMean(int layer) const;

  int m_layers = 0;
  int m_experts = 0;
  std::map<int64_t, Grid> m_grids;  // by step
  std::vector<int64_t> m_max;       // [layers * experts], max over steps
  std::vector<double> m_sum;        // [layers * experts], sum over steps
  Mode m_mode = Mode::kStep;
  int64_t m_step = -1;
};

}  // namespace moewb::gui
