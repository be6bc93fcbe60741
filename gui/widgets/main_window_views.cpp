// MainWindow: the Step breakdown dock, follow-the-last-N-steps mode and bookmarks.
#include <QAction>
#include <QComboBox>
#include <QHBoxLayout>
#include <QCursor>
#include <QDockWidget>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QKeySequence>
#include <QLabel>
#include <QListView>
#include <QMenu>
#include <QShortcut>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableView>
#include <QToolBar>
#include <QVBoxLayout>
#include <algorithm>

#include "chart_view.h"
#include "heatmap_panel.h"
#include "main_window.h"
#include "moewb/base/units.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/step_breakdown_model.h"
#include "step_breakdown_view.h"
#include "timeline_view.h"

namespace moewb::gui {

// A tab beside the phase summary. The model reads the breakdown on its worker once a file has
// loaded and after live refreshes; a click on a bar selects its step everywhere.
// Parallel traces get a rank choice above the bars: the slowest rank per step (default) or one
// rank.
void MainWindow::createBreakdownDock() {
  m_breakdownModel = new StepBreakdownModel(this);
  m_breakdownModel->setDocument(&m_document);
  m_breakdownView = new StepBreakdownView;
  m_breakdownRanks = new QComboBox;
  m_breakdownRanks->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_breakdownRanks->setToolTip(
      tr("Whose breakdown each bar shows: per step the rank whose step took longest (its hover "
         "names it and the median rank's time), or one rank's"));
  m_breakdownRankBar = new QWidget;
  auto* bar = new QHBoxLayout(m_breakdownRankBar);
  bar->setContentsMargins(6, 2, 6, 0);
  bar->addWidget(new QLabel(tr("Ranks:")));
  bar->addWidget(m_breakdownRanks);
  bar->addStretch(1);
  m_breakdownRankBar->hide();
  auto* body = new QWidget;
  auto* column = new QVBoxLayout(body);
  column->setContentsMargins(0, 0, 0, 0);
  column->setSpacing(0);
  column->addWidget(m_breakdownRankBar);
  column->addWidget(m_breakdownView, 1);
  m_breakdownDock = new QDockWidget(tr("Step breakdown"), this);
  m_breakdownDock->setObjectName(QStringLiteral("step breakdown"));
  m_breakdownDock->setWidget(body);
  addDockWidget(Qt::RightDockWidgetArea, m_breakdownDock);
  tabifyDockWidget(m_phaseDock, m_breakdownDock);
  m_phaseDock->raise();
  m_docks.push_back(m_breakdownDock);
  connect(m_breakdownModel, &StepBreakdownModel::changed, this, &MainWindow::showBreakdown);
  connect(&m_document, &TraceDocument::opening, this, &MainWindow::showBreakdown);
  connect(m_breakdownRanks, &QComboBox::currentIndexChanged, this, &MainWindow::showBreakdown);
  connect(m_breakdownModel, &StepBreakdownModel::failed, this,
          [this](const QString& text) { statusBar()->showMessage(text, 15000); });
  connect(m_breakdownView, &StepBreakdownView::stepClicked, this, &MainWindow::selectStep);
}

void MainWindow::showBreakdown() {
  const StepBreakdownSet& all = m_breakdownModel->data();
  const QVariant chosen = m_breakdownRanks->currentData();
  {
    const QSignalBlocker block(m_breakdownRanks);
    m_breakdownRanks->clear();
    m_breakdownRanks->addItem(tr("slowest rank"));
    for (int32_t r : all.ranks) m_breakdownRanks->addItem(tr("rank %1").arg(r), r);
    m_breakdownRanks->setCurrentIndex(std::max(0, m_breakdownRanks->findData(chosen)));
  }
  m_breakdownRankBar->setVisible(all.isParallel());
  const QVariant rank = m_breakdownRanks->currentData();
  m_breakdownView->setData(
      shownBreakdown(all, rank.isValid() ? std::optional<int32_t>(rank.toInt()) : std::nullopt));
  m_breakdownView->setEmptyText(m_breakdownModel->isBusy() ? tr("reading the steps...")
                                                           : tr("no steps yet"));
}

void MainWindow::selectStep(qint64 step) {
  m_heatmap->showStep(step);
  const auto& rows = m_document.stepModel()->rows();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].step != step || rows[i].rank != 0) continue;
    m_stepTable->selectRow(int(i));
    m_stepTable->scrollTo(m_document.stepModel()->index(int(i), 0));
    const int64_t padNs = std::max<int64_t>((rows[i].endNs - rows[i].startNs) / 20, 1);
    m_timeline->showTimeRange({rows[i].startNs - padNs, rows[i].endNs + padNs});
    break;
  }
}

// View > Follow last N steps, with N in a spin box on the toolbar.
void MainWindow::createFollowActions(QMenu* view, QToolBar* bar) {
  view->addSeparator();
  m_followAction = view->addAction(tr("F&ollow last N steps"));
  m_followAction->setCheckable(true);
  m_followAction->setToolTip(
      tr("Keep the timeline and the charts on the last N steps while the trace grows; zooming "
         "or panning by hand turns it off"));
  m_followSteps = new QSpinBox;
  m_followSteps->setRange(1, 1'000'000);
  m_followSteps->setValue(50);
  m_followSteps->setPrefix(tr("last "));
  m_followSteps->setSuffix(tr(" steps"));
  m_followSteps->setToolTip(tr("How many steps Follow shows"));
  bar->addSeparator();
  bar->addAction(m_followAction);
  bar->addWidget(m_followSteps);
  connect(m_followAction, &QAction::toggled, this, [this](bool on) {
    if (on) {
      applyFollow();
      statusBar()->showMessage(tr("Following the last %1 steps").arg(m_followSteps->value()),
                               4000);
    } else {
      setChartsStepWindow(std::nullopt);
    }
  });
  connect(m_followSteps, &QSpinBox::valueChanged, this, [this] { applyFollow(); });
  connect(m_timeline, &TimelineView::windowChanged, this, &MainWindow::onTimelineWindowChanged);
  // After the views' own handlers (connected earlier), so the new steps are in.
  connect(&m_document, &TraceDocument::refreshed, this, &MainWindow::applyFollow);
  connect(&m_document, &TraceDocument::opened, this, &MainWindow::applyFollow);

  QAction* mark = view->addAction(tr("Add &bookmark..."), this, &MainWindow::addBookmark);
  mark->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
  mark->setToolTip(tr("Bookmark the timeline's selection, cursor or window (Ctrl+B, or M on "
                      "the timeline)"));
  auto* perfetto = new QShortcut(QKeySequence(Qt::Key_M), m_timeline);
  perfetto->setContext(Qt::WidgetWithChildrenShortcut);
  connect(perfetto, &QShortcut::activated, this, &MainWindow::addBookmark);
}

bool MainWindow::isFollowing() const {
  return m_followAction && m_followAction->isChecked();
}

void MainWindow::setChartsStepWindow(std::optional<std::pair<int64_t, int64_t>> steps) {
  std::optional<std::pair<double, double>> x;
  if (steps) x = std::make_pair(double(steps->first), double(steps->second));
  for (ChartView* chart : {m_lossChart, m_stepTimeChart, m_memoryChart, m_gradNormChart,
                           m_lrChart}) {
    chart->setXWindow(x);
  }
  m_breakdownView->setStepWindow(steps);
}

void MainWindow::applyFollow() {
  if (!isFollowing()) return;
  const auto window = lastStepsWindow(m_document.stepModel()->rows(), m_followSteps->value());
  if (!window) return;  // no committed step yet
  m_applyingFollow = true;
  m_timeline->showTimeRange({window->startNs, window->endNs});
  m_applyingFollow = false;
  const TimelineGeometry& g = m_timeline->timeGeometry();
  m_followWindow = {g.startNs, g.endNs};
  m_followBounds = m_document.timeBounds();
  setChartsStepWindow(std::make_pair(window->firstStep, window->lastStep));
}

// A window change while following: new data or a new file (the bounds moved) puts the last N
// steps back; a change of the window alone is the user's zoom or pan, which ends following.
void MainWindow::onTimelineWindowChanged() {
  if (!isFollowing() || m_applyingFollow) return;
  const TimelineGeometry& g = m_timeline->timeGeometry();
  if (!(m_document.timeBounds() == m_followBounds)) {
    applyFollow();
    return;
  }
  if (TimeRange{g.startNs, g.endNs} == m_followWindow) return;  // a resize
  m_followAction->setChecked(false);
  statusBar()->showMessage(
      tr("Follow last %1 steps is off: the timeline was zoomed or panned by hand")
          .arg(m_followSteps->value()),
      8000);
}

// The Bookmarks dock: click a bookmark (or its flag on the timeline) to zoom there, Delete
// removes it.
void MainWindow::createBookmarkDock() {
  m_bookmarks = new BookmarkModel(this);
  m_bookmarkList = new QListView;
  m_bookmarkList->setModel(m_bookmarks);
  m_bookmarkList->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_bookmarkList->setToolTip(tr("Ctrl+B (or M on the timeline) adds a bookmark; click one to "
                                "zoom there, Delete removes it"));
  m_bookmarkDock = new QDockWidget(tr("Bookmarks"), this);
  m_bookmarkDock->setObjectName(QStringLiteral("bookmarks"));
  m_bookmarkDock->setWidget(m_bookmarkList);
  addDockWidget(Qt::RightDockWidgetArea, m_bookmarkDock);
  // A tab beside Live control and Parallelism (a tab bar under Steps would cost the height that
  // keeps the window within 720 px), hidden until the trace has bookmarks.
  tabifyDockWidget(m_liveDock, m_bookmarkDock);
  m_bookmarkDock->hide();
  m_docks.push_back(m_bookmarkDock);
  connect(m_bookmarkList, &QListView::clicked, this,
          [this](const QModelIndex& index) { goToBookmark(index.row()); });
  // Drawn on the timeline too: a line and a named flag; clicking the flag goes there.
  m_timeline->setBookmarkModel(m_bookmarks);
  connect(m_timeline, &TimelineView::bookmarkActivated, this, [this](int row) {
    goToBookmark(row);
    m_bookmarkList->setCurrentIndex(m_bookmarks->index(row));
  });
  auto* remove = new QShortcut(QKeySequence::Delete, m_bookmarkList);
  remove->setContext(Qt::WidgetShortcut);
  connect(remove, &QShortcut::activated, this, [this] {
    const QModelIndex current = m_bookmarkList->currentIndex();
    if (current.isValid()) m_bookmarks->remove(current.row());
  });
  // The bookmarks of the file shown; kept in the settings, never in the trace.
  connect(&m_document, &TraceDocument::opening, this, [this](const QString& path) {
    m_bookmarks->load(path);
    if (m_bookmarks->rowCount() > 0) m_bookmarkDock->show();
  });
  connect(&m_document, &TraceDocument::closed, this, [this] { m_bookmarks->load(QString()); });
}

void MainWindow::addBookmark() {
  if (!m_document.isOpen()) {
    statusBar()->showMessage(tr("Open a trace to bookmark a place in it."), 6000);
    return;
  }
  const TimelineGeometry& g = m_timeline->timeGeometry();
  Bookmark b;
  b.windowStartNs = g.startNs;
  b.windowEndNs = g.endNs;
  if (const auto range = m_timeline->selectedRange()) {
    b.startNs = range->startNs;
    b.endNs = range->endNs;
  } else if (const auto& slice = m_timeline->selectedSlice()) {
    b.startNs = slice->startNs;
    b.endNs = slice->endNs();
  } else {
    // The time under the mouse when it is over the plot (right of the lane labels), else the
    // window's centre.
    const QPoint cursor = m_timeline->mapFromGlobal(QCursor::pos());
    const double gutterPx = double(m_timeline->width()) - g.widthPx;
    const bool over = m_timeline->rect().contains(cursor) && cursor.x() >= gutterPx;
    b.startNs = over ? int64_t(g.timeAt(cursor.x() - gutterPx)) : g.startNs + g.durNs() / 2;
    b.endNs = b.startNs;
  }
  for (const storage::StepRow& r : m_document.stepModel()->rows()) {
    if (r.rank == 0 && r.startNs <= b.startNs && b.startNs < r.endNs) b.step = r.step;
  }
  const QString at = QString::fromStdString(
      formatDurationNs(b.startNs - m_document.timeBounds().startNs));
  const QString defaultName = b.step >= 0 ? tr("step %1, +%2").arg(b.step).arg(at)
                                          : tr("+%1").arg(at);
  auto* dialog = new QInputDialog(this);
  dialog->setObjectName(QStringLiteral("bookmark name"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(tr("Add bookmark"));
  dialog->setLabelText(tr("Name of the bookmark:"));
  dialog->setTextValue(defaultName);
  const QString path = m_document.path();
  connect(dialog, &QInputDialog::textValueSelected, this,
          [this, b, defaultName, path](const QString& text) mutable {
            if (m_document.path() != path) return;  // another file was opened meanwhile
            b.name = text.trimmed().isEmpty() ? defaultName : text.trimmed();
            const int row = m_bookmarks->add(b);
            m_bookmarkDock->show();
            m_bookmarkDock->raise();
            m_bookmarkList->setCurrentIndex(m_bookmarks->index(row));
            statusBar()->showMessage(tr("Bookmark \"%1\" added").arg(b.name), 4000);
          });
  dialog->open();
}

void MainWindow::goToBookmark(int row) {
  const auto& all = m_bookmarks->bookmarks();
  if (row < 0 || size_t(row) >= all.size()) return;
  const Bookmark& b = all[size_t(row)];
  TimeRange window{b.windowStartNs, b.windowEndNs};
  // A window that does not show the mark (older data, a resized mark) is centred on it.
  if (window.isEmpty() || b.startNs < window.startNs || b.endNs > window.endNs) {
    const int64_t spanNs = std::max<int64_t>(b.endNs - b.startNs, 1'000'000);
    window = {b.startNs - spanNs, b.endNs + spanNs};
  }
  m_timeline->showTimeRange(window);
  if (b.endNs > b.startNs) m_timeline->setSelectedRange(TimeRange{b.startNs, b.endNs});
  statusBar()->showMessage(tr("Bookmark \"%1\"").arg(b.name), 4000);
}

}  // namespace moewb::gui
