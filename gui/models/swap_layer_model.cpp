// SwapLayerModel: per-layer swap totals as a sortable table.
#include "moewb/gui/swap_layer_model.h"

#include <QBrush>
#include <QColor>

namespace moewb::gui {

SwapLayerModel::SwapLayerModel(QObject* parent) : QAbstractTableModel(parent) {}

void SwapLayerModel::setRows(std::vector<storage::SwapLayerSummary> rows) {
  beginResetModel();
  m_rows = std::move(rows);
  endResetModel();
}

int SwapLayerModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int SwapLayerModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant SwapLayerModel::rawValue(int row, int column) const {
  const storage::SwapLayerSummary& r = m_rows[size_t(row)];
  switch (column) {
    case kRank: return r.rank;
    case kLayer: return r.layer;
    case kOffloadedGb: return double(r.offloadedBytes) / 1e9;
    case kReloadedGb: return double(r.reloadedBytes) / 1e9;
    case kCopyMs: return r.copyMs;
    case kExposedMs: return r.exposedMs;
    case kLate: return r.lateReloads;
    case kWorstStallMs: return r.worstStallMs;
    default: return {};
  }
}

QVariant SwapLayerModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(m_rows.size()) || index.column() >= kColumnCount) {
    return {};
  }
  const int column = index.column();
  if (role == kSortRole) return rawValue(index.row(), column);
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ForegroundRole) {
    // Red where compute waited: late reloads, and any stall or offload wait.
    const storage::SwapLayerSummary& r = m_rows[size_t(index.row())];
    const bool red = column == kLate ? r.lateReloads > 0
                                     : (column == kWorstStallMs || column == kExposedMs) &&
                                           r.exposedMs > 0;
    if (red) return QBrush(QColor::fromRgb(0xc0392b));
  }
  if (role != Qt::DisplayRole) return {};
  const QVariant raw = rawValue(index.row(), column);
  switch (column) {
    case kOffloadedGb:
    case kReloadedGb: return QString::number(raw.toDouble(), 'f', 3);
    case kCopyMs:
    case kExposedMs:
    case kWorstStallMs: return QString::number(raw.toDouble(), 'f', 2);
    default: return raw.toString();
  }
}

QVariant SwapLayerModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kExposedMs:
        return tr("Exposed = reload stalls + offload waits: compute waited for a reload to "
                  "arrive or for an offload to free its memory");
      case kLate:
        return tr("Reloads that arrived after their consumer was ready (offload waits are in "
                  "Exposed ms, not counted here)");
      case kWorstStallMs:
        return tr("The longest single wait: a reload stall or an offload wait");
      case kCopyMs: return tr("Sum of copy durations, both directions");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case kRank: return tr("Rank");
    case kLayer: return tr("Layer");
    case kOffloadedGb: return tr("Offloaded GB");
    case kReloadedGb: return tr("Reloaded GB");
    case kCopyMs: return tr("Copy ms");
    case kExposedMs: return tr("Exposed ms");
    case kLate: return tr("Late");
    case kWorstStallMs: return tr("Worst stall ms");
    default: return {};
  }
}

}  // namespace moewb::gui
