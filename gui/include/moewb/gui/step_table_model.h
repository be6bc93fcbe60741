// StepTableModel: the committed steps of a run as a table (one row per step row of the trace:
// step, rank, loss, aux loss, tokens/s, duration, peak memory; a parallel run has a row per rank
// and step, and the main window hides the Rank column for one-rank traces).
//
// DisplayRole gives formatted text ("12.3k", "4.56 ms", "1.50 MiB"); kSortRole gives the raw
// number for sorting and charts. appendRows adds rows at the end with the usual insert signals,
// which is how a live run grows the table. Row access is O(1). GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "moewb/storage/rows.h"

namespace moewb::gui {

class StepTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kStep, kRank, kLoss, kAuxLoss, kTokensPerSecond, kDuration, kPeakMemory, kColumnCount };
  // Raw value of a cell: qlonglong for step/rank/duration/bytes, double otherwise.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit StepTableModel(QObject* parent = nullptr);

  // Replaces all rows (model reset).
  void setRows(std::vector<storage::StepRow> rows);
  // Appends rows at the end (rowsInserted); no-op for an empty vector.
  void appendRows(const std::vector<storage::StepRow>& rows);
  const std::vector<storage::StepRow>& rows() const { return m_rows; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant rawValue(const storage::StepRow& row, int column) const;
  QString text(const storage::StepRow& row, int column) const;

  std::vector<storage::StepRow> m_rows;
};

}  // namespace moewb::gui
