// ParallelTrainer: rank threads over an InProcessWorld, run start/end events and the agreed stop
// (see parallel_trainer.h).
#include "moewb/engine/parallel_trainer.h"

#include <chrono>

#include "comm/in_process_comm.h"
#include "moewb/base/units.h"
#include "parallel/rank_trainer.h"

namespace moewb::engine {

Result<std::unique_ptr<ParallelTrainer>> ParallelTrainer::create(
    const RunConfig& config, std::vector<EventSink*> rankSinks) {
  MOEWB_RETURN_IF_ERROR(validateConfig(config));
  return std::unique_ptr<ParallelTrainer>(new ParallelTrainer(config, std::move(rankSinks)));
}

ParallelTrainer::ParallelTrainer(const RunConfig& config, std::vector<EventSink*> rankSinks)
    : m_config(config), m_sinks(std::move(rankSinks)) {
  m_sinks.resize(size_t(config.parallel.worldSize), nullptr);
}

Status ParallelTrainer::run(int64_t steps) {
  if (steps < 0) return invalidArgument("steps = " + std::to_string(steps) + "; accepted: >= 0");
  RunStartEvent start;
  start.name = m_config.run.name;
  start.configToml = toToml(m_config);
  start.backend = "cpu";
  start.worldSize = m_config.parallel.worldSize;
  start.numLayers = m_config.model.numLayers;
  start.numExperts = m_config.moe.numExperts;
  start.startNs = steadyNowNs();
  for (EventSink* sink : m_sinks) {
    if (sink != nullptr) sink->onRunStart(start);
  }
  std::atomic<bool> stopped{false};
  const Status status = runRanks(
      m_config.parallel.worldSize,
      [&](Communicator& world) -> Status {
        EventSink* sink = m_sinks[size_t(world.rank())];
        MOEWB_ASSIGN_OR_RETURN(auto trainer, RankTrainer::create(m_config, world, sink));
        for (int64_t i = 0; i < steps; ++i) {
          MOEWB_ASSIGN_OR_RETURN(bool stop, trainer->agree(m_stopRequested.load()));
          if (stop) {
            stopped.store(true);
            break;
          }
          MOEWB_RETURN_IF_ERROR(trainer->step().status());
          if (world.rank() == 0) m_stepsDone.store(trainer->stepsDone());
        }
        return Status::ok();
      },
      std::chrono::milliseconds(m_config.parallel.timeoutMs));
  RunEndEvent end;
  end.outcome = !status.isOk() ? RunOutcome::kFailed
                : stopped.load() ? RunOutcome::kStopped
                                 : RunOutcome::kCompleted;
  end.message = status.isOk() ? "" : status.toString();
  end.endNs = steadyNowNs();
  end.stepsDone = m_stepsDone.load();
  for (EventSink* sink : m_sinks) {
    if (sink != nullptr) sink->onRunEnd(end);
  }
  return status;
}

}  // namespace moewb::engine
