// ParallelCollectiveModel: matched collectives of one step, sorted by wait, as a table model.
#include "moewb/gui/parallel_collective_model.h"

#include <algorithm>

#include "moewb/base/units.h"

namespace moewb::gui {

namespace {
QString duration(int64_t ns) {
  return QString::fromStdString(formatDurationNs(ns));
}
}  // namespace

ParallelCollectiveModel::ParallelCollectiveModel(QObject* parent) : QAbstractTableModel(parent) {}

void ParallelCollectiveModel::setCollectives(int64_t step,
                                             std::vector<storage::MatchedCollective> collectives) {
  std::stable_sort(collectives.begin(), collectives.end(),
                   [](const storage::MatchedCollective& a, const storage::MatchedCollective& b) {
                     if (a.totalWaitNs != b.totalWaitNs) return a.totalWaitNs > b.totalWaitNs;
                     return a.firstStartNs < b.firstStartNs;
                   });
  beginResetModel();
  m_step = step;
  m_rows = std::move(collectives);
  endResetModel();
}

const storage::MatchedCollective* ParallelCollectiveModel::collective(int row) const {
  return row >= 0 && size_t(row) < m_rows.size() ? &m_rows[size_t(row)] : nullptr;
}

int ParallelCollectiveModel::rowOf(const storage::MatchedCollective& match) const {
  for (size_t i = 0; i < m_rows.size(); ++i) {
    const storage::MatchedCollective& c = m_rows[i];
    if (c.step == match.step && c.commGroup == match.commGroup && c.seq == match.seq &&
        c.peers == match.peers) {
      return int(i);
    }
  }
  return -1;
}

int ParallelCollectiveModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int ParallelCollectiveModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ParallelCollectiveModel::rawValue(const storage::MatchedCollective& c, int column) const {
  switch (column) {
    case kOp:
      return QString::fromStdString(c.op);
    case kGroup:
      return QString::fromStdString(c.commGroup);
    case kPhase:
      return QString::fromStdString(c.phase);
    case kLayer:
      return c.layer;
    case kSeq:
      return qlonglong(c.seq);
    case kPeers:
      return QString::fromStdString(c.peers);
    case kBytes:
      return qlonglong(c.bytesSent);
    case kLastRank:
      return c.lastRank;
    case kSkew:
      return qlonglong(c.skewNs());
    case kTotalWait:
      return qlonglong(c.totalWaitNs);
    case kSpan:
      return qlonglong(c.endNs - c.firstStartNs);
    default:
      return {};
  }
}

QString ParallelCollectiveModel::text(const storage::MatchedCollective& c, int column) const {
  switch (column) {
    case kOp:
      return QString::fromStdString(c.op) + (c.opMismatch ? tr(" (ops differ!)") : QString());
    case kPhase:
      return c.phase.empty() ? QStringLiteral("-") : QString::fromStdString(c.phase);
    case kLayer:
      return c.layer >= 0 ? QString::number(c.layer) : QStringLiteral("-");
    case kPeers: {
      QString peers = QString::fromStdString(c.peers);
      if (!c.missingRanks.empty()) peers += tr(" (%1 missing)").arg(c.missingRanks.size());
      return peers;
    }
    case kBytes:
      return QString::fromStdString(formatBytes(c.bytesSent));
    case kLastRank:
      return c.arrivals.size() > 1 ? tr("rank %1").arg(c.lastRank) : QStringLiteral("-");
    case kSkew:
      return duration(c.skewNs());
    case kTotalWait:
      return duration(c.totalWaitNs);
    case kSpan:
      return duration(c.endNs - c.firstStartNs);
    default:
      return rawValue(c, column).toString();
  }
}

QString ParallelCollectiveModel::toolTip(const storage::MatchedCollective& c) const {
  QString text = tr("<b>%1</b> on %2 [%3], seq %4")
                     .arg(QString::fromStdString(c.op).toHtmlEscaped(),
                          QString::fromStdString(c.commGroup).toHtmlEscaped(),
                          QString::fromStdString(c.peers).toHtmlEscaped())
                     .arg(c.seq);
  for (const storage::CollectiveArrival& a : c.arrivals) {
    text += tr("<br>rank %1: start +%2, waited %3, ran %4%5")
                .arg(a.rank)
                .arg(duration(a.startNs - c.firstStartNs), duration(a.waitNs), duration(a.durNs),
                     a.ok ? QString() : tr(" (failed)"));
  }
  for (int32_t rank : c.missingRanks) text += tr("<br>rank %1: no record").arg(rank);
  return text;
}

QVariant ParallelCollectiveModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumnCount) return {};
  const storage::MatchedCollective& c = m_rows[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return text(c, index.column());
    case kSortRole:
      return rawValue(c, index.column());
    case Qt::ToolTipRole:
      return toolTip(c);
    default:
      return {};
  }
}

QVariant ParallelCollectiveModel::headerData(int section, Qt::Orientation orientation,
                                             int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kBytes:
        return tr("bytes sent to other ranks, summed over the peers");
      case kLastRank:
        return tr("the peer that started last (everyone else waited for it)");
      case kSkew:
        return tr("last start - first start: the longest any peer waited");
      case kTotalWait:
        return tr("waiting summed over the peers (sorted by this)");
      case kSpan:
        return tr("first start to last end");
      default:
        return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  static const char* kTitles[] = {"Op",   "Group", "Phase", "Layer", "Wait", "Skew",
                                  "Last", "Bytes", "Span",  "Seq",   "Peers"};
  return section >= 0 && section < kColumnCount ? tr(kTitles[section]) : QVariant();
}

}  // namespace moewb::gui
