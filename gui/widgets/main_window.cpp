// MainWindow: layout, actions, opening traces, charts and the status bar.
#include "main_window.h"

#include <QAction>
#include <QCloseEvent>
#include <QDateTime>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStatusBar>
#include <QStyle>
#include <QTableView>
#include <QTimer>
#include <QToolBar>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <algorithm>
#include <map>
#include <cmath>
#include <functional>
#include <iterator>

#include "chart_ranks_choice.h"
#include "chart_view.h"
#include "compare_window.h"
#include "heatmap_panel.h"
#include "live_control_panel.h"
#include "moewb/base/units.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/config_markers.h"
#include "moewb/gui/expert_time_model.h"
#include "moewb/gui/parallel_model.h"
#include "moewb/storage/run_liveness.h"
#include "parallel_panel.h"
#include "run_controller.h"
#include "theme.h"
#include "timeline_view.h"
#include "tuner_window.h"

namespace moewb::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("MoE Workbench"));
  m_runner = new RunController(this);
  m_liveTimer = new QTimer(this);
  m_liveTimer->setInterval(500);
  connect(m_liveTimer, &QTimer::timeout, this, &MainWindow::liveTick);
  connect(m_runner, &RunController::finished, this, &MainWindow::onRunFinished);
  createCentralArea();
  createDocks();
  createActions();
  createStatusBar();
  connect(&m_document, &TraceDocument::opened, this, &MainWindow::onDocumentChanged);
  connect(&m_document, &TraceDocument::opening, this, &MainWindow::onDocumentChanged);
  connect(&m_document, &TraceDocument::refreshed, this, &MainWindow::onDocumentChanged);
  connect(&m_document, &TraceDocument::closed, this, &MainWindow::onDocumentChanged);
  resize(1500, 950);
  updateActions();
  updateStatus();
  m_defaultLayout = saveState(kLayoutVersion);
}

MainWindow::~MainWindow() = default;

void MainWindow::createCentralArea() {
  m_timeline = new TimelineView;
  m_timeline->setDocument(&m_document);
  m_heatmap = new HeatmapPanel;
  m_heatmap->setModel(m_document.expertLoadModel());
  connect(m_timeline, &TimelineView::stepActivated, m_heatmap, &HeatmapPanel::showStep);
  // A click on an "Over time" strip cell: that step in the heat map, and the timeline zoomed to
  // the step's experts.fwd slice of the layer (outlined).
  connect(m_heatmap, &HeatmapPanel::expertCellActivated, this, [this](qint64 step, int layer) {
    m_heatmap->showStep(step);
    const auto found = findLayerSlice(m_document.timeline(), m_document.stepModel()->rows(),
                                      "experts.fwd", step, layer);
    if (!found) {
      statusBar()->showMessage(tr("No experts.fwd of layer %1 at step %2.").arg(layer).arg(step));
      return;
    }
    const TimelineSlice& s = found->slice;
    const int64_t padNs = std::max<int64_t>(s.durNs / 4, 1);
    m_timeline->showTimeRange({s.startNs - padNs, s.endNs() + padNs});
    m_timeline->setHighlightedSlices({{found->track, s.startNs, s.durNs}});
    statusBar()->showMessage(tr("Step %1, layer %2: experts.fwd took %3").arg(step).arg(layer)
                                 .arg(QString::fromStdString(formatDurationNs(s.durNs))), 15000);
  });

  m_lossChart = new ChartView;
  m_lossChart->setTitle(tr("Loss per step"));
  m_lossChart->setAxisTitles(tr("step"), tr("cross-entropy (nats)"));
  m_lossChart->setColor(theme::series(0));
  m_lossChart->setValueFormat([](double v) { return QString::number(v, 'f', 2); });
  m_stepTimeChart = new ChartView;
  m_stepTimeChart->setTitle(tr("Step time"));
  m_stepTimeChart->setAxisTitles(tr("step"), tr("ms"));
  m_stepTimeChart->setColor(theme::series(1));
  m_stepTimeChart->setValueFormat([](double v) { return QString::number(v, 'g', 4); });
  m_memoryChart = new ChartView;
  m_memoryChart->setTitle(tr("Memory per step"));
  m_memoryChart->setAxisTitles(tr("step"), tr("MiB"));
  m_memoryChart->setYFromZero(true);
  m_memoryChart->setValueFormat([](double mib) {
    return std::fabs(mib) >= 1000 ? QString::number(mib, 'f', 0) : QString::number(mib, 'g', 4);
  });
  m_gradNormChart = new ChartView;
  m_gradNormChart->setTitle(tr("Gradient norm"));
  m_gradNormChart->setAxisTitles(tr("step"), tr("L2 norm"));
  m_gradNormChart->setColor(theme::series(2));
  m_gradNormChart->setValueFormat([](double v) { return QString::number(v, 'g', 3); });
  m_lrChart = new ChartView;
  m_lrChart->setTitle(tr("Learning rate"));
  m_lrChart->setAxisTitles(tr("step"), tr("lr"));
  m_lrChart->setColor(theme::series(3));
  m_lrChart->setYFromZero(true);
  m_lrChart->setValueFormat([](double v) { return QString::number(v, 'g', 3); });
  auto* charts = new QSplitter(Qt::Vertical);
  charts->addWidget(m_lossChart);
  charts->addWidget(m_stepTimeChart);
  charts->addWidget(m_memoryChart);
  charts->addWidget(m_gradNormChart);
  charts->addWidget(m_lrChart);

  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->addWidget(m_heatmap);
  bottom->addWidget(charts);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  auto* central = new QSplitter(Qt::Vertical);
  central->addWidget(m_timeline);
  central->addWidget(bottom);
  central->setStretchFactor(0, 2);
  central->setStretchFactor(1, 3);
  central->setSizes({260, 640});
  central->setHandleWidth(4);
  setCentralWidget(central);

  StepTableModel* steps = m_document.stepModel();
  connect(steps, &QAbstractItemModel::rowsInserted, this, &MainWindow::updateCharts);
  connect(steps, &QAbstractItemModel::modelReset, this, &MainWindow::updateCharts);
  ConfigChangeModel* changes = m_document.configChangeModel();
  connect(changes, &QAbstractItemModel::rowsInserted, this, &MainWindow::updateChartMarkers);
  connect(changes, &QAbstractItemModel::modelReset, this, &MainWindow::updateChartMarkers);
  // The memory account is loaded after the step rows, so follow the document's signals.
  connect(&m_document, &TraceDocument::opened, this, &MainWindow::updateMemoryChart);
  connect(&m_document, &TraceDocument::opening, this, &MainWindow::updateMemoryChart);
  connect(&m_document, &TraceDocument::refreshed, this, &MainWindow::updateMemoryChart);
  connect(&m_document, &TraceDocument::closed, this, &MainWindow::updateMemoryChart);
}

void MainWindow::setTimelineHeight(int px) {
  auto* central = qobject_cast<QSplitter*>(centralWidget());
  if (!central || central->count() != 2) return;
  const int total = std::max(central->height(), px + 100);
  central->setSizes({px, std::max(total - px, 100)});
}

void MainWindow::createDocks() {
  m_livePanel = new LiveControlPanel;
  m_livePanel->setRunController(m_runner);
  m_livePanel->setDocument(&m_document);
  connect(m_livePanel, &LiveControlPanel::message, this, [this](const QString& text, bool error) {
    statusBar()->showMessage(text, error ? 15000 : 6000);
  });
  m_changeTable = new QTableView;
  m_changeTable->setModel(m_document.configChangeModel());
  connect(m_changeTable, &QTableView::clicked, this, &MainWindow::showConfigChange);
  connect(m_document.configChangeModel(), &QAbstractItemModel::rowsInserted, m_changeTable,
          [this] { m_changeTable->scrollToBottom(); });
  m_stepTable = new QTableView;
  m_stepTable->setModel(m_document.stepModel());
  m_stepTable->setColumnHidden(StepTableModel::kRank, true);  // until a trace has 2+ ranks
  m_phaseTable = new QTableView;
  auto* proxy = new QSortFilterProxyModel(this);
  proxy->setSourceModel(m_document.phaseSummaryModel());
  proxy->setSortRole(PhaseSummaryModel::kSortRole);
  proxy->setDynamicSortFilter(true);
  m_phaseTable->setModel(proxy);
  m_phaseTable->setSortingEnabled(true);
  m_phaseTable->sortByColumn(PhaseSummaryModel::kTotal, Qt::DescendingOrder);
  for (QTableView* table : {m_stepTable, m_phaseTable, m_changeTable}) {
    table->verticalHeader()->hide();
    table->verticalHeader()->setDefaultSectionSize(22);
    table->setAlternatingRowColors(true);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->horizontalHeader()->setStretchLastSection(true);
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // Fit the columns to the rows on screen only: measuring every row costs O(rows) per insert
    // (0.25 s at 20k steps).
    table->horizontalHeader()->setResizeContentsPrecision(0);
  }
  connect(m_document.stepModel(), &QAbstractItemModel::rowsInserted, m_stepTable,
          [this] { m_stepTable->scrollToBottom(); });
  connect(m_stepTable, &QTableView::clicked, this, [this](const QModelIndex& index) {
    const auto& rows = m_document.stepModel()->rows();
    if (index.row() < int(rows.size())) m_heatmap->showStep(rows[size_t(index.row())].step);
  });
  auto dock = [this](const QString& title, const char* name, QWidget* widget) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(QString::fromLatin1(name));
    d->setWidget(widget);
    addDockWidget(Qt::RightDockWidgetArea, d);
    return d;
  };
  QDockWidget* liveDock = dock(tr("Live control"), "live control", m_livePanel);
  m_liveDock = liveDock;
  QDockWidget* stepDock = dock(tr("Steps"), "steps", m_stepTable);
  QDockWidget* phaseDock = dock(tr("Phase summary"), "phases", m_phaseTable);
  QDockWidget* changeDock = dock(tr("Config changes"), "config changes", m_changeTable);
  // GPU details: what a click on a kernel in the timeline selected (launch details and the
  // expert load of its step and layer), tabbed with the summaries and raised on each click.
  m_gpuTable = new QTableView;
  m_gpuTable->setModel(m_document.gpuDetailsModel());
  m_gpuTable->setWordWrap(false);
  m_gpuTable->setTextElideMode(Qt::ElideMiddle);
  QDockWidget* gpuDock = dock(tr("GPU kernel"), "gpu kernel", m_gpuTable);
  m_gpuDock = gpuDock;
  m_phaseDock = phaseDock;
  tabifyDockWidget(phaseDock, changeDock);
  tabifyDockWidget(phaseDock, gpuDock);
  phaseDock->raise();
  resizeDocks({liveDock, stepDock, phaseDock}, {470, 470, 470}, Qt::Horizontal);
  resizeDocks({liveDock, stepDock, phaseDock}, {440, 230, 230}, Qt::Vertical);
  m_docks = {liveDock, stepDock, phaseDock, changeDock, gpuDock};
  // Until a run is live the Live control dock takes no room (View > Live control shows it).
  liveDock->hide();
  createParallelDock();
  createSwapDock();
  createSelectionDock();
  createBreakdownDock();  // main_window_views.cpp
  createBookmarkDock();
  m_gpuTable->verticalHeader()->hide();
  m_gpuTable->verticalHeader()->setDefaultSectionSize(22);
  m_gpuTable->setAlternatingRowColors(true);
  m_gpuTable->horizontalHeader()->setStretchLastSection(true);
  m_gpuTable->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  connect(m_timeline, &TimelineView::gpuSliceActivated, this, [this, gpuDock](qint64 id) {
    const Status status = m_document.selectGpuSlice(SliceId(id));
    if (!status.isOk()) {
      statusBar()->showMessage(userMessage(status), 15000);
      return;
    }
    gpuDock->show();
    gpuDock->raise();
  });
}

// The Parallelism dock: tabbed with Live control at the top of the right column, shown while a
// trace of a parallel run is open. Its model reads the document's file through a reader of its own.
void MainWindow::createParallelDock() {
  m_parallel = new ParallelModel(this);
  m_parallel->setDocument(&m_document);
  m_parallelPanel = new ParallelPanel;
  m_parallelPanel->setModel(m_parallel);
  m_parallelDock = new QDockWidget(tr("Parallelism"), this);
  m_parallelDock->setObjectName(QStringLiteral("parallelism"));
  // In a scroll area: on a small screen the panel (matrix, two tables) scrolls instead of
  // making the window taller or wider than 1280x720.
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(m_parallelPanel);
  m_parallelDock->setWidget(scroll);
  addDockWidget(Qt::RightDockWidgetArea, m_parallelDock);
  // A tab beside Live control (not a column of its own), so every dock fits 1280x720.
  tabifyDockWidget(m_liveDock, m_parallelDock);
  m_parallelDock->hide();
  m_docks.push_back(m_parallelDock);
  auto report = [this](const QString& text) { statusBar()->showMessage(text, 15000); };
  connect(m_parallel, &ParallelModel::failed, this, report);
  connect(m_parallelPanel, &ParallelPanel::message, this, report);
  connect(m_parallelPanel, &ParallelPanel::collectiveActivated, this,
          [this](const storage::MatchedCollective& match) { highlightCollective(match, true); });
  connect(m_timeline, &TimelineView::sliceActivated, this, &MainWindow::selectCollectiveSlice);
  // After the model's own handlers (connected in setDocument above), so it has loaded.
  connect(&m_document, &TraceDocument::opened, this, &MainWindow::updateParallelDock);
  connect(&m_document, &TraceDocument::refreshed, this, &MainWindow::updateParallelDock);
  connect(&m_document, &TraceDocument::closed, this, &MainWindow::updateParallelDock);
}

void MainWindow::updateParallelDock() {
  const bool parallel = m_parallel->isParallel();
  if (parallel == m_parallelTrace) return;  // the user may have closed or opened it since
  m_parallelTrace = parallel;
  m_parallelDock->setVisible(parallel);
  if (parallel) {
    m_parallelDock->raise();
    resizeDocks({m_parallelDock}, {640}, Qt::Horizontal);
  }
}

// A click on a host slice: when it is a collective, outline its peers and show it in the dock;
// otherwise drop the outline.
void MainWindow::selectCollectiveSlice(qint64 trackId, qint64 startNs) {
  if (!m_parallel->isParallel()) return;
  auto found = m_parallel->collectiveAt(TrackId(trackId), startNs);
  if (!found.isOk()) {
    statusBar()->showMessage(userMessage(found.status()), 15000);
    return;
  }
  if (!found->has_value()) {
    m_timeline->setHighlightedSlices({});
    return;
  }
  highlightCollective(**found, false);
  m_parallelPanel->showCollective(**found);
  m_parallelDock->show();
  m_parallelDock->raise();
}

void MainWindow::highlightCollective(const storage::MatchedCollective& match, bool zoom) {
  std::vector<TimelineHighlight> slices;
  for (const storage::CollectiveArrival& a : match.arrivals) {
    slices.push_back({a.track, a.startNs, a.durNs});
  }
  m_timeline->setHighlightedSlices(std::move(slices));
  if (zoom) {
    // The collective in the middle third of the window.
    const int64_t spanNs = std::max<int64_t>(match.endNs - match.firstStartNs, 1000);
    m_timeline->showTimeRange({match.firstStartNs - spanNs, match.endNs + spanNs});
  }
  statusBar()->showMessage(
      tr("%1 on %2 [%3] seq %4, step %5: rank %6 arrived last; the peers waited %7 in total "
         "(at most %8)")
          .arg(QString::fromStdString(match.op), QString::fromStdString(match.commGroup),
               QString::fromStdString(match.peers))
          .arg(match.seq)
          .arg(match.step)
          .arg(match.lastRank)
          .arg(QString::fromStdString(formatDurationNs(match.totalWaitNs)),
               QString::fromStdString(formatDurationNs(match.skewNs()))),
      15000);
}

void MainWindow::createActions() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  m_openAction = file->addAction(tr("&Open trace..."), this, &MainWindow::openDialog);
  m_openAction->setShortcut(QKeySequence::Open);
  addCompareActions(file, this, [this] { return m_document.path(); });  // compare_window.h
  addTunerActions(file, this);  // tuner_window.h: File > Open study...
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  m_runAction = run->addAction(tr("&Start run..."), this, &MainWindow::runDialog);
  m_runAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  m_runAction->setToolTip(tr("Train a config with the embedded engine and watch it live"));
  m_stopAction = run->addAction(tr("S&top run"), this, &MainWindow::stopRun);
  m_stopAction->setToolTip(tr("Stop the run after the step in progress"));
  m_liveAction = run->addAction(tr("&Live refresh"));
  m_liveAction->setCheckable(true);
  m_liveAction->setToolTip(tr("Re-read the open trace every 500 ms"));
  connect(m_liveAction, &QAction::toggled, this, [this](bool on) {
    if (on)
      m_liveTimer->start();
    else if (!m_runner->isRunning())
      m_liveTimer->stop();
  });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : m_docks) view->addAction(d->toggleViewAction());
  view->addSeparator();
  QAction* fit = view->addAction(tr("&Fit all"), m_timeline, &TimelineView::fitAll);
  fit->setShortcut(Qt::Key_Home);
  auto zoomAtCentre = [this](double factor) {
    m_timeline->zoomBy(factor, m_timeline->timeGeometry().widthPx / 2);
  };
  QAction* zoomIn = view->addAction(tr("Zoom &in"), this, [=] { zoomAtCentre(1.5625); });
  QAction* zoomOut = view->addAction(tr("Zoom &out"), this, [=] { zoomAtCentre(0.64); });
  view->addAction(tr("Expand &layers"), m_timeline, &TimelineView::toggleAllLayers);
  view->addSeparator();
  QAction* reset = view->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout);
  reset->setToolTip(tr("Put every dock back where and as visible as in a new window"));
  m_openAction->setIcon(style()->standardIcon(QStyle::SP_DialogOpenButton));
  m_runAction->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
  m_stopAction->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
  m_liveAction->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));

  QToolBar* bar = addToolBar(tr("Main"));
  bar->setObjectName(QStringLiteral("main toolbar"));
  bar->setMovable(false);
  bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  bar->addAction(m_openAction);
  bar->addSeparator();
  bar->addAction(m_runAction);
  bar->addAction(m_stopAction);
  bar->addAction(m_liveAction);
  bar->addSeparator();
  bar->addAction(fit);
  bar->addAction(zoomIn);
  bar->addAction(zoomOut);
  createFollowActions(view, bar);  // main_window_views.cpp: follow mode and bookmarks
  auto* ranks = new QWidget;
  auto* ranksRow = new QHBoxLayout(ranks);
  ranksRow->setContentsMargins(8, 0, 0, 0);
  ranksRow->addWidget(new QLabel(tr("Ranks")));
  m_ranksChoice = new RanksChoice;
  ranksRow->addWidget(m_ranksChoice);
  m_ranksAction = bar->addWidget(ranks);
  m_ranksAction->setVisible(false);
  connect(m_ranksChoice, &RanksChoice::choiceChanged, this, &MainWindow::updateCharts);
  connect(m_ranksChoice, &RanksChoice::choiceChanged, this, &MainWindow::updateMemoryChart);
}

void MainWindow::createStatusBar() {
  m_fileLabel = new QLabel;
  m_stepsLabel = new QLabel;
  m_lossLabel = new QLabel;
  m_rateLabel = new QLabel;
  m_runLabel = new QLabel;
  // The file label does not stretch, so temporary messages (run replies, errors) have room.
  statusBar()->addPermanentWidget(m_fileLabel);
  for (QLabel* label : {m_stepsLabel, m_lossLabel, m_rateLabel, m_runLabel}) {
    label->setMinimumWidth(110);
    statusBar()->addPermanentWidget(label);
  }
  m_loadBar = new QProgressBar;
  m_loadBar->setRange(0, 1000);
  m_loadBar->setMaximumWidth(220);
  m_loadBar->setFormat(tr("loading %p%"));
  m_cancelLoad = new QPushButton(tr("Cancel"));
  m_cancelLoad->setToolTip(tr("Stop loading; the window stays empty"));
  // Permanent, left of the file label: temporary messages would hide normal status widgets.
  statusBar()->insertPermanentWidget(0, m_loadBar);
  statusBar()->insertPermanentWidget(1, m_cancelLoad);
  m_loadBar->hide();
  m_cancelLoad->hide();
  connect(m_cancelLoad, &QPushButton::clicked, &m_document, &TraceDocument::cancelLoad);
  connect(&m_document, &TraceDocument::loadProgress, this, [this](double fraction) {
    m_loadBar->setValue(int(std::lround(std::clamp(fraction, 0.0, 1.0) * 1000)));
  });
  connect(&m_document, &TraceDocument::opened, this, [this] {
    if (!m_openPending) return;
    statusBar()->showMessage(tr("Opened %1").arg(m_document.path()), 4000);
    const bool running = m_document.run() && m_document.run()->status == "running";
    if (running && !m_runner->isRunning()) m_liveAction->setChecked(true);
    onLoadEnded();
  });
  connect(&m_document, &TraceDocument::failed, this, [this](const QString& message) {
    if (!m_openPending) return;
    onLoadEnded();
    showError(tr("Cannot open trace"), message);
  });
  connect(&m_document, &TraceDocument::loadCanceled, this, [this](const QString& path) {
    if (!m_openPending) return;
    onLoadEnded();
    statusBar()->showMessage(tr("Loading %1 was cancelled").arg(path), 6000);
  });
}

void MainWindow::onLoadEnded() {
  m_openPending = false;
  m_loadBar->hide();
  m_cancelLoad->hide();
  onDocumentChanged();
  emit openFinished(m_document.lastLoadStatus().isOk());
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open trace"), QFileInfo(m_document.path()).absolutePath(),
      tr("MoE Workbench traces (*.sqlite *.db *.moewb);;All files (*)"));
  if (!path.isEmpty()) beginOpen(path);
}

void MainWindow::beginOpen(const QString& path) {
  if (m_openPending) m_document.cancelLoad();
  m_openPending = true;
  m_loadBar->setValue(0);
  m_loadBar->show();
  m_cancelLoad->show();
  statusBar()->showMessage(tr("Loading %1...").arg(path));
  m_document.beginOpen(path);
}

Status MainWindow::openFile(const QString& path) {
  beginOpen(path);
  QEventLoop loop;
  connect(this, &MainWindow::openFinished, &loop, &QEventLoop::quit);
  if (m_openPending) loop.exec();
  return m_document.lastLoadStatus();
}

void MainWindow::showError(const QString& title, const QString& message) {
  m_lastError = message;
  statusBar()->showMessage(message, 15000);
  if (!m_errorDialogs) return;
  auto* box = new QMessageBox(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

void MainWindow::onDocumentChanged() {
  updateStatus();
  updateActions();
  setWindowTitle(m_document.isOpen()
                     ? tr("%1 - MoE Workbench").arg(QFileInfo(m_document.path()).fileName())
                     : tr("MoE Workbench"));
}

void MainWindow::updateCharts() {
  const auto& rows = m_document.stepModel()->rows();
  const std::vector<int32_t> ranks = stepRanks(rows);
  m_ranksChoice->setRanks(ranks);
  m_ranksAction->setVisible(ranks.size() > 1);
  m_stepTable->setColumnHidden(StepTableModel::kRank, ranks.size() <= 1);
  bool hasGradNorm = false, hasLr = false;
  for (const storage::StepRow& r : rows) {
    hasGradNorm = hasGradNorm || r.gradNorm != 0;
    hasLr = hasLr || r.lr != 0;
  }
  const RankChoice choice = m_ranksChoice->choice();
  auto series = [&](const std::function<double(const storage::StepRow&)>& value, int color) {
    return rankSeries(rankLines(rows, value, choice), theme::series(color));
  };
  // Traces from before the step table had these columns read them as 0: say so instead.
  const bool anySteps = !rows.empty();
  m_gradNormChart->setEmptyText(anySteps ? tr("no gradient norms in this trace")
                                         : tr("no steps yet"));
  m_lrChart->setEmptyText(anySteps ? tr("no learning rates in this trace") : tr("no steps yet"));
  m_lossChart->setSeries(series([](const storage::StepRow& r) { return r.loss; }, 0));
  m_stepTimeChart->setSeries(series(
      [](const storage::StepRow& r) { return double(r.endNs - r.startNs) / double(kNsPerMs); }, 1));
  m_gradNormChart->setSeries(
      hasGradNorm ? series([](const storage::StepRow& r) { return r.gradNorm; }, 2)
                  : std::vector<ChartSeries>{});
  m_lrChart->setSeries(hasLr ? series([](const storage::StepRow& r) { return r.lr; }, 3)
                             : std::vector<ChartSeries>{});
}

void MainWindow::updateChartMarkers() {
  const auto& rows = m_document.configChangeModel()->rows();
  std::vector<ChartMarker> markers;
  for (const ConfigMarker& m : stepMarkers(rows)) markers.push_back({m.x, markerText(m, rows)});
  m_lossChart->setMarkers(markers);
  m_stepTimeChart->setMarkers(markers);
  m_gradNormChart->setMarkers(markers);
  m_lrChart->setMarkers(markers);
  m_memoryChart->setMarkers(std::move(markers));
}

// One rank's four categories (a one-rank trace, or the rank the Ranks choice names); for all
// ranks or the band, the total account per rank as rank lines (rankLines: a line per rank, the
// min / median / max band past kMaxRankLines or by choice).
void MainWindow::updateMemoryChart() {
  const bool hasSteps = m_document.isOpen() && !m_document.stepModel()->rows().empty();
  const RankChoice choice = m_ranksChoice->choice();
  // A streamed load refreshes often; rebuild the series only when the samples changed.
  if (m_memoryChartRevision == m_document.memoryRevision() && m_memoryChartHasSteps == hasSteps &&
      m_memoryChartChoice == choice) {
    return;
  }
  m_memoryChartRevision = m_document.memoryRevision();
  m_memoryChartHasSteps = hasSteps;
  m_memoryChartChoice = choice;
  const auto& samples = m_document.memory();  // in (rank, step) order
  const bool ranks = !samples.empty() && samples.front().rank != samples.back().rank;
  std::vector<ChartSeries> series;
  QString title;
  if (!ranks || choice.view == RankChoice::View::kOne) {
    const int32_t rank = ranks ? choice.rank : 0;
    for (int c = 0; c < MemorySample::kCategoryCount; ++c) {
      ChartSeries s;
      s.name = QString::fromLatin1(MemorySample::categoryName(c));
      s.color = theme::series(c);
      s.dashed = c == MemorySample::kGrads;  // grads usually equal the weights: keep both visible
      for (const MemorySample& m : samples) {
        if ((!ranks || m.rank == rank) && !std::isnan(m.bytes[c])) {
          s.points.emplace_back(double(m.step), m.bytes[c] / 1048576.0);
        }
      }
      series.push_back(std::move(s));
    }
    title = ranks ? tr("Memory per step (rank %1)").arg(rank) : tr("Memory per step");
  } else {
    std::map<int32_t, std::vector<QPointF>> byRank;
    for (const MemorySample& m : samples) {
      double total = 0;
      bool any = false;
      for (double bytes : m.bytes) {
        if (std::isnan(bytes)) continue;
        total += bytes;
        any = true;
      }
      if (any) byRank[m.rank].emplace_back(double(m.step), total / 1048576.0);
    }
    series = rankSeries(rankLines(std::move(byRank), choice), theme::series(0));
    title = tr("Memory per step (total per rank)");
  }
  if (m_memoryChart->title() != title) m_memoryChart->setTitle(title);
  m_memoryChart->setSeries(std::move(series));
  m_memoryChart->setEmptyText(hasSteps ? tr("no memory counters in this trace")
                                       : tr("no steps yet"));
}

void MainWindow::showConfigChange(const QModelIndex& index) {
  const auto& rows = m_document.configChangeModel()->rows();
  if (!index.isValid() || size_t(index.row()) >= rows.size()) return;
  const storage::ConfigChangeRow& row = rows[size_t(index.row())];
  // Zoom the timeline to the three steps before and after the change (or, without step rows
  // there, centre it in the current window), and show the step's expert load.
  constexpr int64_t kStepsAround = 3;
  const auto& steps = m_document.stepModel()->rows();
  auto byStep = [](const storage::StepRow& r, int64_t step) { return r.step < step; };
  auto first = std::lower_bound(steps.begin(), steps.end(), row.step - kStepsAround, byStep);
  auto last = std::lower_bound(steps.begin(), steps.end(), row.step + kStepsAround, byStep);
  if (last == steps.end() && !steps.empty()) last = std::prev(steps.end());
  if (first != steps.end() && last != steps.end() && first->startNs <= row.tsNs &&
      last->endNs >= row.tsNs) {
    m_timeline->showTimeRange({first->startNs, last->endNs});
  } else {
    const int64_t halfNs = std::max<int64_t>(m_timeline->timeGeometry().durNs() / 2, 1);
    m_timeline->showTimeRange({row.tsNs - halfNs, row.tsNs + halfNs});
  }
  m_heatmap->showStep(row.step);
  statusBar()->showMessage(describeConfigChange(row), 8000);
}

void MainWindow::updateStatus() {
  if (!m_document.isOpen()) {
    m_fileLabel->setText(tr("No trace open"));
    for (QLabel* l : {m_stepsLabel, m_lossLabel, m_rateLabel, m_runLabel}) l->clear();
    return;
  }
  m_fileLabel->setText(m_document.path());
  const auto& rows = m_document.stepModel()->rows();
  m_stepsLabel->setText(tr("steps: %1").arg(rows.size()));
  m_lossLabel->setText(rows.empty() ? tr("loss: -")
                                    : tr("loss: %1").arg(rows.back().loss, 0, 'f', 4));
  m_rateLabel->setText(
      rows.empty() ? tr("tokens/s: -")
                   : tr("tokens/s: %1")
                         .arg(QString::fromStdString(formatCount(rows.back().tokensPerSecond))));
  const auto& run = m_document.run();
  // A run still marked "running" says whether its writer is alive (storage/run_liveness.h).
  QString state = run ? QString::fromStdString(storage::describeRunStatus(
                            *run, m_document.meta(), QDateTime::currentMSecsSinceEpoch()))
                      : tr("no run");
  int problems = 0;
  for (const storage::StatRow& s : m_document.stats()) {
    if (s.value != 0 && s.severity != "info") ++problems;
  }
  if (problems) state += tr(" | %1 data issue(s)").arg(problems);
  m_runLabel->setText(tr("run: %1").arg(state));
}

QString MainWindow::runStatusText() const { return m_runLabel->text(); }

void MainWindow::updateActions() {
  const bool running = m_runner->isRunning();
  m_runAction->setEnabled(!running);
  m_stopAction->setEnabled(running);
}

bool MainWindow::saveScreenshot(const QString& path) {
  // The timeline's GPU lanes and memory rows are read on a worker: wait for them (bounded).
  QElapsedTimer waited;
  waited.start();
  while (m_timeline->windowDataPending() && waited.elapsed() < 10'000) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  }
  QCoreApplication::processEvents();
  return grab().save(path, "PNG");
}

namespace {

// Where the layout is kept (the settings file or registry key of "MoE Workbench/moewb-gui").
constexpr char kSettingsOrganisation[] = "MoE Workbench";
constexpr char kSettingsApplication[] = "moewb-gui";

}  // namespace

bool MainWindow::useSavedLayout() {
  m_saveLayoutOnClose = true;
  QSettings settings{QLatin1String(kSettingsOrganisation), QLatin1String(kSettingsApplication)};
  const QByteArray geometry = settings.value(QLatin1String(kGeometryKey)).toByteArray();
  const QByteArray state = settings.value(QLatin1String(kStateKey)).toByteArray();
  if (!geometry.isEmpty()) restoreGeometry(geometry);  // false (ignored) when not a geometry
  if (state.isEmpty()) return false;
  if (restoreState(state, kLayoutVersion)) return true;
  // Corrupt, or saved by another version: make sure nothing half-applied stays.
  restoreState(m_defaultLayout, kLayoutVersion);
  statusBar()->showMessage(tr("The saved window layout could not be read; using the default."),
                           6000);
  return false;
}

void MainWindow::saveLayout() {
  QSettings settings{QLatin1String(kSettingsOrganisation), QLatin1String(kSettingsApplication)};
  settings.setValue(QLatin1String(kGeometryKey), saveGeometry());
  settings.setValue(QLatin1String(kStateKey), saveState(kLayoutVersion));
  settings.sync();
}

void MainWindow::resetLayout() {
  restoreState(m_defaultLayout, kLayoutVersion);
  // The Parallelism, Swap and Bookmarks docks belong to the open trace: shown again when it has
  // them.
  if (m_parallelTrace) m_parallelDock->show();
  if (m_swapTrace) m_swapDock->show();
  if (m_bookmarks->rowCount() > 0) m_bookmarkDock->show();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (m_saveLayoutOnClose) saveLayout();
  m_liveTimer->stop();
  m_runner->requestStop();
  QMainWindow::closeEvent(event);
}

}  // namespace moewb::gui
