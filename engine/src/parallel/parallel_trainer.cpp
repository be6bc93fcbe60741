// ParallelTrainer: rank threads over an InProcessWorld, run start/end events and the agreed stop
// (see parallel_trainer.h).
#include "moewb/engine/parallel_trainer.h"

#include <chrono>

#include "comm/in_process_comm.h"
#include "moewb/base/units.h"
#include "parallel/rank_common.h"
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
  // run.backend = "cuda": virtual ranks sharing GPU 0; otherwise ("cpu", "auto") CPU ranks.
  const bool gpu = m_config.run.backend == "cuda";
  start.backend = gpu ? "cuda" : "cpu";
  start.worldSize = m_config.parallel.worldSize;
  start.numLayers = m_config.model.numLayers;
  start.numExperts = m_config.moe.numExperts;
  start.startNs = steadyNowNs();
  for (EventSink* sink : m_sinks) {
    if (sink != nullptr) sink->onRunStart(start);
  }
  std::atomic<bool> stopped{false};
  const auto rankLoop = [&](Communicator& world) -> Status {
    EventSink* sink = m_sinks[size_t(world.rank())];
    std::unique_ptr<RankStepper> trainer;
    if (gpu) {
      MOEWB_ASSIGN_OR_RETURN(trainer, createCudaRankStepper(m_config, world, sink, 0));
    } else {
      MOEWB_ASSIGN_OR_RETURN(trainer, RankTrainer::create(m_config, world, sink));
    }
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
  };
  const std::chrono::milliseconds timeout(m_config.parallel.timeoutMs);
  const Status status = gpu ? runVirtualGpuRanks(m_config.parallel.worldSize, 0, rankLoop, timeout)
                            : runRanks(m_config.parallel.worldSize, rankLoop, timeout);
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
