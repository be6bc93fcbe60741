// RunController: a run::BackgroundRun whose end is reported on the GUI thread.
#include "run_controller.h"

#include <QMetaObject>

namespace moewb::gui {

RunController::RunController(QObject* parent) : QObject(parent) {}

// m_run's destructor stops a run in progress and waits for its worker; the queued onWorkerDone
// call dies with this object.
RunController::~RunController() = default;

Status RunController::start(const QString& configPath, const QString& outPath, qint64 steps) {
  if (m_run.running()) return failedPrecondition("a run is already in progress; stop it first");
  run::TrainingRunOptions options;
  options.outPath = outPath.toStdString();
  options.overwrite = true;
  options.steps = steps;
  m_ok = false;
  m_message.clear();
  MOEWB_RETURN_IF_ERROR(m_run.start(
      configPath.toStdString(), options, [this](const Result<run::RunSummary>& summary) {
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
        QMetaObject::invokeMethod(this, &RunController::onWorkerDone, Qt::QueuedConnection);
      }));
  m_tracePath = outPath;
  m_plannedSteps = m_run.plannedSteps();
  m_startConfig = m_run.config();
  emit started();
  return Status::ok();
}

std::future<Status> RunController::post(engine::TrainerCommand command) {
  if (!m_run.running()) {
    std::promise<Status> idle;
    idle.set_value(failedPrecondition("no run in progress; start one with Run > Start run"));
    return idle.get_future();
  }
  return m_run.post(std::move(command));
}

bool RunController::isPaused() const { return m_run.paused(); }

void RunController::requestStop() { m_run.requestStop(); }

void RunController::onWorkerDone() {
  m_run.join();
  emit finished(m_ok, m_message);
}

}  // namespace moewb::gui
