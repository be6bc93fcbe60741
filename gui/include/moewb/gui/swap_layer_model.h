// SwapLayerModel: the Swap dock's per-layer table (storage::TraceReader::swapLayerSummary): per
// (rank, layer) the bytes offloaded and reloaded, the copy time, the exposed time (reload stalls +
// offload waits), the late reloads (reloads only) and the worst stall of either direction. Sort
// with a QSortFilterProxyModel on kSortRole (raw numbers; display text is formatted). setRows
// resets the model. GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "moewb/storage/swap_queries.h"

namespace moewb::gui {

class SwapLayerModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kRank, kLayer, kOffloadedGb, kReloadedGb, kCopyMs, kExposedMs, kLate, kWorstStallMs,
    kColumnCount
  };
  // Raw value of a cell: int rank/layer/late count, double GB (1e9 bytes) and ms.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit SwapLayerModel(QObject* parent = nullptr);

  // Replaces the rows (model reset).
  void setRows(std::vector<storage::SwapLayerSummary> rows);
  const std::vector<storage::SwapLayerSummary>& rows() const { return m_rows; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant rawValue(int row, int column) const;

  std::vector<storage::SwapLayerSummary> m_rows;
};

}  // namespace moewb::gui
