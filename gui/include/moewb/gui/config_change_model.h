// ConfigChangeModel: the live config changes of a trace (its config_change rows: a setting
// changed while the run went on, effective from a step) as a table of step, key, old value, new
// value and source ("gui", "cli", "tuner").
//
// DisplayRole shows values for people (formatConfigValue: "0.003" rather than the stored
// "0.0030000000000000001"); ToolTipRole gives describeConfigChange's line; kSortRole gives the
// raw stored text (qlonglong for the step). The trace's table only grows (rows ordered by step
// and time), so syncRows appends what is new with rowsInserted and resets only when the rows held
// are no longer a prefix (another file). syncRows costs O(rows); the table is small (one row per
// changed key). GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <string>
#include <vector>

#include "moewb/storage/rows.h"

namespace moewb::gui {

// A stored config value (TOML text) shown to people: floats with up to 15 significant digits
// ("0.0030000000000000001" -> "0.003", "1.0000000000000001e-08" -> "1e-08"), anything else as
// stored.
QString formatConfigValue(const std::string& tomlValue);

// One line describing a change: "step 12: optim.lr 0.003 -> 0.001 (gui)".
QString describeConfigChange(const storage::ConfigChangeRow& row);

class ConfigChangeModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kStep, kKey, kOldValue, kNewValue, kSource, kColumnCount };
  // Raw value of a cell: qlonglong step, QString stored text otherwise.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit ConfigChangeModel(QObject* parent = nullptr);

  // Replaces all rows (model reset).
  void setRows(std::vector<storage::ConfigChangeRow> rows);
  // Appends rows at the end (rowsInserted); no-op for an empty vector.
  void appendRows(const std::vector<storage::ConfigChangeRow>& rows);
  // Makes the model hold `rows` (the whole table as read now): appends the rows after the ones
  // held when those are a prefix of `rows`, else resets. Returns the number of rows appended
  // (all of them after a reset); 0 when nothing changed.
  int syncRows(std::vector<storage::ConfigChangeRow> rows);
  const std::vector<storage::ConfigChangeRow>& rows() const { return m_rows; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  std::vector<storage::ConfigChangeRow> m_rows;
};

}  // namespace moewb::gui
