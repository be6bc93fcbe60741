// BackgroundRun: one TrainingRun trained on a worker thread, with its live commands — the part of
// a front end's run control that needs no GUI toolkit (the GUI's RunController wraps it in a
// QObject; a tuner applying a pick to a running run drives it the same way).
//
// start() loads and validates the config and creates the trace on the calling thread, so a bad
// config is reported at once and nothing is created; the training runs on a worker thread, which
// calls `onDone` with the summary or the error when it ends. Until join() the run counts as
// running (post, requestStop and paused reach its trainer). Destroying a BackgroundRun stops a run
// in progress after its current step and waits for the worker.
// Threads: start, join and the destructor from one controlling thread; requestStop, post and
// paused from any thread; onDone is called on the worker thread, after which join() returns
// without waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/run/training_run.h"

namespace moewb::run {

class BackgroundRun {
 public:
  using DoneCallback = std::function<void(const Result<RunSummary>& summary)>;

  BackgroundRun() = default;
  ~BackgroundRun();
  BackgroundRun(const BackgroundRun&) = delete;
  BackgroundRun& operator=(const BackgroundRun&) = delete;

  // Starts a run of the config file `configPath` with `options` (outPath, steps, ...). Errors:
  // the config's (kNotFound / kInvalidArgument naming the file and key), the trace's (not
  // creatable), kFailedPrecondition while a run has not been joined yet. Nothing is started on error.
  Status start(const std::string& configPath, const TrainingRunOptions& options,
               DoneCallback onDone);
  // Ends the run after the step in progress (status "stopped"); no-op when idle. Any thread.
  void requestStop();
  // Queues a live command (TrainingRun::post); when idle the future is ready at once with
  // kFailedPrecondition. Any thread.
  std::future<Status> post(engine::TrainerCommand command);
  // True while the run is paused by a command. Any thread.
  bool paused() const;
  // True from start() until join().
  bool running() const { return m_run != nullptr; }
  // Waits for the worker to end and releases the run (the trace file stays). No-op when idle.
  void join();

  // The config and planned steps of the current run (valid while running()).
  const engine::RunConfig& config() const { return m_run->config(); }
  int64_t plannedSteps() const { return m_run->plannedSteps(); }

 private:
  std::unique_ptr<TrainingRun> m_run;
  std::thread m_worker;
};

}  // namespace moewb::run
