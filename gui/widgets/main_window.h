// MainWindow: the workbench window. Centre: the timeline above the expert heat map and the loss,
// step-time, memory, grad-norm and learning-rate charts, all marking the trace's config changes; docks: Live control (steers
// a run started here: pause / resume / step / stop and live config patches), the step table, the
// phase summary and the config changes, and for traces of parallel runs (world size > 1) the
// Swap dock (for traces with swap rows: watermarks, PCIe rate, the per-layer table and the
// what-if; a click on a swap copy in the timeline selects what waited for it), the
// Parallelism dock (all-to-all traffic matrix, tokens per rank, collectives by wait; picking a
// collective there or on the timeline outlines it on every rank's comm track); a status bar with
// file, steps, last loss and tokens/s.
// Actions: File>Open, Run>Start run (config + output file; the run trains on a worker thread and
// the window follows the growing trace every 500 ms), Run>Stop, View>Fit/Zoom and the docks.
// Opening a trace never blocks the window: the document loads it on a worker thread while a
// progress bar with a Cancel button shows in the status bar (Cancel leaves an empty window).
// Errors (unreadable trace, bad config) go to a message box and the status bar in plain words
// (userMessage: no status-code names, no source locations); live-control replies (a refused
// patch) go to the panel and the status bar.
// The window's geometry and dock layout can be kept between sessions (useSavedLayout: QSettings,
// organisation "MoE Workbench", application "moewb-gui", saved when the window closes);
// View > Reset layout puts the default dock layout back.
// Files: main_window.cpp (layout, opening, status), main_window_run.cpp (runs and live refresh),
// main_window_swap.cpp (the Swap dock and swap selection), main_window_selection.cpp (the
// Selection dock: the aggregate of the timeline's range selection), main_window_views.cpp (the
// Step breakdown dock, View > Follow last N steps, the Bookmarks dock).
#pragma once

#include <QByteArray>
#include <QMainWindow>
#include <QString>
#include <optional>
#include <utility>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/gui/chart_ranks.h"
#include "moewb/gui/trace_document.h"

class QAction;
class QComboBox;
class QDockWidget;
class QLabel;
class QListView;
class QMenu;
class QToolBar;
class QSpinBox;
class QModelIndex;
class QProgressBar;
class QPushButton;
class QTableView;
class QTimer;

namespace moewb::gui {

class BookmarkModel;
class ChartView;
class RanksChoice;
class HeatmapPanel;
class StepBreakdownModel;
class StepBreakdownView;
class LiveControlPanel;
class ParallelModel;
class ParallelPanel;
class RunController;
class SelectionModel;
class SwapModel;
class SwapPanel;
class TimelineView;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Starts loading a trace on the document's worker and returns at once; the status bar shows
  // the progress and a Cancel button until it ends. An error is shown in a (non-modal) message
  // box unless dialogs are disabled, and in the status bar; the previous document stays open
  // when the file is not a readable trace. File>Open and the command line use this.
  void beginOpen(const QString& path);
  // beginOpen, then waits (running the event loop, so the window paints and Cancel works) until
  // the load ended; returns its Status (kCancelled after Cancel). For tests and scripts.
  Status openFile(const QString& path);
  // Starts a training run writing `outPath` and follows it live. Errors as for openFile.
  Status startRun(const QString& configPath, const QString& outPath, qint64 steps = -1);
  // Renders the whole window into a PNG at `path`; false when it cannot be written.
  bool saveScreenshot(const QString& path);
  // Gives the timeline `px` pixels of the central area's height (the charts get the rest), e.g.
  // so a screenshot shows every lane of a CUDA trace down to the swap lanes.
  void setTimelineHeight(int px);
  // Shows the Swap dock (when the trace has swap rows) on tab `tab`: "memory", "pcie",
  // "layers" or "what-if". False when the name is unknown or the trace has no swap rows.
  bool showSwapTab(const QString& tab);
  // Version of the saved dock layout: a saved state of another version is ignored.
  static constexpr int kLayoutVersion = 1;
  // The QSettings keys of the saved layout (organisation "MoE Workbench", application
  // "moewb-gui"): the window geometry and the dock state (QMainWindow::saveState).
  static constexpr const char* kGeometryKey = "mainWindow/geometry";
  static constexpr const char* kStateKey = "mainWindow/state";
  // Restores the geometry and dock layout saved by an earlier window, and from now on saves
  // them when this window closes. main() calls it unless --no-saved-layout or --screenshot
  // (tests point QSettings at a temporary folder first). Returns true when a saved dock layout
  // was restored; none saved, or a corrupt or foreign one (restoreState refused it), keeps the
  // default layout.
  bool useSavedLayout();
  // Writes the window's geometry and dock layout to the settings now (closing does it too once
  // useSavedLayout was called).
  void saveLayout();
  // Puts the default dock layout back (View > Reset layout): every dock where and as visible as
  // in a new window.
  void resetLayout();
  // Tests and --screenshot turn message boxes off (errors then go to the status bar only).
  void setErrorDialogsEnabled(bool enabled) { m_errorDialogs = enabled; }

  TraceDocument* document() { return &m_document; }
  TimelineView* timelineView() const { return m_timeline; }
  HeatmapPanel* heatmapPanel() const { return m_heatmap; }
  ChartView* lossChart() const { return m_lossChart; }
  ChartView* stepTimeChart() const { return m_stepTimeChart; }
  ChartView* memoryChart() const { return m_memoryChart; }
  ChartView* gradNormChart() const { return m_gradNormChart; }
  ChartView* lrChart() const { return m_lrChart; }
  // The toolbar's Ranks choice for the step charts (shown for traces with step rows of 2+ ranks).
  RanksChoice* ranksChoice() const { return m_ranksChoice; }
  QAction* ranksAction() const { return m_ranksAction; }
  RunController* runController() const { return m_runner; }
  LiveControlPanel* liveControlPanel() const { return m_livePanel; }
  QTableView* configChangeTable() const { return m_changeTable; }
  // The "GPU kernel" dock's table (document()->gpuDetailsModel()).
  QTableView* gpuDetailsTable() const { return m_gpuTable; }
  // The Parallelism dock (shown only for traces with world size > 1), its panel and model.
  QDockWidget* parallelDock() const { return m_parallelDock; }
  ParallelPanel* parallelPanel() const { return m_parallelPanel; }
  ParallelModel* parallelModel() const { return m_parallel; }
  // The Swap dock (shown only for traces with swap rows), its panel and model.
  QDockWidget* swapDock() const { return m_swapDock; }
  SwapPanel* swapPanel() const { return m_swapPanel; }
  SwapModel* swapModel() const { return m_swap; }
  // The "GPU kernel" dock.
  QDockWidget* gpuDock() const { return m_gpuDock; }
  // The "Selection" dock (main_window_selection.cpp): the aggregate table of the timeline's
  // range selection (a proxy sorted on SelectionModel::kSortRole over selectionModel()).
  QDockWidget* selectionDock() const { return m_selectionDock; }
  QTableView* selectionTable() const { return m_selectionTable; }
  SelectionModel* selectionModel() const { return m_selection; }
  // Selects what waited for `event`, a reload or an offload with a wait (SwapModel::waiterOf):
  // a kernel goes to the GPU kernel dock and is marked on the timeline, a phase slice is
  // outlined and its step shown.
  // Errors: read errors (also shown in the status bar).
  Status selectSwapWaiter(const storage::SwapEventRow& event);
  // The status bar's load progress (0..1000) and its Cancel button, visible while a load runs.
  QProgressBar* loadProgressBar() const { return m_loadBar; }
  QPushButton* cancelLoadButton() const { return m_cancelLoad; }
  // The "Steps" dock's table.
  QTableView* stepTable() const { return m_stepTable; }
  // The "Step breakdown" dock (main_window_views.cpp): stacked time per step, its model.
  QDockWidget* breakdownDock() const { return m_breakdownDock; }
  StepBreakdownView* breakdownView() const { return m_breakdownView; }
  StepBreakdownModel* breakdownModel() const { return m_breakdownModel; }
  // The dock's rank choice for parallel traces (hidden for one rank): "slowest rank" (item 0,
  // the default: per step the slowest rank's bar) or "rank N" (item data: N).
  QComboBox* breakdownRanks() const { return m_breakdownRanks; }
  // Selects `step` in every view: the heat map, the Steps table's row (rank 0), the timeline
  // zoomed to the step (what a click on a step in the Step breakdown does).
  void selectStep(qint64 step);
  // View > Follow last N steps (checkable) and its N (the toolbar's spin box, default 50): while
  // on, the timeline's window and the charts' x range stay on the last N committed steps as the
  // trace grows; a zoom or pan by hand turns it off (the status bar says so).
  QAction* followAction() const { return m_followAction; }
  QSpinBox* followStepsBox() const { return m_followSteps; }
  bool isFollowing() const;
  // The "Bookmarks" dock, its model and list. Ctrl+B (or M on the timeline) asks for a name and
  // adds a bookmark at the timeline's range selection, selected slice, cursor or window centre.
  QDockWidget* bookmarkDock() const { return m_bookmarkDock; }
  BookmarkModel* bookmarkModel() const { return m_bookmarks; }
  QListView* bookmarkList() const { return m_bookmarkList; }
  // Opens the name dialog (a QInputDialog, not blocking) for a bookmark at the current place.
  void addBookmark();
  // Zooms the timeline to bookmark `row`'s window (a range bookmark is selected again).
  void goToBookmark(int row);
  // The last error shown (empty when none).
  QString lastError() const { return m_lastError; }
  // The status bar's run field: "run: completed", "run: running (last heartbeat 1 s ago)", ...
  QString runStatusText() const;

 signals:
  // A run started from this window ended (after the final refresh).
  void runFinished(bool ok, const QString& message);
  // A load started by beginOpen ended: loaded, failed or cancelled.
  void openFinished(bool ok);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void createActions();
  void createCentralArea();
  void createDocks();
  void createParallelDock();
  void updateParallelDock();
  void createSwapDock();
  void updateSwapDock();
  void createSelectionDock();
  // main_window_views.cpp
  void createBreakdownDock();
  // Lists the read breakdown's ranks in the rank choice (keeping the choice when still offered)
  // and shows the chosen view.
  void showBreakdown();
  void createBookmarkDock();
  void createFollowActions(QMenu* view, QToolBar* bar);
  void applyFollow();
  void onTimelineWindowChanged();
  void setChartsStepWindow(std::optional<std::pair<int64_t, int64_t>> steps);
  void selectCollectiveSlice(qint64 trackId, qint64 startNs);
  void highlightCollective(const storage::MatchedCollective& match, bool zoom);
  void createStatusBar();
  void openDialog();
  void runDialog();
  void stopRun();
  void liveTick();
  void onRunFinished(bool ok, const QString& message);
  void onDocumentChanged();
  void updateCharts();
  void updateChartMarkers();
  void updateMemoryChart();
  void showConfigChange(const QModelIndex& index);
  void updateStatus();
  void updateActions();
  void showError(const QString& title, const QString& message);
  void onLoadEnded();
  QString defaultConfigDir() const;

  TraceDocument m_document;
  RunController* m_runner = nullptr;
  TimelineView* m_timeline = nullptr;
  HeatmapPanel* m_heatmap = nullptr;
  ChartView* m_lossChart = nullptr;
  ChartView* m_stepTimeChart = nullptr;
  ChartView* m_memoryChart = nullptr;
  ChartView* m_gradNormChart = nullptr;
  ChartView* m_lrChart = nullptr;
  RanksChoice* m_ranksChoice = nullptr;
  QAction* m_ranksAction = nullptr;  // the toolbar's Ranks label and combo box
  QTableView* m_stepTable = nullptr;
  QTableView* m_phaseTable = nullptr;
  QTableView* m_changeTable = nullptr;
  QTableView* m_gpuTable = nullptr;  // GPU kernel details
  LiveControlPanel* m_livePanel = nullptr;
  ParallelModel* m_parallel = nullptr;
  ParallelPanel* m_parallelPanel = nullptr;
  QDockWidget* m_parallelDock = nullptr;
  QDockWidget* m_liveDock = nullptr;
  QDockWidget* m_gpuDock = nullptr;
  QDockWidget* m_phaseDock = nullptr;
  SwapModel* m_swap = nullptr;
  SwapPanel* m_swapPanel = nullptr;
  QDockWidget* m_swapDock = nullptr;
  bool m_swapTrace = false;  // the open trace has swap rows (dock shown once for it)
  SelectionModel* m_selection = nullptr;
  QTableView* m_selectionTable = nullptr;
  QLabel* m_selectionLabel = nullptr;
  QDockWidget* m_selectionDock = nullptr;
  uint64_t m_memoryChartRevision = ~uint64_t(0);  // document memoryRevision() drawn
  bool m_memoryChartHasSteps = false;  // hidden until a run started here is live
  RankChoice m_memoryChartChoice;      // the Ranks choice the memory chart was drawn for
  bool m_parallelTrace = false;       // the open trace has world size > 1 (dock shown once for it)
  std::vector<QDockWidget*> m_docks;  // in View menu order
  QTimer* m_liveTimer = nullptr;
  QAction* m_openAction = nullptr;
  QAction* m_runAction = nullptr;
  QAction* m_stopAction = nullptr;
  QAction* m_liveAction = nullptr;
  QLabel* m_fileLabel = nullptr;
  QLabel* m_stepsLabel = nullptr;
  QLabel* m_lossLabel = nullptr;
  QLabel* m_rateLabel = nullptr;
  QLabel* m_runLabel = nullptr;
  QProgressBar* m_loadBar = nullptr;
  QPushButton* m_cancelLoad = nullptr;
  bool m_openPending = false;  // a load started by beginOpen has not ended yet
  QString m_livePath;  // trace being written by our run, opened once it exists
  QString m_lastError;
  bool m_errorDialogs = true;
  QByteArray m_defaultLayout;        // saveState(kLayoutVersion) of the new window
  bool m_saveLayoutOnClose = false;  // set by useSavedLayout
  // main_window_views.cpp
  StepBreakdownModel* m_breakdownModel = nullptr;
  StepBreakdownView* m_breakdownView = nullptr;
  QDockWidget* m_breakdownDock = nullptr;
  QComboBox* m_breakdownRanks = nullptr;
  QWidget* m_breakdownRankBar = nullptr;  // the rank choice's row, shown for parallel traces
  BookmarkModel* m_bookmarks = nullptr;
  QListView* m_bookmarkList = nullptr;
  QDockWidget* m_bookmarkDock = nullptr;
  QAction* m_followAction = nullptr;
  QSpinBox* m_followSteps = nullptr;
  bool m_applyingFollow = false;  // the window change under way is follow mode's own
  TimeRange m_followWindow;       // the timeline window follow mode set last
  TimeRange m_followBounds;       // the document's time bounds then
};

}  // namespace moewb::gui
