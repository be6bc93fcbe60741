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

PhaseSummaryModel::Entry* PhaseSummaryModel::entryFor(
    const std::string& name, const std::string& category, std::vector<Entry>* fresh,
    std::unordered_map<std::string, size_t>* freshRow) {
  if (auto it = m_rowOfName.find(name); it != m_rowOfName.end()) return &m_entries[it->second];
  if (auto jt = freshRow->find(name); jt != freshRow->end()) return &(*fresh)[jt->second];
  freshRow->emplace(name, fresh->size());
  fresh->push_back({name, category, 0, 0, 0});
  return &fresh->back();
}

void PhaseSummaryModel::publish(std::vector<Entry>* fresh) {
  const int oldRows = int(m_entries.size());
  if (oldRows > 0) emit dataChanged(index(0, 0), index(oldRows - 1, kColumnCount - 1));
  if (fresh->empty()) return;
  beginInsertRows({}, oldRows, oldRows + int(fresh->size()) - 1);
  for (Entry& e : *fresh) {
    m_rowOfName.emplace(e.name, m_entries.size());
    m_entries.push_back(std::move(e));
  }
  endInsertRows();
}

void PhaseSummaryModel::addSlices(const std::vector<storage::SliceRow>& rows) {
  if (rows.empty()) return;
  std::vector<Entry> fresh;
  std::unordered_map<std::string, size_t> freshRow;
  for (const storage::SliceRow& r : rows) {
    const int64_t dur = std::max<int64_t>(r.durNs, 0);
    if (r.depth == 0) m_referenceNs += dur;
    Entry* e = entryFor(r.name, r.category, &fresh, &freshRow);
    e->count += 1;
    e->totalNs += dur;
    e->maxNs = std::max(e->maxNs, dur);
  }
  publish(&fresh);
}

void PhaseSummaryModel::addLoadedSlices(const std::vector<LoadedSlice>& rows,
                                        const std::vector<std::string>& names,
                                        const std::vector<bool>& accepted) {
  if (rows.empty()) return;
  // Per name index: the entry, as (fresh?, position), resolved on first use. Positions, not
  // pointers: `fresh` grows.
  std::vector<std::pair<int8_t, size_t>> entryOf(names.size() + 1, {-1, 0});
  std::vector<Entry> fresh;
  std::unordered_map<std::string, size_t> freshRow;
  static const std::string kEmpty;
  auto textOf = [&](int32_t index) -> const std::string& {
    return index >= 0 && size_t(index) < names.size() ? names[size_t(index)] : kEmpty;
  };
  bool any = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!accepted.empty() && !accepted[i]) continue;
    const LoadedSlice& r = rows[i];
    any = true;
    const int64_t dur = std::max<int64_t>(r.durNs, 0);
    if (r.depth == 0) m_referenceNs += dur;
    const size_t key = r.nameIndex >= 0 && size_t(r.nameIndex) < names.size()
                           ? size_t(r.nameIndex) : names.size();
    std::pair<int8_t, size_t>& where = entryOf[key];
    if (where.first < 0) {
      const std::string& name = textOf(r.nameIndex);
      entryFor(name, textOf(r.categoryIndex), &fresh, &freshRow);
      const auto held = m_rowOfName.find(name);
      where = held != m_rowOfName.end() ? std::pair<int8_t, size_t>{0, held->second}
                                        : std::pair<int8_t, size_t>{1, freshRow.at(name)};
    }
    Entry& e = where.first == 1 ? fresh[where.second] : m_entries[where.second];
    e.count += 1;
    e.totalNs += dur;
    e.maxNs = std::max(e.maxNs, dur);
  }
  if (any) publish(&fresh);
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
