// LauncherRankRunner (launcher_rank_runner.h): rendezvous, the NCCL id through the store, the
// dead-rank watch, and the GPU rank stepper's steps of this process's rank.
#include "train/parallel/launcher_rank_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/launch/rendezvous.h"
#include "train/parallel/rank_common.h"
#include "train/parallel/stuck_rank_watchdog.h"

namespace moewb::engine {

Result<std::optional<LauncherRank>> detectLauncherRank() {
  MOEWB_ASSIGN_OR_RETURN(std::optional<LaunchEnv> env, launchEnvFromEnvironment());
  if (!env) return std::optional<LauncherRank>();
  return std::optional<LauncherRank>(
      LauncherRank{env->rank, env->worldSize, env->localRank, env->source});
}

LauncherRankRunner::LauncherRankRunner(const ValidConfig& config, LauncherRank rank,
                                       std::function<void(const Status&)> onStuckRank)
    : m_config(config), m_rank(std::move(rank)), m_onStuckRank(std::move(onStuckRank)) {}

LauncherRankRunner::~LauncherRankRunner() { (void)finish(); }

std::string LauncherRankRunner::deviceDescription() const {
  return "rank " + std::to_string(m_rank.rank) + " of " + std::to_string(m_rank.worldSize) +
         " processes (NCCL, GPU " + std::to_string(m_rank.localRank) + ")";
}

Status LauncherRankRunner::inRank(Status status) {
  if (!status.isOk()) m_failed = true;
  return status.withContext("rank " + std::to_string(m_rank.rank));
}

Status LauncherRankRunner::start(const std::vector<EventSink*>& sinks) {
  if (m_started) return Status::ok();
  m_started = true;
  m_watchdog = std::make_unique<StuckRankWatchdog>(
      std::chrono::milliseconds(m_config->parallel.timeoutMs), [this](const Status& stuck) {
        if (m_onStuckRank) m_onStuckRank(stuck.withContext("rank " + std::to_string(m_rank.rank)));
      });
  return inRank(join(sinks.empty() ? nullptr : sinks[0]));
}

std::chrono::milliseconds LauncherRankRunner::sessionTimeout() const {
  return std::max(std::chrono::milliseconds(m_config->parallel.timeoutMs),
                  std::chrono::milliseconds(60000));
}

Status LauncherRankRunner::join(EventSink* sink) {
  const std::chrono::milliseconds timeout(m_config->parallel.timeoutMs);
  const std::chrono::milliseconds joinTimeout = sessionTimeout();
  MOEWB_ASSIGN_OR_RETURN(std::optional<LaunchEnv> env, launchEnvFromEnvironment());
  if (!env) return failedPrecondition("the launcher's environment disappeared");
  MOEWB_ASSIGN_OR_RETURN(m_session, joinRendezvous(*env, joinTimeout));
  std::string id;
  if (env->rank == 0) {
    MOEWB_ASSIGN_OR_RETURN(id, newNcclUniqueId());
  }
  MOEWB_ASSIGN_OR_RETURN(id, m_session->shareFromRankZero("nccl/world", id, joinTimeout));
  TcpStoreClient& store = m_session->client();
  MOEWB_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> created,
      createNcclCommunicator(env->rank, env->worldSize, env->localRank, id, timeout,
                             [&store] { return store.describeMissingPeers(); }));
  m_world = std::shared_ptr<Communicator>(std::move(created));
  // A dead peer: abort on a thread of its own (an abort can block behind a stuck kernel) and arm
  // the watchdog. `reason` already names the rank.
  StuckRankWatchdog* watchdog = m_watchdog.get();
  MOEWB_RETURN_IF_ERROR(store.watch([weak = std::weak_ptr<Communicator>(m_world), watchdog](
                                        int32_t, std::string reason) {
    watchdog->peerFailed(reason);
    if (auto comm = weak.lock()) {
      std::thread([comm, reason] { comm->abort(reason); }).detach();
    }
  }));
  MOEWB_ASSIGN_OR_RETURN(m_stepper,
                         createCudaRankStepper(m_config, *m_world, sink, env->localRank));
  return Status::ok();
}

Result<std::vector<RankStepOutcome>> LauncherRankRunner::step(const StepRequest& /*request*/) {
  if (!m_stepper) return inRank(failedPrecondition("the rank has not joined the run"));
  Result<RankStepOutcome> outcome = m_stepper->step();
  if (!outcome.isOk()) return inRank(outcome.status());
  (void)m_session->client().setProgress(m_stepper->stepsDone());
  std::vector<RankStepOutcome> outcomes;
  outcomes.push_back(std::move(outcome).value());
  return outcomes;
}

Result<bool> LauncherRankRunner::agreeOnStop(bool stop) {
  if (!m_stepper) return inRank(failedPrecondition("the rank has not joined the run"));
  Result<bool> agreed = m_stepper->agree(stop);
  if (!agreed.isOk()) return inRank(agreed.status());
  return agreed;
}

Status LauncherRankRunner::applyLiveConfig(const ValidConfig& /*config*/) {
  return failedPrecondition(
      "live patches are not accepted on a multi-process run (one rank per process): each process "
      "would have to apply them at the same step; stop the run and start it with the new config");
}

Status LauncherRankRunner::finish() {
  if (!m_started || m_finished) return Status::ok();
  m_finished = true;
  m_stepper.reset();
  Status closed = Status::ok();
  // After a failure the session is dropped without the leaving handshake (the peers may be gone).
  if (m_session && !m_failed) {
    // Leaving through the store waits for the other ranks (rank 0 keeps the store up until all
    // have left), so no closing collective is needed.
    closed = m_session->close(sessionTimeout());
  }
  m_session.reset();
  m_world.reset();
  m_watchdog.reset();
  return closed.withContext("rank " + std::to_string(m_rank.rank));
}

}  // namespace moewb::engine
