// One rank of a multi-process NCCL run: rendezvous, NCCL id through the store, dead-rank watch,
// the GPU rank trainer's steps (see moewb/engine/distributed_trainer.h).
#include "moewb/engine/distributed_trainer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "backend/device_backend.h"
#include "launch/rendezvous.h"
#include "moewb/base/units.h"
#include "parallel/rank_common.h"
#include "parallel/stuck_rank_watchdog.h"

namespace moewb::engine {

Result<std::optional<LauncherRank>> detectLauncherRank() {
  MOEWB_ASSIGN_OR_RETURN(std::optional<LaunchEnv> env, launchEnvFromEnvironment());
  if (!env) return std::optional<LauncherRank>();
  return std::optional<LauncherRank>(
      LauncherRank{env->rank, env->worldSize, env->localRank, env->source});
}

Result<std::unique_ptr<DistributedTrainer>> DistributedTrainer::create(const RunConfig& config,
                                                                       EventSink* sink) {
  MOEWB_ASSIGN_OR_RETURN(std::optional<LauncherRank> rank, detectLauncherRank());
  if (!rank) {
    return failedPrecondition("a multi-process run needs a launcher's environment (RANK and "
                              "WORLD_SIZE, or SLURM_PROCID and SLURM_NTASKS); start it with "
                              "`moewb launch --nproc N -- moewb run ...`, torchrun or srun");
  }
  if (config.parallel.worldSize != rank->worldSize) {
    return invalidArgument("parallel.world_size = " + std::to_string(config.parallel.worldSize) +
                           " but the launcher started " + std::to_string(rank->worldSize) +
                           " processes (WORLD_SIZE); accepted: parallel.world_size = " +
                           std::to_string(rank->worldSize));
  }
  MOEWB_RETURN_IF_ERROR(validateConfig(config));
  if (!cudaDeviceAvailable()) {
    return failedPrecondition("rank " + std::to_string(rank->rank) + ": a multi-process run "
                              "trains on GPUs over NCCL, and this process sees no CUDA device "
                              "(or this build of moewb has no CUDA backend)");
  }
  return std::unique_ptr<DistributedTrainer>(new DistributedTrainer(config, sink, *rank));
}

DistributedTrainer::~DistributedTrainer() = default;

Status DistributedTrainer::run(int64_t steps) {
  if (steps < 0) return invalidArgument("steps = " + std::to_string(steps) + "; accepted: >= 0");
  RunStartEvent start;
  start.name = m_config.run.name;
  start.configToml = toToml(m_config);
  start.backend = "cuda";
  start.worldSize = m_config.parallel.worldSize;
  start.numLayers = m_config.model.numLayers;
  start.numExperts = m_config.moe.numExperts;
  start.startNs = steadyNowNs();
  if (m_sink != nullptr) m_sink->onRunStart(start);
  bool stopped = false;
  Status status;
  {
    StuckRankWatchdog watchdog(std::chrono::milliseconds(m_config.parallel.timeoutMs),
                               [this](const Status& stuck) {
                                 if (m_stuckHandler) {
                                   m_stuckHandler(stuck.withContext(
                                       "rank " + std::to_string(m_rank.rank)));
                                 }
                               });
    status = train(steps, stopped, watchdog).withContext("rank " + std::to_string(m_rank.rank));
  }
  RunEndEvent end;
  end.outcome = !status.isOk() ? RunOutcome::kFailed
                : stopped      ? RunOutcome::kStopped
                               : RunOutcome::kCompleted;
  end.message = status.isOk() ? "" : status.toString();
  end.endNs = steadyNowNs();
  end.stepsDone = m_stepsDone.load();
  if (m_sink != nullptr) m_sink->onRunEnd(end);
  return status;
}

Status DistributedTrainer::train(int64_t steps, bool& stopped, StuckRankWatchdog& watchdog) {
  const std::chrono::milliseconds timeout(m_config.parallel.timeoutMs);
  // Joining waits for every process to start (GPU contexts, library loading): give it longer.
  const std::chrono::milliseconds joinTimeout = std::max(timeout, std::chrono::milliseconds(60000));
  MOEWB_ASSIGN_OR_RETURN(std::optional<LaunchEnv> env, launchEnvFromEnvironment());
  if (!env) return failedPrecondition("the launcher's environment disappeared");
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousSession> session,
                         joinRendezvous(*env, joinTimeout));
  std::string id;
  if (env->rank == 0) {
    MOEWB_ASSIGN_OR_RETURN(id, newNcclUniqueId());
  }
  MOEWB_ASSIGN_OR_RETURN(id, session->shareFromRankZero("nccl/world", id, joinTimeout));
  TcpStoreClient& store = session->client();
  MOEWB_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> created,
      createNcclCommunicator(env->rank, env->worldSize, env->localRank, id, timeout,
                             [&store] { return store.describeMissingPeers(); }));
  // Shared with the store's watch thread, which may abort it at any time until the session ends.
  const std::shared_ptr<Communicator> world(std::move(created));
  // A dead peer: abort on a thread of its own (an abort can block behind a stuck kernel) and arm
  // the watchdog. `reason` already names the rank.
  MOEWB_RETURN_IF_ERROR(store.watch([weak = std::weak_ptr<Communicator>(world), &watchdog](
                                        int32_t, std::string reason) {
    watchdog.peerFailed(reason);
    if (auto comm = weak.lock()) {
      std::thread([comm, reason] { comm->abort(reason); }).detach();
    }
  }));
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<RankStepper> trainer,
                         createCudaRankStepper(m_config, *world, m_sink, env->localRank));
  for (int64_t i = 0; i < steps; ++i) {
    MOEWB_ASSIGN_OR_RETURN(bool stop, trainer->agree(m_stopRequested.load()));
    if (stop) {
      stopped = true;
      break;
    }
    MOEWB_RETURN_IF_ERROR(trainer->step().status());
    m_stepsDone.store(trainer->stepsDone());
    (void)store.setProgress(trainer->stepsDone());
  }
  trainer.reset();
  // Leaving through the store waits for the other ranks (rank 0 keeps the store up until all
  // have left), so no closing collective is needed.
  return session->close(joinTimeout);
}

}  // namespace moewb::engine
