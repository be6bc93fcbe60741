// ParallelCollectiveModel: the collectives of one step, each matched across its peers
// (storage::MatchedCollective), as a table sorted by total wait, longest first (ties: earlier
// first arrival first), so the collectives where ranks stood idle longest come first.
//
// Columns: op, group, phase, layer, the total wait (summed over the peers), the skew (last
// start - first start: the longest anyone waited), the rank that arrived last, bytes sent
// (summed over the peers), the span (first start to last end), seq and peers. DisplayRole gives
// text
// ("1.50 MiB", "12.3 us", "rank 3"); kSortRole the raw value; ToolTipRole every peer's start
// offset and wait. setCollectives resets the model. rowOf finds a collective by its match key.
// GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "moewb/storage/parallel_queries.h"

namespace moewb::gui {

class ParallelCollectiveModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  // The waiting first (a narrow dock still shows it), the identity of the collective after it.
  enum Column {
    kOp,
    kGroup,
    kPhase,
    kLayer,
    kTotalWait,
    kSkew,
    kLastRank,
    kBytes,
    kSpan,
    kSeq,
    kPeers,
    kColumnCount
  };
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit ParallelCollectiveModel(QObject* parent = nullptr);

  // Shows the collectives of `step` (any order; the model sorts them by wait). Model reset.
  void setCollectives(int64_t step, std::vector<storage::MatchedCollective> collectives);
  int64_t step() const { return m_step; }
  const std::vector<storage::MatchedCollective>& collectives() const { return m_rows; }
  // The collective of row `row`, or nullptr.
  const storage::MatchedCollective* collective(int row) const;
  // The row of the collective with this (comm_group, seq, peers), or -1.
  int rowOf(const storage::MatchedCollective& match) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant rawValue(const storage::MatchedCollective& c, int column) const;
  QString text(const storage::MatchedCollective& c, int column) const;
  QString toolTip(const storage::MatchedCollective& c) const;

  int64_t m_step = -1;
  std::vector<storage::MatchedCollective> m_rows;
};

}  // namespace moewb::gui
