// ParallelRankModel: per-rank routed rows and expert load as a Qt table model.
#include "moewb/gui/parallel_rank_model.h"

#include <algorithm>

#include "moewb/base/units.h"

namespace moewb::gui {

ParallelRankModel::ParallelRankModel(QObject* parent) : QAbstractTableModel(parent) {}

void ParallelRankModel::setLoads(storage::RankLoads loads) {
  const bool resized = loads.ranks.size() != m_loads.ranks.size();
  if (resized) beginResetModel();
  m_loads = std::move(loads);
  if (resized) {
    endResetModel();
  } else if (!m_loads.ranks.empty()) {
    emit dataChanged(index(0, 0), index(rowCount() - 1, kColumnCount - 1));
  }
}

double ParallelRankModel::receivedMaxOverMean() const {
  int64_t max = 0, sum = 0;
  for (const storage::RankLoad& r : m_loads.ranks) {
    max = std::max(max, r.receivedRows);
    sum += r.receivedRows;
  }
  if (sum <= 0) return 0.0;
  return double(max) / (double(sum) / double(m_loads.ranks.size()));
}

int ParallelRankModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_loads.ranks.size());
}

int ParallelRankModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ParallelRankModel::rawValue(const storage::RankLoad& r, int column) const {
  switch (column) {
    case kRank:
      return qlonglong(r.rank);
    case kTokens:
      return qlonglong(r.tokens);
    case kRouted:
      return qlonglong(r.routedRows);
    case kSent:
      return qlonglong(r.sentRows);
    case kReceived:
      return qlonglong(r.receivedRows);
    case kExperts:
      return text(r, column);
    case kMaxExpert:
      return qlonglong(r.maxExpertRows);
    case kMeanExpert:
      return r.meanExpertRows;
    case kMaxOverMean:
      return r.maxOverMean();
    default:
      return {};
  }
}

QString ParallelRankModel::text(const storage::RankLoad& r, int column) const {
  switch (column) {
    case kRank:
      return QString::number(r.rank);
    case kExperts:
      if (r.expertCount <= 0) return tr("none");
      if (r.expertCount == 1) return QStringLiteral("E%1").arg(r.firstExpert);
      return QStringLiteral("E%1-E%2").arg(r.firstExpert).arg(r.firstExpert + r.expertCount - 1);
    case kMaxExpert:
      return r.hottestExpert >= 0
                 ? QStringLiteral("%1 (E%2)")
                       .arg(QString::fromStdString(formatCount(double(r.maxExpertRows))))
                       .arg(r.hottestExpert)
                 : QStringLiteral("-");
    case kMeanExpert:
      return r.meanExpertRows < 100 ? QString::number(r.meanExpertRows, 'f', 1)
                                    : QString::fromStdString(formatCount(r.meanExpertRows));
    case kMaxOverMean:
      return r.meanExpertRows > 0 ? QStringLiteral("%1x").arg(r.maxOverMean(), 0, 'f', 2)
                                  : QStringLiteral("-");
    default:
      return QString::fromStdString(formatCount(double(rawValue(r, column).toLongLong())));
  }
}

QVariant ParallelRankModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumnCount) return {};
  const storage::RankLoad& r = m_loads.ranks[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return text(r, index.column());
    case kSortRole:
      return rawValue(r, index.column());
    case Qt::TextAlignmentRole:
      return int(index.column() == kExperts ? Qt::AlignLeft | Qt::AlignVCenter
                                            : Qt::AlignRight | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant ParallelRankModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kTokens:
        return tr("sequence tokens the rank processed");
      case kRouted:
        return tr("(token, expert) rows its router produced");
      case kSent:
        return tr("rows sent to experts on other ranks");
      case kReceived:
        return tr("rows its experts received from its EP group (its own included)");
      case kExperts:
        return tr("experts this rank hosts");
      case kMaxExpert:
        return tr("rows of its busiest expert");
      case kMeanExpert:
        return tr("mean rows over its experts");
      case kMaxOverMean:
        return tr("busiest expert over the mean of its experts");
      default:
        return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case kRank:
      return tr("Rank");
    case kTokens:
      return tr("Tokens");
    case kRouted:
      return tr("Routed");
    case kSent:
      return tr("Sent");
    case kReceived:
      return tr("Received");
    case kExperts:
      return tr("Experts");
    case kMaxExpert:
      return tr("Max expert");
    case kMeanExpert:
      return tr("Mean expert");
    case kMaxOverMean:
      return tr("Max/mean");
    default:
      return {};
  }
}

}  // namespace moewb::gui
