// RankGroupRunner: the StepRunner (step_runner.h) of a run on parallel.world_size in-process
// ranks: one thread per rank over an in-process world, CPU ranks (CpuRankStepper) or, with
// run.backend = "cuda", virtual ranks sharing GPU 0 (each with its own stream, buffers and device
// collectives; CudaRankStepper). The rank threads live from start() to finish() and run the tasks
// the trainer thread hands them one at a time (agree on a stop, step, apply live settings, quit);
// each rank's phases and collectives go to its own sink from its own thread.
// Faults: a rank that fails, throws or stalls makes the others fail within parallel.timeout_ms;
// the call then returns the first error in time, prefixed with the rank that reported it and
// naming the rank that failed or did not arrive, and the group is over (later calls fail).
// Methods are called from the trainer thread only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "train/step_runner.h"

namespace moewb::engine {

class RankGroupRunner final : public StepRunner {
 public:
  // `config` has parallel.world_size > 1. Starts nothing.
  explicit RankGroupRunner(const ValidConfig& config);
  ~RankGroupRunner() override;

  std::string backendName() const override { return m_gpu ? "cuda" : "cpu"; }
  std::string deviceDescription() const override;
  int32_t reportedRanks() const override { return m_config->parallel.worldSize; }
  Status start(const std::vector<EventSink*>& sinks) override;
  Result<std::vector<RankStepOutcome>> step(const StepRequest& request) override;
  Result<bool> agreeOnStop(bool stop) override;
  Status applyLiveConfig(const ValidConfig& config) override;
  Status finish() override;

 private:
  enum class TaskKind { kAgree, kStep, kApply, kQuit };
  struct Task {
    TaskKind kind = TaskKind::kQuit;
    bool stop = false;  // kAgree
    RunConfig config;   // kApply
  };
  struct RankResult {
    Status status;
    bool stop = false;        // kAgree
    RankStepOutcome outcome;  // kStep
  };
  // The body of rank thread `world.rank()`: builds its stepper, then runs tasks until kQuit.
  Status rankMain(Communicator& world);
  // Hands `task` to every rank and waits for all results; on a rank's failure ends the group and
  // returns the group's first error.
  Result<std::vector<RankResult>> dispatch(Task task);
  Status groupOver();  // the error of a group that has ended (lock held)

  ValidConfig m_config;
  bool m_gpu = false;
  std::vector<EventSink*> m_sinks;  // [world_size]
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
  bool m_started = false;
};

}  // namespace moewb::engine
