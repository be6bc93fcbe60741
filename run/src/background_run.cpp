// BackgroundRun (background_run.h): a TrainingRun created on the caller's thread and trained on a
// worker thread.
#include "moewb/run/background_run.h"

namespace moewb::run {

BackgroundRun::~BackgroundRun() {
  requestStop();
  join();
}

Status BackgroundRun::start(const std::string& configPath, const TrainingRunOptions& options,
                            DoneCallback onDone) {
  if (m_run) return failedPrecondition("a run is already in progress; stop it first");
  MOEWB_ASSIGN_OR_RETURN(engine::RunConfig config, engine::loadConfigFile(configPath));
  MOEWB_ASSIGN_OR_RETURN(m_run, TrainingRun::create(config, options));
  TrainingRun* run = m_run.get();
  m_worker = std::thread([run, onDone = std::move(onDone)] {
    Result<RunSummary> summary = run->run();
    if (onDone) onDone(summary);
  });
  return Status::ok();
}

void BackgroundRun::requestStop() {
  if (m_run) m_run->requestStop();
}

std::future<Status> BackgroundRun::post(engine::TrainerCommand command) {
  if (m_run) return m_run->post(std::move(command));
  std::promise<Status> idle;
  idle.set_value(failedPrecondition("no run in progress; start one first"));
  return idle.get_future();
}

bool BackgroundRun::paused() const { return m_run && m_run->paused(); }

void BackgroundRun::join() {
  if (m_worker.joinable()) m_worker.join();
  m_run.reset();
}

}  // namespace moewb::run
