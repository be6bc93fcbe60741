// MainWindow: the Selection dock, the aggregate table of the timeline's range selection.
#include <QDockWidget>
#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTableView>
#include <QVBoxLayout>

#include "main_window.h"
#include "moewb/gui/selection_model.h"
#include "timeline_view.h"

namespace moewb::gui {

// A tab beside the phase summary, hidden until the first range selection; each selection
// (Shift+drag on the timeline) fills it and raises it, Esc on the timeline empties it.
// Double-clicking a row zooms the timeline to that name's longest occurrence inside the range.
void MainWindow::createSelectionDock() {
  m_selection = new SelectionModel(this);
  m_selection->setDocument(&m_document);
  auto* proxy = new QSortFilterProxyModel(this);
  proxy->setSourceModel(m_selection);
  proxy->setSortRole(SelectionModel::kSortRole);
  proxy->setDynamicSortFilter(true);
  m_selectionTable = new QTableView;
  m_selectionTable->setModel(proxy);
  m_selectionTable->setSortingEnabled(true);
  m_selectionTable->sortByColumn(SelectionModel::kTotal, Qt::DescendingOrder);
  m_selectionTable->verticalHeader()->hide();
  m_selectionTable->verticalHeader()->setDefaultSectionSize(22);
  m_selectionTable->setAlternatingRowColors(true);
  m_selectionTable->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_selectionTable->setWordWrap(false);
  m_selectionTable->setTextElideMode(Qt::ElideMiddle);
  m_selectionTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_selectionTable->horizontalHeader()->setResizeContentsPrecision(0);
  m_selectionLabel = new QLabel(m_selection->summaryText());
  m_selectionLabel->setWordWrap(true);
  auto* panel = new QWidget;
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  // No taller than the docks it is tabbed with (the window fits 1280x720 with every dock).
  m_selectionTable->setMinimumHeight(40);
  layout->addWidget(m_selectionLabel);
  layout->addWidget(m_selectionTable, 1);
  m_selectionDock = new QDockWidget(tr("Selection"), this);
  m_selectionDock->setObjectName(QStringLiteral("selection"));
  m_selectionDock->setWidget(panel);
  addDockWidget(Qt::RightDockWidgetArea, m_selectionDock);
  tabifyDockWidget(m_phaseDock, m_selectionDock);
  m_phaseDock->raise();
  m_selectionDock->hide();
  m_docks.push_back(m_selectionDock);

  auto summary = [this] { m_selectionLabel->setText(m_selection->summaryText()); };
  connect(m_selection, &QAbstractItemModel::modelReset, this, summary);
  connect(m_selection, &QAbstractItemModel::rowsInserted, this, summary);
  connect(m_selection, &SelectionModel::aggregated, this, summary);
  connect(m_selection, &SelectionModel::failed, this,
          [this](const QString& text) { statusBar()->showMessage(text, 15000); });
  connect(m_timeline, &TimelineView::rangeSelected, this, [this](qint64 startNs, qint64 endNs) {
    m_selection->setRange({startNs, endNs});
    m_selectionDock->show();
    m_selectionDock->raise();
  });
  connect(m_timeline, &TimelineView::rangeCleared, m_selection, &SelectionModel::clear);
  connect(m_selectionTable, &QTableView::doubleClicked, this, [this, proxy](const QModelIndex& i) {
    const TimeRange longest = m_selection->longestOccurrence(proxy->mapToSource(i).row());
    if (longest.durNs() <= 0) return;
    const int64_t pad = std::max<int64_t>(longest.durNs() / 20, 1);
    m_timeline->showTimeRange({longest.startNs - pad, longest.endNs + pad});
  });
}

}  // namespace moewb::gui
