// ParallelRankModel: routed rows and expert load per rank (storage::RankLoads) as a table, one
// row per rank: tokens it processed, (token, expert) rows its router produced, how many of them
// went to experts on other ranks, how many rows its own experts received, which experts it hosts
// and their max / mean load.
//
// DisplayRole gives formatted text ("12.3k", "E4-E7", "1.35x"); kSortRole the raw number.
// setLoads resets the model when the number of ranks changes, else emits dataChanged. GUI
// thread only.
#pragma once

#include <QAbstractTableModel>

#include "moewb/storage/parallel_queries.h"

namespace moewb::gui {

class ParallelRankModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kRank,
    kTokens,
    kRouted,
    kSent,
    kReceived,
    kExperts,
    kMaxExpert,
    kMeanExpert,
    kMaxOverMean,
    kColumnCount
  };
  // Raw value of a cell: qlonglong counts, double means and ratios, QString expert range.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit ParallelRankModel(QObject* parent = nullptr);

  void setLoads(storage::RankLoads loads);
  const storage::RankLoads& loads() const { return m_loads; }
  // Received rows of the busiest rank over the mean of all ranks (1.0 = balanced; 0 when no
  // rank received rows).
  double receivedMaxOverMean() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant rawValue(const storage::RankLoad& load, int column) const;
  QString text(const storage::RankLoad& load, int column) const;

  storage::RankLoads m_loads;
};

}  // namespace moewb::gui
