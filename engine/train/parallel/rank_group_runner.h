// RankGroupRunner: the StepRunner (step_runner.h) of a run on parallel.world_size in-process
// ranks: one thread per rank over an in-process world, CPU ranks (CpuRankStepper) or, with
// run.backend = "cuda", virtual ranks sharing GPU 0 (each with its own stream, buffers and device
// collectives; CudaRankStepper). The rank threads live from start() to finish() and run the tasks
// the trainer thread hands them one at a time (agree on a stop, step, apply live settings, quit);
// each rank's phases and collectives go to its own sink from its own thread.
// Re-shard: a live patch of the layout (parallel.ep, .fsdp, .replicate, .a2a_chunks; same
// world_size and backend) gathers every rank's state into one TrainingState (shard_state.h), ends
// the rank threads, starts a group in the new layout (new threads, communicators, models, FSDP
// shards) and scatters the state into it, so the next step continues as a group started in the
// new layout from that state would. Cost: a host copy of the whole state (4x the weights) plus
// building the new ranks; on GPU ranks the state crosses PCIe twice. When the new group cannot be
// built (memory, a CUDA error), the old layout is built again from the same state and the patch
// is refused; when that fails too, the run is over.
// Faults: a rank that fails, throws or stalls makes the others fail within parallel.timeout_ms;
// the call then returns the first error in time, prefixed with the rank that reported it and
// naming the rank that failed or did not arrive, and the group is over (later calls fail).
// A rank thread that has not returned stuckGrace() after that failure (stalled in compute, a
// deadlock) cannot be stopped: the runner then calls onStuckRank once, on the trainer thread,
// with a status naming the stuck ranks and the step, so the application can record the failure
// and end the process (TrainerOptions::onStuckRank); without one, or when it returns, it waits.
// Methods are called from the trainer thread only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "train/parallel/shard_state.h"
#include "train/step_runner.h"

namespace moewb::engine {

class RankGroupRunner final : public StepRunner {
 public:
  // `config` has parallel.world_size > 1. `onStuckRank` and `beforeRankStep` are
  // TrainerOptions' (may be empty). Starts nothing.
  explicit RankGroupRunner(const ValidConfig& config,
                           std::function<void(const Status&)> onStuckRank = {},
                           std::function<void(int32_t, int64_t)> beforeRankStep = {});
  ~RankGroupRunner() override;

  std::string backendName() const override { return m_gpu ? "cuda" : "cpu"; }
  std::string deviceDescription() const override;
  int32_t reportedRanks() const override { return m_config->parallel.worldSize; }
  Status start(const std::vector<EventSink*>& sinks) override;
  Result<std::vector<RankStepOutcome>> step(const StepRequest& request) override;
  Result<bool> agreeOnStop(bool stop) override;
  // A change of the layout keys re-shards the group (above); other keys go to every rank.
  Status applyLiveConfig(const ValidConfig& config) override;
  bool reshardsLive() const override { return true; }
  Status finish() override;

  // At a step boundary, after start(): the group's training state in one-rank shapes (every
  // rank's shards copied, then assembled). Errors: kFailedPrecondition before start(); the
  // ranks' (a GPU copy), kInternal when they disagree (assembleTrainingState); a rank's error
  // ends the group.
  Result<TrainingState> gatherState() override;
  // Replaces every rank's state by its part of `state` (the next step continues from it): at a
  // step boundary, or before start() (then the ranks take it when they start). Errors:
  // kInvalidArgument when `state` is not of this config's model (nothing changed); a rank's
  // error ends the group.
  Status scatterState(const TrainingState& state) override;

 private:
  enum class TaskKind { kAgree, kStep, kApply, kExport, kImport, kQuit };
  struct Task {
    TaskKind kind = TaskKind::kQuit;
    bool stop = false;  // kAgree
    RunConfig config;   // kApply
    std::shared_ptr<const std::vector<RankShards>> imports;  // kImport: [world_size]
  };
  struct RankResult {
    Status status;
    bool stop = false;        // kAgree
    RankStepOutcome outcome;  // kStep
    RankShards shards;        // kExport
  };
  // Starts the rank threads of m_config and waits until every rank's stepper exists.
  Status launch();
  // Hands every rank its shards of `imports` ([world_size]) at a step boundary (kImport).
  Status importShards(std::shared_ptr<const std::vector<RankShards>> imports);
  // Ends the rank threads (kQuit) and waits for them; the group can be launched again.
  Status quitGroup();
  // Gathers the state, rebuilds the group in `config`'s layout and scatters the state into it.
  Status reshard(const ValidConfig& config);
  // quitGroup, then launch `config` and scatter `state`.
  Status rebuild(const ValidConfig& config, const TrainingState& state);
  // The body of rank thread `world.rank()`: builds its stepper, then runs tasks until kQuit.
  Status rankMain(Communicator& world);
  // Hands `task` to every rank and waits for all results; on a rank's failure ends the group and
  // returns the group's first error.
  Result<std::vector<RankResult>> dispatch(Task task);
  Status groupOver();  // the error of a group that has ended (lock held)
  // How long the trainer thread waits for the rank threads to return after a failure before
  // reporting the late ones as stuck: parallel.timeout_ms, at most 2 s (a healthy rank returns
  // at its next collective, which the abort fails at once).
  std::chrono::milliseconds stuckGrace() const;
  // After a failure, waits up to stuckGrace() for every rank thread to return, then reports the
  // rest through m_onStuckRank and waits on. Lock held.
  void awaitGroupEnd(std::unique_lock<std::mutex>& lock);

  ValidConfig m_config;
  std::function<void(const Status&)> m_onStuckRank;
  std::function<void(int32_t, int64_t)> m_beforeRankStep;
  bool m_gpu = false;
  std::vector<EventSink*> m_sinks;  // [world_size]
  // A state scattered before start() (a resumed checkpoint): the ranks take it when they start.
  std::shared_ptr<const std::vector<RankShards>> m_importAtStart;
  std::thread m_driver;             // runs the rank threads (runRanks) until they all return
  std::mutex m_mutex;
  std::condition_variable m_taskReady;    // rank threads wait here for the next task
  std::condition_variable m_resultReady;  // the trainer thread waits here for results
  uint64_t m_taskSeq = 0;                 // bumped for every task
  Task m_task;                            // the current task (guarded by m_mutex)
  std::vector<RankResult> m_results;      // [world_size] of the current task
  int32_t m_pending = 0;                  // ranks that have not reported the current task
  int32_t m_ready = 0;                    // ranks whose stepper exists
  bool m_failed = false;                  // a rank reported an error for the current task
  bool m_abort = false;                   // tells idle ranks to return (after a failure)
  bool m_groupEnded = false;              // every rank thread has returned
  Status m_groupStatus;                   // what the rank threads returned (first error)
  Status m_firstError;                    // the first failure a rank reported, "rank r: ..."
  std::vector<bool> m_returned;           // [world_size] the rank's thread has returned
  int64_t m_step = 0;                     // the step of the current (or last) kStep task
  bool m_started = false;
};

}  // namespace moewb::engine
