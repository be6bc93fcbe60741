// RankGroupRunner (rank_group_runner.h): rank threads that take one task at a time from the
// trainer thread, under runRanks / runVirtualGpuRanks so a failing rank aborts the others.
#include "train/parallel/rank_group_runner.h"

#include <algorithm>
#include <chrono>

#include "comm/in_process_comm.h"
#include "train/parallel/cpu_rank_stepper.h"
#include "train/parallel/rank_common.h"
#include "train/parallel/shard_state.h"

namespace moewb::engine {

RankGroupRunner::RankGroupRunner(const ValidConfig& config,
                                 std::function<void(const Status&)> onStuckRank,
                                 std::function<void(int32_t, int64_t)> beforeRankStep)
    : m_config(config),
      m_onStuckRank(std::move(onStuckRank)),
      m_beforeRankStep(std::move(beforeRankStep)),
      m_gpu(config->run.backend == "cuda") {}

RankGroupRunner::~RankGroupRunner() { (void)finish(); }

std::string RankGroupRunner::deviceDescription() const {
  const std::string ranks = std::to_string(m_config->parallel.worldSize);
  return m_gpu ? ranks + " virtual ranks sharing GPU 0" : ranks + " in-process ranks (CPU threads)";
}

Status RankGroupRunner::rankMain(Communicator& world) {
  const int32_t rank = world.rank();
  EventSink* sink = m_sinks[size_t(rank)];
  const auto createCpuRank = [&]() -> Result<std::unique_ptr<RankStepper>> {
    MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<CpuRankStepper> trainer,
                           CpuRankStepper::create(m_config, world, sink));
    return std::unique_ptr<RankStepper>(std::move(trainer));
  };
  Result<std::unique_ptr<RankStepper>> created =
      m_gpu ? createCudaRankStepper(m_config, world, sink, 0) : createCpuRank();
  if (!created.isOk()) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_abort = true;  // ranks that were built already wait for tasks: let them go
    }
    m_taskReady.notify_all();
    return created.status();
  }
  std::unique_ptr<RankStepper> stepper = std::move(created).value();
  uint64_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    ++m_ready;
    seen = m_taskSeq;
  }
  m_resultReady.notify_all();
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_taskReady.wait(lock, [&] { return m_taskSeq != seen || m_abort; });
      if (m_abort) {
        return cancelled("rank " + std::to_string(rank) + " stopped: another rank failed");
      }
      seen = m_taskSeq;
      task = m_task;
    }
    RankResult result;
    switch (task.kind) {
      case TaskKind::kAgree: {
        Result<bool> agreed = stepper->agree(task.stop);
        result.status = agreed.status();
        if (agreed.isOk()) result.stop = *agreed;
        break;
      }
      case TaskKind::kStep: {
        if (m_beforeRankStep) m_beforeRankStep(rank, stepper->stepsDone());
        Result<RankStepOutcome> outcome = stepper->step();
        result.status = outcome.status();
        if (outcome.isOk()) result.outcome = std::move(outcome).value();
        break;
      }
      case TaskKind::kApply: stepper->applyLiveConfig(task.config); break;
      case TaskKind::kExport: {
        Result<RankShards> shards = stepper->exportShards();
        result.status = shards.status();
        if (shards.isOk()) result.shards = std::move(shards).value();
        break;
      }
      case TaskKind::kImport: result.status = stepper->importShards((*task.imports)[size_t(rank)]);
        break;
      case TaskKind::kQuit: stepper.reset(); break;
    }
    const Status status = result.status;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (!status.isOk()) {
        m_failed = true;
        if (m_firstError.isOk()) m_firstError = status.withContext("rank " + std::to_string(rank));
      }
      m_results[size_t(rank)] = std::move(result);
      --m_pending;
    }
    m_resultReady.notify_all();
    if (!status.isOk() || task.kind == TaskKind::kQuit) return status;
  }
}

Status RankGroupRunner::start(const std::vector<EventSink*>& sinks) {
  if (m_started) return Status::ok();
  m_started = true;
  m_sinks = sinks;
  m_sinks.resize(size_t(m_config->parallel.worldSize), nullptr);
  MOEWB_RETURN_IF_ERROR(launch());
  if (m_importAtStart == nullptr) return Status::ok();
  return importShards(std::move(m_importAtStart));
}

Status RankGroupRunner::importShards(std::shared_ptr<const std::vector<RankShards>> imports) {
  Task task{TaskKind::kImport};
  task.imports = std::move(imports);
  return dispatch(std::move(task)).status();
}

Status RankGroupRunner::launch() {
  const int32_t world = m_config->parallel.worldSize;
  if (m_driver.joinable()) m_driver.join();  // a group that has ended: its threads have returned
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_results.clear();
    m_results.resize(size_t(world));
    m_returned.assign(size_t(world), false);
    m_pending = 0;
    m_ready = 0;
    m_failed = false;
    m_abort = false;
    m_groupEnded = false;
    m_groupStatus = Status::ok();
    m_firstError = Status::ok();
  }
  m_driver = std::thread([this, world] {
    const auto body = [this](Communicator& comm) {
      struct Returned {  // also when rankMain throws
        RankGroupRunner* runner;
        int32_t rank;
        ~Returned() {
          std::lock_guard<std::mutex> lock(runner->m_mutex);
          runner->m_returned[size_t(rank)] = true;
        }
      } returned{this, comm.rank()};
      return rankMain(comm);
    };
    const std::chrono::milliseconds timeout(m_config->parallel.timeoutMs);
    Status status = m_gpu ? runVirtualGpuRanks(world, 0, body, timeout)
                          : runRanks(world, body, timeout);
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_groupEnded = true;
      m_groupStatus = status;
    }
    m_resultReady.notify_all();
  });
  std::unique_lock<std::mutex> lock(m_mutex);
  m_resultReady.wait(lock, [&] { return m_ready == world || m_groupEnded; });
  if (m_ready == world) return Status::ok();
  return groupOver();
}

Status RankGroupRunner::groupOver() {
  if (!m_groupStatus.isOk()) return m_groupStatus;
  return failedPrecondition("the ranks of this run have already finished");
}

Result<std::vector<RankGroupRunner::RankResult>> RankGroupRunner::dispatch(Task task) {
  std::unique_lock<std::mutex> lock(m_mutex);
  if (!m_started || m_groupEnded) {
    return m_started ? groupOver() : failedPrecondition("the ranks have not started");
  }
  m_task = std::move(task);
  m_pending = m_config->parallel.worldSize;
  m_failed = false;
  m_results.clear();
  m_results.resize(size_t(m_config->parallel.worldSize));
  ++m_taskSeq;
  m_taskReady.notify_all();
  m_resultReady.wait(lock, [&] { return m_pending == 0 || m_failed || m_groupEnded; });
  if (m_failed || (m_pending > 0 && m_groupEnded)) {
    // A rank failed: the others return (their collectives fail, or the abort wakes idle ones),
    // and the group's status is the first error in time, with the rank that reported it.
    m_abort = true;
    m_taskReady.notify_all();
    awaitGroupEnd(lock);
    return groupOver();
  }
  return std::move(m_results);
}

std::chrono::milliseconds RankGroupRunner::stuckGrace() const {
  return std::min(std::chrono::milliseconds(m_config->parallel.timeoutMs),
                  std::chrono::milliseconds(2000));
}

void RankGroupRunner::awaitGroupEnd(std::unique_lock<std::mutex>& lock) {
  const std::chrono::milliseconds grace = stuckGrace();
  if (m_resultReady.wait_for(lock, grace, [&] { return m_groupEnded; }) || !m_onStuckRank) {
    m_resultReady.wait(lock, [&] { return m_groupEnded; });
    return;
  }
  std::string stuck;
  for (size_t r = 0; r < m_returned.size(); ++r) {
    if (!m_returned[r]) stuck += (stuck.empty() ? "rank " : ", rank ") + std::to_string(r);
  }
  const Status status = cancelled(
      stuck + " stuck in step " + std::to_string(m_step) + ": still running " +
      std::to_string(grace.count()) + " ms after the run failed (" +
      (m_firstError.isOk() ? std::string("a rank ended") : m_firstError.message()) +
      "), and a rank thread cannot be stopped from outside");
  lock.unlock();
  m_onStuckRank(status);  // normally ends the process
  lock.lock();
  m_resultReady.wait(lock, [&] { return m_groupEnded; });
}

Result<std::vector<RankStepOutcome>> RankGroupRunner::step(const StepRequest& request) {
  m_step = request.step;
  MOEWB_ASSIGN_OR_RETURN(std::vector<RankResult> results, dispatch({TaskKind::kStep}));
  std::vector<RankStepOutcome> outcomes;
  outcomes.reserve(results.size());
  for (RankResult& result : results) outcomes.push_back(std::move(result.outcome));
  return outcomes;
}

Result<bool> RankGroupRunner::agreeOnStop(bool stop) {
  MOEWB_ASSIGN_OR_RETURN(std::vector<RankResult> results, dispatch({TaskKind::kAgree, stop}));
  return results[0].stop;
}

Status RankGroupRunner::applyLiveConfig(const ValidConfig& config) {
  if (config->parallel != m_config->parallel) return reshard(config);
  MOEWB_RETURN_IF_ERROR(dispatch({TaskKind::kApply, false, config}).status());
  m_config = config;
  return Status::ok();
}

Result<TrainingState> RankGroupRunner::gatherState() {
  if (!m_started) return failedPrecondition("the rank group has not started: no state to gather");
  MOEWB_ASSIGN_OR_RETURN(std::vector<RankResult> results, dispatch({TaskKind::kExport}));
  std::vector<RankShards> ranks;
  ranks.reserve(results.size());
  for (RankResult& result : results) ranks.push_back(std::move(result.shards));
  return assembleTrainingState(m_config, ranks);
}

Status RankGroupRunner::scatterState(const TrainingState& state) {
  auto imports = std::make_shared<std::vector<RankShards>>();
  for (int32_t r = 0; r < m_config->parallel.worldSize; ++r) {
    MOEWB_ASSIGN_OR_RETURN(RankShards shards, shardsOfRank(m_config, state, r));
    imports->push_back(std::move(shards));
  }
  if (!m_started) {  // the ranks take it when they start
    m_importAtStart = std::move(imports);
    return Status::ok();
  }
  return importShards(std::move(imports));
}

Status RankGroupRunner::quitGroup() {
  MOEWB_RETURN_IF_ERROR(dispatch({TaskKind::kQuit}).status());
  if (m_driver.joinable()) m_driver.join();
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_groupStatus;
}

Status RankGroupRunner::rebuild(const ValidConfig& config, const TrainingState& state) {
  MOEWB_RETURN_IF_ERROR(quitGroup());
  m_config = config;
  MOEWB_RETURN_IF_ERROR(launch());
  return scatterState(state);
}

Status RankGroupRunner::reshard(const ValidConfig& config) {
  if (!m_started) {  // nothing runs yet: the ranks start in the new layout
    m_config = config;
    return Status::ok();
  }
  MOEWB_ASSIGN_OR_RETURN(const TrainingState state, gatherState());
  // Checked before the old group goes (every rank's check is the same), so a state that does
  // not fit the new layout changes nothing.
  MOEWB_RETURN_IF_ERROR(shardsOfRank(config, state, 0).status());
  const ValidConfig before = m_config;
  const Status rebuilt = rebuild(config, state);
  if (rebuilt.isOk()) return Status::ok();
  // Back to the old layout from the same state: end the new group if it still runs.
  bool running = false;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    running = !m_groupEnded;
  }
  if (running) (void)quitGroup();
  m_config = before;
  const Status restored = launch();
  if (!restored.isOk()) {
    return rebuilt.withContext("re-sharding failed and the old layout could not be rebuilt (" +
                               restored.message() + ")");
  }
  MOEWB_RETURN_IF_ERROR(scatterState(state));
  return rebuilt.withContext("re-sharding failed; the run goes on in its old layout");
}

Status RankGroupRunner::finish() {
  if (!m_started) return Status::ok();
  bool ended = false;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    ended = m_groupEnded;
  }
  Status quit = ended ? Status::ok() : dispatch({TaskKind::kQuit}).status();
  if (m_driver.joinable()) m_driver.join();
  std::lock_guard<std::mutex> lock(m_mutex);
  return quit.isOk() ? m_groupStatus : quit;
}

}  // namespace moewb::engine
