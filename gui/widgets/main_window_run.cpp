// MainWindow runs: the Run dialog, starting/stopping the worker, and the 500 ms live refresh that
// opens the new trace as soon as it exists and then reads what each committed step added.
#include <QAction>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QStatusBar>
#include <QTimer>

#include "main_window.h"
#include "run_controller.h"

namespace moewb::gui {

QString MainWindow::defaultConfigDir() const {
  const QString appDir = QCoreApplication::applicationDirPath();
  for (const QString& dir : {QDir::current().filePath(QStringLiteral("samples/configs")),
                             appDir + QStringLiteral("/../share/moewb/configs"),
                             appDir + QStringLiteral("/../../samples/configs")}) {
    if (QFileInfo(dir).isDir()) return QDir(dir).canonicalPath();
  }
  return QDir::currentPath();
}

void MainWindow::runDialog() {
  const QString config = QFileDialog::getOpenFileName(
      this, tr("Choose a run config"), defaultConfigDir(), tr("Run configs (*.toml)"));
  if (config.isEmpty()) return;
  const QString stamp = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
  const QString suggested =
      QDir::current().filePath(QStringLiteral("runs/gui-%1.sqlite").arg(stamp));
  const QString out = QFileDialog::getSaveFileName(this, tr("Write the trace to"), suggested,
                                                   tr("MoE Workbench traces (*.sqlite)"));
  if (out.isEmpty()) return;
  (void)startRun(config, out);
}

Status MainWindow::startRun(const QString& configPath, const QString& outPath, qint64 steps) {
  const QFileInfo outInfo(outPath);
  if (!QDir().mkpath(outInfo.absolutePath())) {
    Status status = invalidArgument("cannot create the folder of " + outPath.toStdString());
    showError(tr("Cannot start run"), userMessage(status));
    return status;
  }
  Status status = m_runner->start(configPath, outInfo.absoluteFilePath(), steps);
  if (!status.isOk()) {
    showError(tr("Cannot start run"), userMessage(status));
    return status;
  }
  m_livePath = outInfo.absoluteFilePath();
  m_liveDock->show();
  m_liveDock->raise();
  m_liveTimer->start();
  updateActions();
  statusBar()->showMessage(tr("Running %1 for %2 steps into %3")
                               .arg(QFileInfo(configPath).fileName())
                               .arg(m_runner->plannedSteps())
                               .arg(m_livePath));
  liveTick();
  return status;
}

void MainWindow::stopRun() {
  m_runner->requestStop();
  statusBar()->showMessage(tr("Stopping after the step in progress..."));
}

void MainWindow::liveTick() {
  if (!m_livePath.isEmpty() && m_document.path() != m_livePath) {
    // The run's trace replaces whatever was open as soon as the file is readable. Failures are
    // expected while the writer is still creating it, so they are not reported here.
    if (!QFileInfo::exists(m_livePath)) return;
    if (m_document.isLoading()) m_document.cancelLoad();  // ends a File>Open still loading
    if (m_document.open(m_livePath).isOk()) onDocumentChanged();
    return;
  }
  Status status = m_document.refresh();
  if (!status.isOk()) {
    m_liveTimer->stop();
    m_liveAction->setChecked(false);
    showError(tr("Live refresh stopped"), userMessage(status));
    return;
  }
  updateStatus();  // the heartbeat's age moves on even when no rows came
}

void MainWindow::onRunFinished(bool ok, const QString& message) {
  liveTick();  // the last steps and the final run status
  m_livePath.clear();
  if (!m_liveAction->isChecked()) m_liveTimer->stop();
  updateActions();
  updateStatus();
  if (ok) {
    statusBar()->showMessage(message, 20000);
  } else {
    showError(tr("Run failed"), message);
  }
  emit runFinished(ok, message);
}

}  // namespace moewb::gui
