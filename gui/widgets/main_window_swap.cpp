// MainWindow: the Swap dock and what a click on a swap copy selects.
#include <QDockWidget>
#include <QStatusBar>
#include <QTabWidget>

#include "heatmap_panel.h"
#include "main_window.h"
#include "moewb/base/units.h"
#include "moewb/gui/swap_model.h"
#include "swap_panel.h"
#include "timeline_view.h"

namespace moewb::gui {

// The Swap dock: a tab beside the phase summary, config changes and GPU kernel docks, shown
// while a trace with swap rows is open. Its model reads the document's file through a reader of
// its own; the timeline draws the model's copies in swap lanes.
void MainWindow::createSwapDock() {
  m_swap = new SwapModel(this);
  m_swap->setDocument(&m_document);
  m_swapPanel = new SwapPanel;
  m_swapPanel->setModel(m_swap);
  m_swapDock = new QDockWidget(tr("Swap"), this);
  m_swapDock->setObjectName(QStringLiteral("swap"));
  m_swapDock->setWidget(m_swapPanel);
  addDockWidget(Qt::RightDockWidgetArea, m_swapDock);
  tabifyDockWidget(m_phaseDock, m_swapDock);
  m_phaseDock->raise();
  m_swapDock->hide();
  m_docks.push_back(m_swapDock);
  m_timeline->setSwapModel(m_swap);
  auto report = [this](const QString& text) { statusBar()->showMessage(text, 15000); };
  connect(m_swap, &SwapModel::failed, this, report);
  connect(m_swapPanel, &SwapPanel::message, this, report);
  connect(m_swap, &SwapModel::changed, this, &MainWindow::updateSwapDock);
  connect(m_timeline, &TimelineView::swapCopyActivated, this,
          [this](const storage::SwapEventRow& event) { (void)selectSwapWaiter(event); });
}

void MainWindow::updateSwapDock() {
  const bool swap = m_swap->hasSwap();
  if (swap == m_swapTrace) return;  // the user may have closed or opened it since
  m_swapTrace = swap;
  m_swapDock->setVisible(swap);
  if (swap) m_swapDock->raise();
}

Status MainWindow::selectSwapWaiter(const storage::SwapEventRow& event) {
  const QString what =
      QStringLiteral("L%1 %2").arg(event.layer).arg(QString::fromStdString(event.op));
  if (event.toHost && !swapCopyLate(event)) {
    statusBar()->showMessage(tr("%1 offload: compute did not wait for it").arg(what), 6000);
    return Status::ok();
  }
  const QString kind = event.toHost ? tr("offload") : tr("reload");
  auto found = m_swap->waiterOf(event);
  if (!found.isOk()) {
    statusBar()->showMessage(userMessage(found.status()), 15000);
    return found.status();
  }
  const SwapWaiter& w = *found;
  const QString stall = event.stallNs > 0
                            ? tr("late by %1").arg(QString::fromStdString(
                                  formatDurationNs(event.stallNs)))
                            : tr("on time");
  if (w.kind == SwapWaiter::kNone) {
    statusBar()->showMessage(tr("%1 %2 (%3): no kernel or phase found at its needed time")
                                 .arg(what, kind, stall), 15000);
    return Status::ok();
  }
  if (w.kind == SwapWaiter::kKernel) {
    const Status status = m_document.selectGpuSlice(w.slice);
    if (!status.isOk()) {
      statusBar()->showMessage(userMessage(status), 15000);
      return status;
    }
    m_timeline->setSelectedGpuSlice(w.slice);
    m_gpuDock->show();
    m_gpuDock->raise();
  } else {
    m_timeline->setHighlightedSlices({{w.track, w.startNs, w.durNs}});
  }
  if (w.step >= 0) m_heatmap->showStep(w.step);
  statusBar()->showMessage(tr("%1 %2 (%3): %4 %5 waited for it")
                               .arg(what, kind, stall,
                                    w.kind == SwapWaiter::kKernel ? tr("kernel") : tr("phase"),
                                    QString::fromStdString(w.name)),
                           15000);
  return Status::ok();
}

bool MainWindow::showSwapTab(const QString& tab) {
  static const QStringList kTabs = {QStringLiteral("memory"), QStringLiteral("pcie"),
                                    QStringLiteral("layers"), QStringLiteral("what-if")};
  const int index = kTabs.indexOf(tab.toLower());
  if (index < 0 || !m_swap->hasSwap()) return false;
  m_swapDock->show();
  m_swapDock->raise();
  m_swapPanel->tabs()->setCurrentIndex(index);
  return true;
}

}  // namespace moewb::gui
