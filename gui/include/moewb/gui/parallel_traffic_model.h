// ParallelTrafficModel: an all-to-all traffic matrix (storage::A2aTrafficMatrix) as a table for
// the Parallelism dock's heat map. Rows are source ranks, columns destination ranks; one extra
// column holds each source's row sum ("sent") and one extra row each destination's column sum
// ("received"), the corner the total. The diagonal is what stayed on its rank.
//
// Roles: DisplayRole = bytes as "1.50 MiB" / "12.0 KiB" / "512 B"; kBytesRole = qlonglong bytes;
// kHeatRole = double in [0, 1], the cell's bytes over the largest rank-to-rank cell (sums: over
// the largest sum), for the colour scale; kIsSumRole = bool; ToolTipRole = "rank 0 -> rank 1:
// ..., x% of all bytes". setMatrix resets the model when the size changes, else emits
// dataChanged for every cell. O(W^2) per update. GUI thread only.
#pragma once

#include <QAbstractTableModel>

#include "moewb/storage/parallel_queries.h"

namespace moewb::gui {

class ParallelTrafficModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  static constexpr int kBytesRole = Qt::UserRole + 1;  // qlonglong
  static constexpr int kHeatRole = Qt::UserRole + 2;   // double, 0..1
  static constexpr int kIsSumRole = Qt::UserRole + 3;  // bool

  explicit ParallelTrafficModel(QObject* parent = nullptr);

  // Shows `matrix` (an empty one, worldSize 0, leaves no rows).
  void setMatrix(storage::A2aTrafficMatrix matrix);
  const storage::A2aTrafficMatrix& matrix() const { return m_matrix; }
  int worldSize() const { return m_matrix.worldSize; }
  // Bytes of a cell, sums included (row == worldSize: column sums; column == worldSize: row
  // sums); 0 outside the table.
  int64_t cellBytes(int row, int column) const;
  // Colour-scale value of a cell (see kHeatRole).
  double heat(int row, int column) const;
  bool isSum(int row, int column) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QString toolTip(int row, int column) const;

  storage::A2aTrafficMatrix m_matrix;
  std::vector<int64_t> m_sent;      // [W] row sums
  std::vector<int64_t> m_received;  // [W] column sums
  int64_t m_maxCell = 0;            // largest rank-to-rank cell
  int64_t m_maxSum = 0;             // largest row or column sum
};

}  // namespace moewb::gui
