// RunController: the GUI's face of run::BackgroundRun (moewb/run/background_run.h), which does the
// work: start() loads and validates the config and creates the trace on the calling (GUI) thread,
// so a bad config is reported at once and nothing is created; the training itself runs on a worker
// thread. requestStop() ends the run after the step in progress; finished() arrives on the GUI
// thread (a queued call from the worker) when the worker is done.
// While a run is in progress, post() forwards live commands (pause, resume, single step, stop,
// config patches) to its trainer, which handles them at the next step boundary.
// Destroying the controller stops a running run and waits for the worker.
#pragma once

#include <QObject>
#include <QString>
#include <future>
#include <memory>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/run/background_run.h"

namespace moewb::gui {

class RunController : public QObject {
  Q_OBJECT

 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  // Starts a run of `configPath` writing `outPath` (replaced if it exists); `steps` < 0 uses the
  // config's run.steps. Errors: config not found / invalid (message names file and key), trace
  // not creatable, or kFailedPrecondition while another run is going.
  Status start(const QString& configPath, const QString& outPath, qint64 steps = -1);
  // Thread-safe; no-op when idle.
  void requestStop();
  // Queues `command` for the run in progress (run::TrainingRun::post). The future becomes
  // ready once the trainer handled it: ok, or the refusal (a patch's message names the key).
  // When no run is in progress it is ready at once with kFailedPrecondition. A future whose
  // run ended before handling it may throw std::future_error (broken promise) from get().
  // GUI thread.
  std::future<Status> post(engine::TrainerCommand command);
  // True while the run in progress is paused by a command. GUI thread.
  bool isPaused() const;
  bool isRunning() const { return m_run.running(); }
  // The config the current (or last) run started with; the default config before any run.
  const engine::RunConfig& startConfig() const { return m_startConfig; }
  // Trace file of the current or last run.
  QString tracePath() const { return m_tracePath; }
  qint64 plannedSteps() const { return m_plannedSteps; }

 signals:
  // A run was created and its worker started (emitted by start()).
  void started();
  // The worker ended: `ok` and a one-line summary or the error message.
  void finished(bool ok, const QString& message);

 private:
  void onWorkerDone();

  run::BackgroundRun m_run;
  QString m_tracePath;
  qint64 m_plannedSteps = 0;
  engine::RunConfig m_startConfig;
  bool m_ok = false;  // written by the worker, read on the GUI thread after it finished
  QString m_message;  // ditto
};

}  // namespace moewb::gui
