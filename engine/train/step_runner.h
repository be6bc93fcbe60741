// StepRunner: how the one Trainer (moewb/engine/trainer.h) runs a training step on one topology.
// The Trainer owns the loop, the live command queue, checkpoints, dumps and the step tail
// (divergence check, step event, expert loads, counters); a StepRunner only computes steps, on:
//   CpuModelRunner    one rank, the fp32 CPU model (cpu_model_runner.h)
//   CudaModelRunner   one rank, the CUDA model in bf16 mixed precision (cuda_model_runner.h)
//   RankGroupRunner   in-process ranks: threads on the CPU or virtual ranks sharing one GPU
//                     (parallel/rank_group_runner.h)
//   LauncherRankRunner this process's rank of a multi-process NCCL run (parallel/launcher_rank_runner.h)
// Calls come from the trainer thread, in the order start, (agreeOnStop, applyLiveConfig, step)*,
// finish. Events a rank emits while it steps (phases, collectives, device memory) go to that
// rank's sink from wherever the rank computes; the Trainer emits the rest after the step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/cpu/model.h"
#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"
#include "train/training_state.h"

namespace moewb::engine {

class DeviceBackend;

// Bytes per memory category reported with each step (host tensors, or the device's).
struct MemoryAccount {
  int64_t weightsBytes = 0;
  int64_t gradsBytes = 0;
  int64_t optimizerBytes = 0;
  std::optional<int64_t> activationsBytes;  // activations + workspace at the step's peak
  std::optional<int64_t> totalBytes;        // everything in use (reported as memory.tensor_bytes)
};

// One rank's finished step, before the Trainer's tail turns it into events.
struct RankStepOutcome {
  StepEvent event;       // every field but tokensPerSecond (the tail computes it)
  ForwardResult forward; // losses and per-layer expert counts, drops and bias
  MemoryAccount memory;
};

// What the Trainer asks of one step.
struct StepRequest {
  int64_t step = 0;        // 0-based index of the step (the data batch and lr follow it)
  bool dump = false;       // write an alignment dump of this step (single-rank runners only)
  std::string dumpDir;
};

// The errors of a diverged step, worded the same for every topology (kInternal).
inline Status divergedLoss(int64_t step, double loss, double auxLoss,
                           const std::string& nonFiniteAuxTerm = {}) {
  return internalError("training diverged at step " + std::to_string(step) + ": loss = " +
                       std::to_string(loss) + ", aux loss = " + std::to_string(auxLoss) +
                       (nonFiniteAuxTerm.empty() ? "" : " (first non-finite term: " +
                                                            nonFiniteAuxTerm + ")"));
}
inline Status divergedGradNorm(int64_t step, double gradNorm) {
  return internalError("training diverged at step " + std::to_string(step) +
                       ": gradient norm = " + std::to_string(gradNorm));
}

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // "cpu" or "cuda": what the trace's run row records.
  virtual std::string backendName() const = 0;
  // "CPU, 8 threads" or the GPU ("NVIDIA H200 (device 0, ...)"), with the reason when
  // run.backend = "auto" stayed on the CPU.
  virtual std::string deviceDescription() const = 0;
  // Ranks whose outcome step() returns: 1, or world_size for an in-process group.
  virtual int32_t reportedRanks() const = 0;
  // The global rank of the first reported rank (this process's rank under a launcher, else 0).
  virtual int32_t firstRank() const { return 0; }

  // Before the first step: `sinks[i]` receives the events of reported rank i while it computes
  // (null entries: none). Starts rank threads or joins the other processes. Errors: the ranks'
  // (creation, rendezvous), which also end the run.
  virtual Status start(const std::vector<EventSink*>& sinks) = 0;
  // One optimizer step on every rank; the outcomes of the reported ranks in rank order. Errors:
  // the step's (collectives name a failed or missing rank; "training diverged" when the loss is
  // not finite before the update).
  virtual Result<std::vector<RankStepOutcome>> step(const StepRequest& request) = 0;
  // Collective: true on every rank when any rank passes true (the stop agreed at a boundary).
  virtual Result<bool> agreeOnStop(bool stop) = 0;
  // At a step boundary: the live-patchable settings of `config` on every rank; on a runner that
  // reshardsLive(), also a new parallel layout (the state re-sharded into it).
  virtual Status applyLiveConfig(const ValidConfig& config) = 0;
  // True when applyLiveConfig takes a new parallel layout (in-process rank groups).
  virtual bool reshardsLive() const { return false; }
  // After the last step or a failure (joins rank threads, leaves the rendezvous). Idempotent.
  virtual Status finish() = 0;
  // A failed step after which later steps may still run (out of device memory on one GPU).
  virtual bool recoverable(const Status& /*failure*/) const { return false; }

  // The host model of a single-rank runner (the owner of the weights for checkpoints, exports and
  // dumps); null for rank groups and launcher ranks.
  virtual Model<float>* hostModel() { return nullptr; }
  // The device backend of a single-rank CUDA runner (pull/push state around checkpoints).
  virtual DeviceBackend* device() { return nullptr; }
  // CPU threads of a single-rank runner (0 elsewhere).
  virtual int32_t threadCount() const { return 0; }
  // Where this runner's construction spent its time (empty when it did not measure).
  virtual std::vector<StartupPhase> startupPhases() const { return {}; }

  // At a step boundary: the whole training state in the one-rank model's shapes (a rank group's
  // checkpoint). Errors: kFailedPrecondition on runners without a group state (one rank: its
  // host model is the state; a launcher rank: the other ranks are other processes); the group's.
  virtual Result<TrainingState> gatherState() { return noGroupState("a checkpoint"); }
  // Replaces the training state by `state` (a resumed checkpoint), before the first step or at
  // a step boundary. Errors as gatherState, and kInvalidArgument when `state` is not of this
  // run's model.
  virtual Status scatterState(const TrainingState& /*state*/) {
    return noGroupState("resuming a checkpoint");
  }

 private:
  static Status noGroupState(const std::string& what) {
    return failedPrecondition(what + " needs a one-rank run or in-process ranks; the ranks of "
                                     "this run are other processes");
  }
};

}  // namespace moewb::engine
