// StepTableModel: step rows as a Qt table model.
#include "moewb/gui/step_table_model.h"

#include "moewb/base/units.h"

namespace moewb::gui {

StepTableModel::StepTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void StepTableModel::setRows(std::vector<storage::StepRow> rows) {
  beginResetModel();
  m_rows = std::move(rows);
  endResetModel();
}

void StepTableModel::appendRows(const std::vector<storage::StepRow>& rows) {
  if (rows.empty()) return;
  const int first = int(m_rows.size());
  beginInsertRows({}, first, first + int(rows.size()) - 1);
  m_rows.insert(m_rows.end(), rows.begin(), rows.end());
  endInsertRows();
}

int StepTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int StepTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant StepTableModel::rawValue(const storage::StepRow& row, int column) const {
  switch (column) {
    case kStep:
      return qlonglong(row.step);
    case kRank:
      return qlonglong(row.rank);
    case kLoss:
      return row.loss;
    case kAuxLoss:
      return row.auxLoss;
    case kTokensPerSecond:
      return row.tokensPerSecond;
    case kDuration:
      return qlonglong(row.endNs - row.startNs);
    case kPeakMemory:
      return qlonglong(row.peakBytes);
    default:
      return {};
  }
}

QString StepTableModel::text(const storage::StepRow& row, int column) const {
  switch (column) {
    case kStep:
      return QString::number(row.step);
    case kRank:
      return QString::number(row.rank);
    case kLoss:
      return QString::number(row.loss, 'f', 4);
    case kAuxLoss:
      return QString::number(row.auxLoss, 'f', 4);
    case kTokensPerSecond:
      return QString::fromStdString(formatCount(row.tokensPerSecond));
    case kDuration:
      return QString::fromStdString(formatDurationNs(row.endNs - row.startNs));
    case kPeakMemory:
      return QString::fromStdString(formatBytes(row.peakBytes));
    default:
      return {};
  }
}

QVariant StepTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const storage::StepRow& row = m_rows[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return text(row, index.column());
    case kSortRole:
      return rawValue(row, index.column());
    case Qt::TextAlignmentRole:
      return int(Qt::AlignRight | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant StepTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (section) {
    case kStep:
      return tr("Step");
    case kRank:
      return tr("Rank");
    case kLoss:
      return tr("Loss");
    case kAuxLoss:
      return tr("Aux loss");
    case kTokensPerSecond:
      return tr("Tokens/s");
    case kDuration:
      return tr("Duration");
    case kPeakMemory:
      return tr("Peak memory");
    default:
      return {};
  }
}

}  // namespace moewb::gui
