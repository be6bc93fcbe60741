// DistributedTrainer: this process's rank of a multi-process run, one process per GPU over NCCL,
// started by `moewb launch`, torchrun or Slurm (their environment: RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT, or SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID + MASTER_ADDR).
//
// run(): the ranks meet over a small TCP store hosted by rank 0 (engine/src/launch/), rank 0
// creates the NCCL id and shares it through the store, every rank builds its NCCL communicator on
// GPU LOCAL_RANK and trains with the GPU rank trainer (cuda_parallel/cuda_rank_trainer.h: EP
// all-to-all, FSDP all-gather / reduce-scatter, global norm), agreeing on stops at step
// boundaries. Faults: a rank that dies (its store connection drops) makes the others abort their
// communicator and fail with that rank named; a rank that hangs makes the others' collectives time
// out after parallel.timeout_ms, naming the rank that is behind. Each rank reports to its own
// sink (its own trace file; `moewb merge` joins them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"

namespace moewb::engine {

class StuckRankWatchdog;

struct LauncherRank {
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;   // the GPU this rank uses
  std::string source;      // "torchrun-style env" or "slurm"
};

// This process's place when a launcher started it; nullopt for a single-process run.
// Errors: kInvalidArgument naming a partial or malformed launcher variable.
Result<std::optional<LauncherRank>> detectLauncherRank();

class DistributedTrainer {
 public:
  // Validates `config` (parallel.world_size must equal the launcher's WORLD_SIZE). `sink` may be
  // null and must outlive the trainer. Errors: kInvalidArgument; kFailedPrecondition when no
  // launcher environment is present.
  static Result<std::unique_ptr<DistributedTrainer>> create(const RunConfig& config,
                                                            EventSink* sink);
  ~DistributedTrainer();

  // Joins the other ranks and runs `steps` optimizer steps (see above); sink events: onRunStart,
  // the steps, onRunEnd (kFailed with the error, kStopped, kCompleted). Call once.
  // Errors: the rendezvous's (missing ranks named), kUnimplemented (a build without CUDA),
  // the training's (a dead or hung rank named).
  Status run(int64_t steps);

  // Called at most once, from a watchdog thread, when a peer died and this rank's GPU work could
  // not be stopped within parallel.timeout_ms (a stream stuck behind an NCCL kernel): the handler
  // should record the failure and end the process (as PyTorch's NCCL watchdog does); run() would
  // not return. Without a handler the rank keeps waiting. Set before run().
  void setStuckHandler(std::function<void(const Status&)> handler) {
    m_stuckHandler = std::move(handler);
  }

  // Thread-safe; async-signal-safe (one atomic store). The ranks stop together at a step boundary.
  void requestStop() { m_stopRequested.store(true); }
  int64_t stepsDone() const { return m_stepsDone.load(); }
  const LauncherRank& rank() const { return m_rank; }

 private:
  DistributedTrainer(const RunConfig& config, EventSink* sink, LauncherRank rank)
      : m_config(config), m_sink(sink), m_rank(std::move(rank)) {}
  Status train(int64_t steps, bool& stopped, StuckRankWatchdog& watchdog);

  RunConfig m_config;
  EventSink* m_sink;
  LauncherRank m_rank;
  std::atomic<bool> m_stopRequested{false};
  std::atomic<int64_t> m_stepsDone{0};
  std::function<void(const Status&)> m_stuckHandler;
};

}  // namespace moewb::engine
