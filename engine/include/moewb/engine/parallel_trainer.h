// ParallelTrainer: a training run on parallel.world_size in-process ranks (one thread each) with
// expert parallelism and FSDP (engine/src/parallel/rank_trainer.h has the step and the math). With
// run.backend = "cuda" the ranks are virtual GPU ranks sharing GPU 0, each with its own stream,
// buffers and device collectives (cuda_parallel/cuda_rank_trainer.h).
//
// Lifecycle: create (validates the config; nothing starts) -> run (starts the rank threads, runs
// the steps, joins) -> destroy. Each rank reports to its own EventSink: onRunStart for every rank
// is called on the calling thread in rank order before any step (so a rank-0 tracer can create
// the run that the others join), then each rank's phases, collectives, traffic, expert loads,
// counters and steps from its own thread, and onRunEnd per rank on the calling thread after the
// join. Losses and gradient norms in step events are global (equal on every rank).
// Faults: a rank that fails, throws or stalls makes the others fail within parallel.timeout_ms;
// run() returns the first error, prefixed with the rank that reported it and naming the rank that
// failed or did not arrive. requestStop may be called from any thread; the ranks agree on it at
// the next step boundary. Live commands, checkpoints and dumps are single-rank features.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"

namespace moewb::engine {

class ParallelTrainer {
 public:
  // Validates `config`. rankSinks[r] receives rank r's events (missing or null entries: none);
  // each must outlive the trainer. Errors: kInvalidArgument (validateConfig's message).
  static Result<std::unique_ptr<ParallelTrainer>> create(const RunConfig& config,
                                                         std::vector<EventSink*> rankSinks);

  // Runs `steps` optimizer steps on every rank. Returns ok when all ran or a stop was requested
  // (outcome kStopped); otherwise the first rank error (outcome kFailed on every sink). Call once.
  Status run(int64_t steps);

  // Thread-safe; async-signal-safe (one atomic store).
  void requestStop() { m_stopRequested.store(true); }

  int64_t stepsDone() const { return m_stepsDone.load(); }
  const RunConfig& config() const { return m_config; }

 private:
  ParallelTrainer(const RunConfig& config, std::vector<EventSink*> rankSinks);

  RunConfig m_config;
  std::vector<EventSink*> m_sinks;  // [world_size]
  std::atomic<bool> m_stopRequested{false};
  std::atomic<int64_t> m_stepsDone{0};
};

}  // namespace moewb::engine
