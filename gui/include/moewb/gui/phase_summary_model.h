// PhaseSummaryModel: per slice name, how often it ran and how much time it took (name, count,
// total, mean, share), aggregated incrementally from the slices the document loads.
//
// Share is the name's total divided by the total time of depth-0 slices (the steps in engine
// traces), so "experts.bwd 31%" reads as "31% of step time"; names at depth 0 show 100%.
// Rows keep first-seen order (new names are appended with rowsInserted; sort with a proxy on
// kSortRole). addSlices costs O(k) hash lookups for k rows. GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <string>
#include <unordered_map>
#include <vector>

#include "moewb/gui/timeline_data.h"
#include "moewb/storage/rows.h"

namespace moewb::gui {

class PhaseSummaryModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kName, kCount, kTotal, kMean, kShare, kColumnCount };
  // Raw value of a cell: QString name, qlonglong count/total ns, double mean ns / share (0..1).
  static constexpr int kSortRole = Qt::UserRole + 1;

  struct Entry {
    std::string name;
    std::string category;
    int64_t count = 0;
    int64_t totalNs = 0;
    int64_t maxNs = 0;
  };

  explicit PhaseSummaryModel(QObject* parent = nullptr);

  // Removes every entry (model reset).
  void clear();
  // Adds slices to the totals; new names become new rows at the end.
  void addSlices(const std::vector<storage::SliceRow>& rows);
  // The same for rows of a load whose names and categories are indexes into `names` (see
  // LoadedSlice); only rows i with accepted[i] count (all when `accepted` is empty). An index
  // outside `names` reads as "". O(k) with one hash lookup per distinct name, not per row.
  void addLoadedSlices(const std::vector<LoadedSlice>& rows, const std::vector<std::string>& names,
                       const std::vector<bool>& accepted = {});
  const std::vector<Entry>& entries() const { return m_entries; }
  // Total time of depth-0 slices, ns (the denominator of the share).
  int64_t referenceNs() const { return m_referenceNs; }
  // Share of the entry in row `row` (0..1; 0 when there are no depth-0 slices).
  double share(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  // The entry of `name` (new ones go to `fresh`, indexed by `freshRow`).
  Entry* entryFor(const std::string& name, const std::string& category, std::vector<Entry>* fresh,
                  std::unordered_map<std::string, size_t>* freshRow);
  // Appends `fresh` as new rows and signals the changed and inserted rows.
  void publish(std::vector<Entry>* fresh);
  QVariant rawValue(int row, int column) const;
  QString text(int row, int column) const;

  std::vector<Entry> m_entries;
  std::unordered_map<std::string, size_t> m_rowOfName;
  int64_t m_referenceNs = 0;
};

}  // namespace moewb::gui
