// RunController: TrainingRun created on the GUI thread, trained on a worker QThread.
#include "run_controller.h"

#include <QThread>

#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"

namespace moewb::gui {

RunController::RunController(QObject* parent) : QObject(parent) {}

RunController::~RunController() {
  if (m_thread) {
    m_run->requestStop();
    m_thread->wait();
    delete m_thread;
    m_thread = nullptr;
  }
}

Status RunController::start(const QString& configPath, const QString& outPath, qint64 steps) {
  if (m_thread) return failedPrecondition("a run is already in progress; stop it first");
  auto config = engine::loadConfigFile(configPath.toStdString());
  if (!config.isOk()) return config.status();
  run::TrainingRunOptions options;
  options.outPath = outPath.toStdString();
  options.overwrite = true;
  options.steps = steps;
  auto run = run::TrainingRun::create(config.value(), options);
  if (!run.isOk()) return run.status();
  m_run = std::move(run).value();
  m_tracePath = outPath;
  m_plannedSteps = m_run->plannedSteps();
  m_startConfig = m_run->config();
  m_ok = false;
  m_message.clear();
  run::TrainingRun* traced = m_run.get();
  m_thread = QThread::create([this, traced] {
    auto summary = traced->run();
    if (summary.isOk()) {
      const run::RunSummary& s = summary.value();
      m_ok = true;
      m_message = tr("%1 %2 steps in %3 s, loss %4 -> %5, %6 tokens/s")
                      .arg(s.stopped ? tr("Stopped after") : tr("Finished"))
                      .arg(s.stepsDone)
                      .arg(s.wallSeconds, 0, 'f', 1)
                      .arg(s.firstLoss, 0, 'f', 3)
                      .arg(s.lastLoss, 0, 'f', 3)
                      .arg(s.meanTokensPerSecond, 0, 'f', 0);
    } else {
      m_message = QString::fromStdString(summary.status().toString());
    }
  });
  m_thread->setObjectName(QStringLiteral("moewb-run"));
  connect(m_thread, &QThread::finished, this, &RunController::onWorkerDone);
  m_thread->start();
  emit started();
  return Status::ok();
}

std::future<Status> RunController::post(engine::TrainerCommand command) {
  if (m_run && m_thread) return m_run->post(std::move(command));
  std::promise<Status> idle;
  idle.set_value(failedPrecondition("no run in progress; start one with Run > Start run"));
  return idle.get_future();
}

bool RunController::isPaused() const {
  return m_run && m_thread && m_run->paused();
}

void RunController::requestStop() {
  if (m_run && m_thread) m_run->requestStop();
}

void RunController::onWorkerDone() {
  m_thread->wait();
  m_thread->deleteLater();
  m_thread = nullptr;
  m_run.reset();
  emit finished(m_ok, m_message);
}

}  // namespace moewb::gui
