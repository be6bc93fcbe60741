// SelectionModel: the aggregate table of the timeline's range selection (the "Selection" dock):
// per name, the host slices and, for traces with GPU capture, the kernels, copies and memsets
// inside the range: count, total, self, average and maximum time and the share of the range.
//
// setRange aggregates the document's host slices at once on the calling thread
// (aggregateHostSlices: about 10 ms for a full-range selection of 1M slices) and, when the trace
// has GPU stream tracks, starts storage::gpuWorkInRange on a worker thread with a connection of
// its own; the GPU rows join the table when it answers (rowsInserted), and aggregated() follows.
// A newer setRange or clear() makes a pending answer stale: it is dropped and, for a newer range,
// the worker runs again. Clipping rule and costs: range_aggregate.h and range_queries.h.
// Rows keep the order host (by total) then GPU (by total); sort with a proxy on kSortRole.
// The model follows the document: a newly opened or closed file clears it; a refresh (live run,
// streamed load) aggregates the range again. GUI thread only (the worker touches no members).
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "moewb/gui/range_aggregate.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/range_queries.h"

namespace moewb::gui {

class TraceDocument;

class SelectionModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kName, kKind, kCount, kTotal, kSelf, kAvg, kMax, kShare, kColumnCount };
  // Raw value of a cell: QString name / kind, qlonglong count and ns, double avg ns and share.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit SelectionModel(QObject* parent = nullptr);
  ~SelectionModel() override;

  // Aggregates the ranges of `document` (not owned; may be null) and follows its signals.
  void setDocument(TraceDocument* document);
  // Aggregates what lies inside `range` (model reset with the host rows; GPU rows follow).
  // An empty range clears.
  void setRange(TimeRange range);
  // Removes every row and forgets the range.
  void clear();
  // The range aggregated, if any.
  std::optional<TimeRange> range() const { return m_range; }
  // Whether the GPU rows of the current range are still being read.
  bool isBusy() const { return m_gpuPending; }
  const std::vector<RangeAggregateRow>& rows() const { return m_rows; }
  // The row of (name, kind), or -1.
  int rowOf(const std::string& name, const std::string& kind = "host") const;
  // The whole span of the longest occurrence of row `row`'s name inside the range; empty for a
  // bad row.
  TimeRange longestOccurrence(int row) const;
  // One line for the dock's header: "12.5 ms selected (+1.20 ms .. +13.7 ms): 412 slices,
  // 37 names" or "no range selected".
  QString summaryText() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 signals:
  // Every row of the current range is in (host and, where there are GPU tracks, GPU).
  void aggregated();
  // Reading the GPU rows failed; `message` names the file and the problem in plain words.
  void failed(const QString& message);

 private:
  using GpuAnswer = Result<std::vector<storage::RangeNameTotal>>;
  // Starts the worker on the current range, or marks it to run again once the running one ends.
  void startGpuQuery();
  void onGpuAnswer(uint64_t generation, const std::shared_ptr<GpuAnswer>& answer);
  void aggregateHost();
  QVariant rawValue(int row, int column) const;
  QString text(int row, int column) const;

  TraceDocument* m_document = nullptr;
  std::optional<TimeRange> m_range;
  std::vector<RangeAggregateRow> m_rows;
  uint64_t m_generation = 0;  // bumped by every setRange/clear
  bool m_gpuPending = false;  // the current range's GPU rows have not arrived yet
  std::thread m_worker;       // the GPU query; joined when it answers and on destruction
  bool m_workerRunning = false;
};

}  // namespace moewb::gui
