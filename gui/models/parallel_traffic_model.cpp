// ParallelTrafficModel: a traffic matrix plus its row and column sums as a table model.
#include "moewb/gui/parallel_traffic_model.h"

#include <algorithm>

#include "moewb/base/units.h"

namespace moewb::gui {

ParallelTrafficModel::ParallelTrafficModel(QObject* parent) : QAbstractTableModel(parent) {}

void ParallelTrafficModel::setMatrix(storage::A2aTrafficMatrix matrix) {
  const bool resized = matrix.worldSize != m_matrix.worldSize;
  if (resized) beginResetModel();
  m_matrix = std::move(matrix);
  m_sent = m_matrix.sentBySource();
  m_received = m_matrix.receivedByDest();
  m_maxCell = 0;
  for (int64_t b : m_matrix.bytes) m_maxCell = std::max(m_maxCell, b);
  m_maxSum = 0;
  for (int64_t b : m_sent) m_maxSum = std::max(m_maxSum, b);
  for (int64_t b : m_received) m_maxSum = std::max(m_maxSum, b);
  if (resized) {
    endResetModel();
  } else if (rowCount() > 0) {
    emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1));
  }
}

int ParallelTrafficModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || m_matrix.worldSize == 0 ? 0 : m_matrix.worldSize + 1;
}

int ParallelTrafficModel::columnCount(const QModelIndex& parent) const {
  return rowCount(parent);
}

bool ParallelTrafficModel::isSum(int row, int column) const {
  return row == m_matrix.worldSize || column == m_matrix.worldSize;
}

int64_t ParallelTrafficModel::cellBytes(int row, int column) const {
  const int w = m_matrix.worldSize;
  if (row < 0 || column < 0 || row > w || column > w) return 0;
  if (row == w && column == w) return m_matrix.totalBytes();
  if (row == w) return m_received[size_t(column)];
  if (column == w) return m_sent[size_t(row)];
  return m_matrix.at(row, column);
}

double ParallelTrafficModel::heat(int row, int column) const {
  if (row == m_matrix.worldSize && column == m_matrix.worldSize) return 0.0;
  const int64_t scale = isSum(row, column) ? m_maxSum : m_maxCell;
  return scale > 0 ? double(cellBytes(row, column)) / double(scale) : 0.0;
}

QString ParallelTrafficModel::toolTip(int row, int column) const {
  const int w = m_matrix.worldSize;
  const int64_t total = m_matrix.totalBytes();
  const int64_t bytes = cellBytes(row, column);
  const QString amount = QString::fromStdString(formatBytes(bytes));
  const QString share =
      total > 0 ? tr("%1% of all bytes").arg(100.0 * double(bytes) / double(total), 0, 'f', 1)
                : tr("no traffic");
  if (row == w && column == w) return tr("all ranks: %1").arg(amount);
  if (row == w) return tr("rank %1 received %2 (%3)").arg(column).arg(amount, share);
  if (column == w) return tr("rank %1 sent %2 (%3)").arg(row).arg(amount, share);
  if (row == column) {
    return tr("rank %1 kept %2 on its own experts (%3)").arg(row).arg(amount, share);
  }
  return tr("rank %1 -> rank %2: %3 (%4)").arg(row).arg(column).arg(amount, share);
}

QVariant ParallelTrafficModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) return {};
  const int row = index.row(), column = index.column();
  switch (role) {
    case Qt::DisplayRole:
      return QString::fromStdString(formatBytes(cellBytes(row, column)));
    case kBytesRole:
      return qlonglong(cellBytes(row, column));
    case kHeatRole:
      return heat(row, column);
    case kIsSumRole:
      return isSum(row, column);
    case Qt::ToolTipRole:
      return toolTip(row, column);
    case Qt::TextAlignmentRole:
      return int(Qt::AlignCenter);
    default:
      return {};
  }
}

QVariant ParallelTrafficModel::headerData(int section, Qt::Orientation orientation,
                                          int role) const {
  if (role != Qt::DisplayRole || section < 0 || section > m_matrix.worldSize) return {};
  if (section == m_matrix.worldSize) {
    return orientation == Qt::Horizontal ? tr("sent") : tr("received");
  }
  return orientation == Qt::Horizontal ? tr("to %1").arg(section) : tr("from %1").arg(section);
}

}  // namespace moewb::gui
