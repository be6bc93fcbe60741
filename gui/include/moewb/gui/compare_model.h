// The A/B comparison in the workbench: loadComparison() reads two samples (two traces, or two
// step ranges of one trace split at a live config change) and compares them with
// storage/compare_queries.h, the same functions `moewb diff` prints; CompareModel shows the
// result as a table.
//
// CompareModel has one row per compared quantity: setNames() fills it with the per-phase and
// per-GPU-kernel time per step (ordered by |delta|, largest first, as compareSamples gives them);
// setSummary() with step time, tokens/s, loss, loss at the end and the expert imbalance (all
// layers, then per layer). Columns: kind, name, A (mean ± stddev over steps), B, delta (B - A),
// ratio (B / A), noise (2 standard errors of the delta) and a "*" when significant. kSortRole
// gives raw numbers for a QSortFilterProxyModel (the delta column sorts by |delta|).
// Qt::ForegroundRole colours the delta and ratio of significant rows only: red when B is worse
// (more time, fewer tokens/s, higher loss or imbalance), green when better; rows within the noise
// stay uncoloured. GUI thread only; setters cost O(rows).
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/compare_queries.h"

namespace moewb::gui {

// What loadComparison reads: pathB empty = two ranges of trace A (`a` and `b`, or split at the
// first live config change when splitAtPatch).
struct CompareRequest {
  QString pathA;
  QString pathB;
  storage::SampleOptions a;
  storage::SampleOptions b;
  bool splitAtPatch = false;
};

struct ComparisonResult {
  storage::TraceSample a;
  storage::TraceSample b;
  storage::SampleComparison comparison;
  QString splitNote;  // "split at step 6: moe.top_k 2 -> 1 (gui)" for a split trace, else ""
};

// Opens the trace(s) and computes the comparison; blocking (run it on a worker thread: it streams
// every slice of both files). Errors: the reader's (a missing or damaged file, each naming the
// file), kInvalidArgument for an empty step range or a trace without a config change to split at.
Result<ComparisonResult> loadComparison(const CompareRequest& request);

class CompareModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kKind, kName, kA, kB, kDelta, kRatio, kNoise, kFlag, kColumnCount };
  static constexpr int kSortRole = Qt::UserRole + 1;
  // What a row's numbers are: durations (ns) or plain values.
  enum class Unit { kNs, kCount, kPlain };

  struct Row {
    QString kind;  // "phase", "gpu", "run", "imbalance"
    QString name;
    storage::MetricDelta delta;
    Unit unit = Unit::kNs;
    bool higherIsBetter = false;  // tokens/s: a positive delta is an improvement
    int decimals = 3;             // for kPlain values
  };

  explicit CompareModel(QObject* parent = nullptr);

  // Rows for the per-name time table (model reset).
  void setNames(const storage::SampleComparison& comparison);
  // Rows for the run summary: step time, tokens/s, loss, loss at the end, imbalance (model reset).
  void setSummary(const storage::SampleComparison& comparison);
  void clear();
  const std::vector<Row>& rows() const { return m_rows; }
  // The colour the delta of `row` is drawn in: invalid (default text colour) unless significant.
  QColor deltaColor(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QString text(const Row& row, int column) const;
  QVariant rawValue(const Row& row, int column) const;
  void reset(std::vector<Row> rows);

  std::vector<Row> m_rows;
};

}  // namespace moewb::gui
