// CompareWindow: the workbench's A/B comparison, a top-level window beside the main one. It shows
// what `moewb diff` prints for two traces (or two step ranges of one trace split at its first
// live config change): a header naming each side's file and steps, the per-phase and per-kernel
// table (CompareModel; sortable; deltas coloured only when significant), the run summary (step
// time, tokens/s, loss, expert imbalance per layer) and the loss and step time of both runs
// overlaid on one chart each (x = step).
// The comparison is read on a worker thread (it streams every slice of both files); the window
// shows "Comparing..." meanwhile and the error in plain words (userMessage) when it fails.
// addCompareActions() adds File > "Compare with..." and "Compare before/after config change" to
// the main window's menu. GUI thread only.
#pragma once

#include <QString>
#include <QWidget>
#include <functional>
#include <memory>

#include "moewb/base/status.h"
#include "moewb/gui/compare_model.h"

class QLabel;
class QMenu;
class QTableView;
class QThread;

namespace moewb::gui {

class ChartView;

class CompareWindow : public QWidget {
  Q_OBJECT

 public:
  explicit CompareWindow(QWidget* parent = nullptr);
  ~CompareWindow() override;

  // Starts reading `request` on a worker thread and returns at once; a comparison in progress
  // is left to finish and its result dropped. finished() tells when it ended.
  void beginCompare(const CompareRequest& request);
  // beginCompare, then runs the event loop until it ended; returns its Status. For tests.
  Status compare(const CompareRequest& request);

  CompareModel* namesModel() const { return m_names; }
  CompareModel* summaryModel() const { return m_summary; }
  QTableView* namesTable() const { return m_namesTable; }
  ChartView* lossChart() const { return m_lossChart; }
  ChartView* stepTimeChart() const { return m_stepChart; }
  // The header text ("A  path  steps 1..11 ..." / error / "Comparing...").
  QString headerText() const;

 signals:
  void finished(bool ok);

 private:
  void onResult(quint64 generation, std::shared_ptr<Result<ComparisonResult>> result);
  void showResult(const ComparisonResult& result);

  CompareModel* m_names = nullptr;
  CompareModel* m_summary = nullptr;
  QTableView* m_namesTable = nullptr;
  QTableView* m_summaryTable = nullptr;
  QLabel* m_header = nullptr;
  ChartView* m_lossChart = nullptr;
  ChartView* m_stepChart = nullptr;
  quint64 m_generation = 0;  // the request whose result is shown when it arrives
  Status m_lastStatus;
  std::vector<QThread*> m_workers;  // running workers, waited for by the destructor
};

// Adds to `file` "Compare with..." (the trace `currentPath()` returns, or one chosen, against a
// second chosen trace) and "Compare before/after config change" (the current trace split at its
// first live config change); each opens a new CompareWindow (deleted when closed) with `parent`.
void addCompareActions(QMenu* file, QWidget* parent, std::function<QString()> currentPath);

}  // namespace moewb::gui
