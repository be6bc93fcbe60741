// SelectionModel: host aggregate at once, GPU aggregate from a worker (see selection_model.h).
#include "moewb/gui/selection_model.h"

#include <QMetaObject>
#include <algorithm>

#include "moewb/base/units.h"
#include "moewb/gui/trace_document.h"
#include "moewb/gui/trace_loader.h"

namespace moewb::gui {

namespace {

QString duration(int64_t ns) {
  return QString::fromStdString(formatDurationNs(ns));
}

}  // namespace

SelectionModel::SelectionModel(QObject* parent) : QAbstractTableModel(parent) {}

SelectionModel::~SelectionModel() {
  if (m_worker.joinable()) m_worker.join();
}

void SelectionModel::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  clear();
  if (!m_document) return;
  connect(m_document, &TraceDocument::opening, this, &SelectionModel::clear);
  connect(m_document, &TraceDocument::closed, this, &SelectionModel::clear);
  auto again = [this] {
    if (m_range) setRange(*m_range);
  };
  connect(m_document, &TraceDocument::refreshed, this, again);
  connect(m_document, &TraceDocument::opened, this, again);
}

void SelectionModel::clear() {
  ++m_generation;
  m_gpuPending = false;
  const bool had = m_range.has_value() || !m_rows.empty();
  if (!had) return;
  beginResetModel();
  m_range.reset();
  m_rows.clear();
  endResetModel();
}

void SelectionModel::setRange(TimeRange range) {
  if (range.durNs() <= 0 || !m_document) {
    clear();
    return;
  }
  ++m_generation;
  beginResetModel();
  m_range = range;
  m_rows = aggregateHostSlices(m_document->timeline(), range);
  endResetModel();
  m_gpuPending = !m_document->gpuLaneTracks().empty();
  if (m_gpuPending) {
    startGpuQuery();
  } else {
    emit aggregated();
  }
}

void SelectionModel::startGpuQuery() {
  if (m_workerRunning) return;  // onGpuAnswer starts it again for the current range
  if (m_worker.joinable()) m_worker.join();
  m_workerRunning = true;
  const uint64_t generation = m_generation;
  const std::string path = m_document->path().toStdString();
  const storage::TimeWindow window{m_range->startNs, m_range->endNs};
  m_worker = std::thread([this, generation, path, window] {
    auto answer = std::make_shared<GpuAnswer>(storage::gpuWorkInRange(path, window));
    // Queued to this object: dropped by Qt if the model is gone by then (its destructor joins
    // this thread first, so `this` is valid while the call is being posted).
    QMetaObject::invokeMethod(
        this, [this, generation, answer] { onGpuAnswer(generation, answer); },
        Qt::QueuedConnection);
  });
}

void SelectionModel::onGpuAnswer(uint64_t generation, const std::shared_ptr<GpuAnswer>& answer) {
  if (m_worker.joinable()) m_worker.join();
  m_workerRunning = false;
  if (generation != m_generation) {
    if (m_gpuPending && m_range) startGpuQuery();  // a newer range is waiting for its rows
    return;
  }
  m_gpuPending = false;
  if (!answer->isOk()) {
    emit failed(userMessage(answer->status()));
    emit aggregated();
    return;
  }
  const auto& totals = answer->value();
  if (!totals.empty()) {
    const int first = int(m_rows.size());
    beginInsertRows({}, first, first + int(totals.size()) - 1);
    for (const storage::RangeNameTotal& t : totals) {
      RangeAggregateRow row;
      row.name = t.shortName.empty() ? t.name : t.shortName;
      row.fullName = t.name;
      row.kind = t.category;
      row.count = t.count;
      row.totalNs = t.totalNs;
      row.selfNs = t.totalNs;  // GPU work has no children
      row.maxNs = t.maxNs;
      row.longest = {t.longestStartNs, t.longestEndNs};
      m_rows.push_back(std::move(row));
    }
    endInsertRows();
  }
  emit aggregated();
}

int SelectionModel::rowOf(const std::string& name, const std::string& kind) const {
  for (size_t i = 0; i < m_rows.size(); ++i) {
    if (m_rows[i].name == name && m_rows[i].kind == kind) return int(i);
  }
  return -1;
}

TimeRange SelectionModel::longestOccurrence(int row) const {
  if (row < 0 || size_t(row) >= m_rows.size()) return {};
  return m_rows[size_t(row)].longest;
}

QString SelectionModel::summaryText() const {
  if (!m_range) return tr("No range selected: drag with Shift on the timeline to select one.");
  const int64_t originNs = m_document ? m_document->timeBounds().startNs : 0;
  int64_t slices = 0;
  for (const RangeAggregateRow& row : m_rows) slices += row.count;
  QString text = tr("%1 selected (+%2 .. +%3): %4 slices and kernels, %5 names")
                     .arg(duration(m_range->durNs()), duration(m_range->startNs - originNs),
                          duration(m_range->endNs - originNs))
                     .arg(slices)
                     .arg(m_rows.size());
  if (m_gpuPending) text += tr(" (reading GPU work...)");
  return text;
}

int SelectionModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int SelectionModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant SelectionModel::rawValue(int row, int column) const {
  const RangeAggregateRow& r = m_rows[size_t(row)];
  switch (column) {
    case kName:
      return QString::fromStdString(r.name);
    case kKind:
      return QString::fromStdString(r.kind);
    case kCount:
      return qlonglong(r.count);
    case kTotal:
      return qlonglong(r.totalNs);
    case kSelf:
      return qlonglong(r.selfNs);
    case kAvg:
      return r.avgNs();
    case kMax:
      return qlonglong(r.maxNs);
    case kShare:
      return r.shareOf(m_range ? m_range->durNs() : 0);
    default:
      return {};
  }
}

QString SelectionModel::text(int row, int column) const {
  const RangeAggregateRow& r = m_rows[size_t(row)];
  switch (column) {
    case kName:
      return QString::fromStdString(r.name);
    case kKind:
      return QString::fromStdString(r.kind);
    case kCount:
      return QString::number(r.count);
    case kTotal:
      return duration(r.totalNs);
    case kSelf:
      return duration(r.selfNs);
    case kAvg:
      return duration(int64_t(r.avgNs() + 0.5));
    case kMax:
      return duration(r.maxNs);
    case kShare:
      return QString::number(r.shareOf(m_range ? m_range->durNs() : 0) * 100, 'f', 1) +
             QLatin1Char('%');
    default:
      return {};
  }
}

QVariant SelectionModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumnCount) return {};
  switch (role) {
    case Qt::DisplayRole:
      return text(index.row(), index.column());
    case kSortRole:
      return rawValue(index.row(), index.column());
    case Qt::ToolTipRole:
      return tr("%1\ndouble-click: zoom to its longest occurrence in the range")
          .arg(QString::fromStdString(m_rows[size_t(index.row())].fullName));
    case Qt::TextAlignmentRole:
      return index.column() >= kCount ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                                      : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant SelectionModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kName:
      return tr("Name");
    case kKind:
      return tr("Kind");
    case kCount:
      return tr("Count");
    case kTotal:
      return tr("Total");
    case kSelf:
      return tr("Self");
    case kAvg:
      return tr("Avg");
    case kMax:
      return tr("Max");
    case kShare:
      return tr("% of range");
    default:
      return {};
  }
}

}  // namespace moewb::gui
