// PhaseSummaryModel: incremental per-name totals of slice time.
#include "moewb/gui/phase_summary_model.h"

#include <algorithm>

#include "moewb/base/units.h"

namespace moewb::gui {

PhaseSummaryModel::PhaseSummaryModel(QObject* parent) : QAbstractTableModel(parent) {}

void PhaseSummaryModel::clear() {
  beginResetModel();
  m_entries.clear();
  m_rowOfName.clear();
  m_referenceNs = 0;
  endResetModel();
}

void PhaseSummaryModel::addSlices(const std::vector<storage::SliceRow>& rows) {
  if (rows.empty()) return;
  std::vector<Entry> fresh;
  std::unordered_map<std::string, size_t> freshRow;
  for (const storage::SliceRow& r : rows) {
    const int64_t dur = std::max<int64_t>(r.durNs, 0);
    if (r.depth == 0) m_referenceNs += dur;
    Entry* e = nullptr;
    if (auto it = m_rowOfName.find(r.name); it != m_rowOfName.end()) {
      e = &m_entries[it->second];
    } else if (auto jt = freshRow.find(r.name); jt != freshRow.end()) {
      e = &fresh[jt->second];
    } else {
      freshRow.emplace(r.name, fresh.size());
      fresh.push_back({r.name, r.category, 0, 0, 0});
      e = &fresh.back();
    }
    e->count += 1;
    e->totalNs += dur;
    e->maxNs = std::max(e->maxNs, dur);
  }
  const int oldRows = int(m_entries.size());
  if (oldRows > 0) emit dataChanged(index(0, 0), index(oldRows - 1, kColumnCount - 1));
  if (!fresh.empty()) {
    beginInsertRows({}, oldRows, oldRows + int(fresh.size()) - 1);
    for (Entry& e : fresh) {
      m_rowOfName.emplace(e.name, m_entries.size());
      m_entries.push_back(std::move(e));
    }
    endInsertRows();
  }
}

double PhaseSummaryModel::share(int row) const {
  if (row < 0 || row >= int(m_entries.size()) || m_referenceNs <= 0) return 0;
  return double(m_entries[size_t(row)].totalNs) / double(m_referenceNs);
}

int PhaseSummaryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_entries.size());
}

int PhaseSummaryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant PhaseSummaryModel::rawValue(int row, int column) const {
  const Entry& e = m_entries[size_t(row)];
  switch (column) {
    case kName:
      return QString::fromStdString(e.name);
    case kCount:
      return qlonglong(e.count);
    case kTotal:
      return qlonglong(e.totalNs);
    case kMean:
      return e.count ? double(e.totalNs) / double(e.count) : 0.0;
    case kShare:
      return share(row);
    default:
      return {};
  }
}

QString PhaseSummaryModel::text(int row, int column) const {
  const Entry& e = m_entries[size_t(row)];
  switch (column) {
    case kName:
      return QString::fromStdString(e.name);
    case kCount:
      return QString::number(e.count);
    case kTotal:
      return QString::fromStdString(formatDurationNs(e.totalNs));
    case kMean:
      return QString::fromStdString(formatDurationNs(e.count ? e.totalNs / e.count : 0));
    case kShare:
      return QStringLiteral("%1 %").arg(share(row) * 100.0, 0, 'f', 1);
    default:
      return {};
  }
}

QVariant PhaseSummaryModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  switch (role) {
    case Qt::DisplayRole:
      return text(index.row(), index.column());
    case kSortRole:
      return rawValue(index.row(), index.column());
    case Qt::TextAlignmentRole:
      return index.column() == kName ? int(Qt::AlignLeft | Qt::AlignVCenter)
                                     : int(Qt::AlignRight | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant PhaseSummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (section) {
    case kName:
      return tr("Name");
    case kCount:
      return tr("Count");
    case kTotal:
      return tr("Total");
    case kMean:
      return tr("Mean");
    case kShare:
      return tr("Share of step");
    default:
      return {};
  }
}

}  // namespace moewb::gui
