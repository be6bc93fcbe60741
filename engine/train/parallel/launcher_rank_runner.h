// LauncherRankRunner: the StepRunner (step_runner.h) of this process's rank in a multi-process
// run, one process per GPU over NCCL, started by `moewb launch`, torchrun or Slurm (their
// environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID + MASTER_ADDR).
// start(): the ranks meet over a small TCP store hosted by rank 0 (engine/comm/launch/), rank 0
// creates the NCCL id and shares it through the store, every rank builds its NCCL communicator on
// GPU LOCAL_RANK and its GPU rank stepper (cuda_rank_stepper.h: EP all-to-all, FSDP all-gather /
// reduce-scatter, global norm). Stops are agreed at step boundaries. Faults: a rank that dies
// (its store connection drops) makes the others abort their communicator and fail with that rank
// named; a rank that hangs makes the others' collectives time out after parallel.timeout_ms,
// naming the rank that is behind; a rank whose GPU stays stuck behind the dead peer's kernel
// calls the stuck handler (TrainerOptions::onStuckRank) after the same timeout. Errors carry
// "rank R". Live patches and pauses are refused: one process pausing would stall the others.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "moewb/engine/trainer.h"
#include "train/step_runner.h"

namespace moewb::engine {

class Communicator;
class RankStepper;
class RendezvousSession;
class StuckRankWatchdog;

class LauncherRankRunner final : public StepRunner {
 public:
  // `config` has parallel.world_size == rank.worldSize.
  LauncherRankRunner(const ValidConfig& config, LauncherRank rank,
                     std::function<void(const Status&)> onStuckRank);
  ~LauncherRankRunner() override;

  std::string backendName() const override { return "cuda"; }
  std::string deviceDescription() const override;
  int32_t reportedRanks() const override { return 1; }
  int32_t firstRank() const override { return m_rank.rank; }
  Status start(const std::vector<EventSink*>& sinks) override;
  Result<std::vector<RankStepOutcome>> step(const StepRequest& request) override;
  Result<bool> agreeOnStop(bool stop) override;
  Status applyLiveConfig(const ValidConfig& config) override;
  Status finish() override;

 private:
  Status join(EventSink* sink);
  // Joining and leaving the rendezvous wait for every process (GPU contexts, library loading):
  // parallel.timeout_ms, but at least 60 s.
  std::chrono::milliseconds sessionTimeout() const;
  // `status` with "rank R" before its message; records a failure (finish() then skips the
  // leaving handshake).
  Status inRank(Status status);

  ValidConfig m_config;
  LauncherRank m_rank;
  std::function<void(const Status&)> m_onStuckRank;
  std::unique_ptr<StuckRankWatchdog> m_watchdog;
  std::unique_ptr<RendezvousSession> m_session;
  std::shared_ptr<Communicator> m_world;  // shared with the store's watch thread
  std::unique_ptr<RankStepper> m_stepper;
  bool m_started = false;
  bool m_finished = false;
  bool m_failed = false;
};

}  // namespace moewb::engine
