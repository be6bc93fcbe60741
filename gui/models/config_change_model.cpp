// ConfigChangeModel: config_change rows as a Qt table model, and their one-line description.
#include "moewb/gui/config_change_model.h"

#include <QLocale>
#include <iterator>

namespace moewb::gui {

namespace {

bool sameRow(const storage::ConfigChangeRow& a, const storage::ConfigChangeRow& b) {
  return a.step == b.step && a.tsNs == b.tsNs && a.key == b.key && a.oldValue == b.oldValue &&
         a.newValue == b.newValue && a.source == b.source;
}

}  // namespace

QString formatConfigValue(const std::string& tomlValue) {
  const QString text = QString::fromStdString(tomlValue);
  // Only floats are rewritten: TOML floats carry a '.' or an exponent; integers and strings
  // (quoted) stay exactly as stored.
  if (tomlValue.empty() || tomlValue.front() == '"' ||
      tomlValue.find_first_of(".eE") == std::string::npos) {
    return text;
  }
  bool ok = false;
  const double value = QLocale::c().toDouble(text, &ok);
  if (!ok) return text;
  QString shown = QString::number(value, 'g', 15);
  // Keep a float recognisable as one: "2" -> "2.0".
  if (shown.toStdString().find_first_of(".en") == std::string::npos) shown += QStringLiteral(".0");
  return shown;
}

QString describeConfigChange(const storage::ConfigChangeRow& row) {
  return QStringLiteral("step %1: %2 %3 -> %4 (%5)")
      .arg(row.step)
      .arg(QString::fromStdString(row.key), formatConfigValue(row.oldValue),
           formatConfigValue(row.newValue), QString::fromStdString(row.source));
}

ConfigChangeModel::ConfigChangeModel(QObject* parent) : QAbstractTableModel(parent) {}

void ConfigChangeModel::setRows(std::vector<storage::ConfigChangeRow> rows) {
  beginResetModel();
  m_rows = std::move(rows);
  endResetModel();
}

void ConfigChangeModel::appendRows(const std::vector<storage::ConfigChangeRow>& rows) {
  if (rows.empty()) return;
  const int first = int(m_rows.size());
  beginInsertRows({}, first, first + int(rows.size()) - 1);
  m_rows.insert(m_rows.end(), rows.begin(), rows.end());
  endInsertRows();
}

int ConfigChangeModel::syncRows(std::vector<storage::ConfigChangeRow> rows) {
  bool prefix = rows.size() >= m_rows.size();
  for (size_t i = 0; prefix && i < m_rows.size(); ++i) prefix = sameRow(m_rows[i], rows[i]);
  if (!prefix) {
    const int count = int(rows.size());
    setRows(std::move(rows));
    return count;
  }
  if (rows.size() == m_rows.size()) return 0;
  std::vector<storage::ConfigChangeRow> fresh(
      std::make_move_iterator(rows.begin() + ptrdiff_t(m_rows.size())),
      std::make_move_iterator(rows.end()));
  appendRows(fresh);
  return int(fresh.size());
}

int ConfigChangeModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int ConfigChangeModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ConfigChangeModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const storage::ConfigChangeRow& row = m_rows[size_t(index.row())];
  const int column = index.column();
  switch (role) {
    case Qt::DisplayRole:
      switch (column) {
        case kStep:
          return QString::number(row.step);
        case kKey:
          return QString::fromStdString(row.key);
        case kOldValue:
          return formatConfigValue(row.oldValue);
        case kNewValue:
          return formatConfigValue(row.newValue);
        case kSource:
          return QString::fromStdString(row.source);
        default:
          return {};
      }
    case kSortRole:
      switch (column) {
        case kStep:
          return qlonglong(row.step);
        case kKey:
          return QString::fromStdString(row.key);
        case kOldValue:
          return QString::fromStdString(row.oldValue);
        case kNewValue:
          return QString::fromStdString(row.newValue);
        case kSource:
          return QString::fromStdString(row.source);
        default:
          return {};
      }
    case Qt::ToolTipRole:
      return describeConfigChange(row);
    case Qt::TextAlignmentRole:
      return column == kStep || column == kOldValue || column == kNewValue
                 ? int(Qt::AlignRight | Qt::AlignVCenter)
                 : int(Qt::AlignLeft | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant ConfigChangeModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (section) {
    case kStep:
      return tr("Step");
    case kKey:
      return tr("Key");
    case kOldValue:
      return tr("Old");
    case kNewValue:
      return tr("New");
    case kSource:
      return tr("Source");
    default:
      return {};
  }
}

}  // namespace moewb::gui
