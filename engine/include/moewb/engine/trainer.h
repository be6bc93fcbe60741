// Trainer: the one training loop of the engine, for every topology. It owns the loop, the live
// command queue (pause, resume, single step, stop, config patches, all taken at the step
// boundary), checkpoints, alignment dumps and the step tail (divergence check, step event, expert
// loads, counters), and runs each step through a StepRunner (engine/train/step_runner.h):
//   one rank                      the CPU reference model (fp32), or the CUDA model (bf16 mixed
//                                 precision) with run.backend = "cuda" / "auto"
//   parallel.world_size > 1       in-process ranks: CPU threads, or virtual ranks sharing GPU 0
//                                 with run.backend = "cuda" (expert parallelism, FSDP, HSDP)
//   TrainerOptions::launcher      this process's rank of a multi-process NCCL run
// Events go to one EventSink per rank: onRunStart for every rank in rank order before the first
// step, each rank's phases, collectives and device memory from wherever that rank computes, then
// (from the training thread, after every rank finished the step) its expert loads, counters and
// onStep, and onRunEnd per rank. Losses and gradient norms of a parallel step are global (equal on
// every rank); tokens are each rank's.
//
// Lifecycle: create (validates the config, initialises weights from run.seed) -> run / step ->
// destroy. A Trainer is used from one thread (the "training thread"); requestStop and post may be
// called from any thread. Deterministic: the same config (including seed and thread
// count-independent math) gives the same losses. Checkpoints, resume, weights, merged exports,
// dumps and their replay need one rank (kFailedPrecondition otherwise).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"

namespace moewb::engine {

// A command for a running trainer, handled at the next step boundary (TrainerCommand docs in
// Trainer::post).
template <typename T>
class Model;

struct TrainerCommand {
  enum class Kind : uint8_t {
    kPause,       // stop between steps until kResume, kStep or kStop
    kResume,      // continue after a pause
    kStep,        // while paused: run exactly one step, then stay paused
    kStop,        // end the run after the step in progress (outcome kStopped)
    kApplyPatch,  // apply `assignments` ("optim.lr=1e-3", ...) from the next step on
  };
  Kind kind = Kind::kPause;
  std::vector<std::string> assignments;  // for kApplyPatch
  std::string source = "cli";            // who asked: "cli", "gui", "tuner"
};

class StepRunner;
struct RankStepOutcome;

// This process's place when a launcher (moewb launch, torchrun, srun) started it.
struct LauncherRank {
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;   // the GPU this rank uses
  std::string source;      // "torchrun-style env" or "slurm"
};

// This process's place when a launcher started it; nullopt for a single-process run.
// Errors: kInvalidArgument naming a partial or malformed launcher variable.
Result<std::optional<LauncherRank>> detectLauncherRank();

struct TrainerOptions {
  // rankSinks[r] receives in-process rank r's events (rank 0's is that of a one-rank run or of
  // this process under a launcher); missing or null entries: none. Each must outlive the Trainer.
  std::vector<EventSink*> rankSinks;
  // Set: this process is one rank of a multi-process run over NCCL on GPU launcher->localRank
  // (parallel.world_size must equal launcher->worldSize).
  std::optional<LauncherRank> launcher;
  // Called at most once with a status naming the stuck rank when the run has failed but a rank
  // cannot be stopped, so run() would not return: in a multi-process run from a watchdog thread
  // when a peer died and this rank's GPU work did not stop within parallel.timeout_ms (a stream
  // stuck behind an NCCL kernel); with in-process ranks (CPU threads, virtual GPU ranks) from the
  // training thread when a rank thread has not returned min(parallel.timeout_ms, 2 s) after the
  // failure (a rank stalled in compute or deadlocked), the status naming it and the step. It
  // should record the failure and end the process (as PyTorch's NCCL watchdog does). Empty, or
  // when it returns: the run keeps waiting for the rank.
  std::function<void(const Status&)> onStuckRank;
  // Tests only: called on in-process rank r's thread before each of its steps with (r, the
  // step), e.g. to stall one rank. Empty: nothing.
  std::function<void(int32_t rank, int64_t step)> beforeRankStep;
};

class Trainer {
 public:
  // Validates `config` (validateConfig) and builds the model of a one-rank run, or the rank group
  // of a run with parallel.world_size > 1 (whose ranks start with the first step; `sink` gets
  // rank 0's events). `sink` may be null; otherwise it must outlive the Trainer. Errors:
  // kInvalidArgument for a bad config (validateConfig's message, or more than 2^31-1 routed rows
  // per step, or checkFitsThisMachine's refusal); the CUDA backend's with run.backend = "cuda".
  static Result<std::unique_ptr<Trainer>> create(const RunConfig& config, EventSink* sink);
  // The same for any topology (see TrainerOptions), from a config validated once before
  // (ValidConfig: no second validation). Errors as above but the validation's, and for a
  // launcher rank kInvalidArgument (parallel.world_size differs from the launcher's WORLD_SIZE)
  // or kFailedPrecondition (no CUDA device, or a build without the CUDA backend).
  static Result<std::unique_ptr<Trainer>> create(const ValidConfig& config, TrainerOptions options);
  // validateConfig, then the above.
  static Result<std::unique_ptr<Trainer>> create(const RunConfig& config, TrainerOptions options);
  ~Trainer();

  // Runs `steps` optimizer steps (onRunStart before the first call's first step, onRunEnd at the
  // end of this call). Returns ok when all steps ran or a stop was requested (outcome kStopped;
  // ranks agree on a stop at a step boundary). A failed step ends the run with outcome kFailed
  // (message = the step's error) and returns that error; a rank that fails or stalls makes the
  // others fail within parallel.timeout_ms, the error naming it. steps < 0 gives kInvalidArgument
  // (no events). A run of several ranks ends with its first run() call.
  Status run(int64_t steps);

  // One optimizer step: forward, backward, AdamW. Emits phases, expert loads, counters ("lr",
  // "grad_norm", "memory.tensor_bytes") and one onStep, and returns the step's event (loss etc).
  // Errors: kInternal when the loss or the gradient norm is not finite (training diverged; no
  // onStep is emitted and the weights are not updated); kResourceExhausted when memory runs out.
  // Once a step has failed, every later step() / run() returns kFailedPrecondition, except after
  // out of device memory on the CUDA backend: that step's memory is released and the weights are
  // untouched, so later steps may be tried.
  Result<StepEvent> step();

  // Thread-safe: asks run() to stop after the step in progress (outcome kStopped). A request
  // made while no run() is active stops the next run() before its first step.
  // Async-signal-safe (one atomic store).
  void requestStop() { m_stopRequested.store(true); }

  // Writes the weights, AdamW moments and the step counter to `path` (safetensors, atomically;
  // layout in engine/train/checkpoint/checkpoint.h). A group of in-process ranks writes its
  // state gathered into the one-rank shapes: the same file, which resumes in any layout. Errors:
  // kInternal naming the path; kFailedPrecondition for a rank of a multi-process launch.
  Status saveCheckpoint(const std::string& path) const;

  // Loads a checkpoint of the same model (names and shapes must match; nothing changes on error);
  // the next step() continues at the checkpoint's step, bit-exactly as an uninterrupted run
  // would in the layout that wrote it. A group of in-process ranks takes its shards of it in its
  // own layout (before the first step, or at a step boundary). Errors: kNotFound, kDataLoss (not a
  // checkpoint / truncated), kInvalidArgument (other model), kFailedPrecondition (a rank of a
  // multi-process launch; a LoRA model on several ranks).
  Status loadCheckpoint(const std::string& path);

  // Loads only the base weights (every parameter that is not a LoRA adapter) by name from a
  // checkpoint or a merged export of a model with the same base shapes, e.g. a full-training
  // checkpoint to start LoRA fine-tuning from. Moments, adapters and the step in the file are
  // ignored; the expert bias state is loaded when the file has it. Nothing changes on error.
  // Errors: kNotFound, kDataLoss (not a checkpoint / weights file), kInvalidArgument naming the
  // missing or mis-shaped tensor.
  Status loadWeights(const std::string& path);

  // Writes every base parameter under its plain name, with W + (alpha / rank) B A merged in where
  // LoRA adapts it, plus the expert bias state, to `path` (safetensors, atomically; metadata
  // format = "moewb-weights", config = this run's TOML with lora.enabled = false). No adapters,
  // no moments. loadWeights() of a LoRA-off model of the same config accepts the file.
  // Errors: kInternal naming the path.
  Status exportMergedWeights(const std::string& path) const;

  // After every `everySteps`-th completed step, run() saves `dir`/step-<NNNNNNNN>.safetensors
  // (the number is the next step to run). everySteps <= 0 disables. A failed save ends the run
  // with that error.
  void setCheckpointPolicy(int64_t everySteps, const std::string& dir);

  // Writes an alignment dump (engine/train/checkpoint/alignment_dump.h: weights before the step,
  // the batch, the loss terms, every gradient after backward) for each step in
  // [firstStep, endStep) to `dir`/step-<NNNNNNNN>.safetensors. A failed write fails the step; so
  // does a dumped step cut into micro-batches (kFailedPrecondition: data.micro_batch_size must
  // be 0 or the whole batch).
  void setDumpPolicy(int64_t firstStep, int64_t endStep, const std::string& dir);

  // Loads the weights and batch of an alignment dump and runs the forward pass on them (no
  // update). Returns {ce, aux} as computed now; compare with the dump's recorded terms.
  // Errors: those of reading the dump, kInvalidArgument when its batch shape differs from the
  // config's (data.batch_size, model.seq_len), kFailedPrecondition while data.micro_batch_size
  // cuts steps into micro-batches.
  struct ReplayedLoss {
    double ce = 0;
    double aux = 0;
    double recordedCe = 0;   // as written in the dump
    double recordedAux = 0;
  };
  Result<ReplayedLoss> replayAlignmentDump(const std::string& path);

  // Thread-safe: queues a command for the running trainer; it is handled before the next step
  // starts (run() also waits on commands while paused), on every rank of the run at once. The
  // future is ready once the command is handled: ok, or for kApplyPatch an error naming the key
  // when the patch is invalid (validateConfig) or changes a setting that needs new weights or
  // buffers (liveKeys() lists what can change; layoutKeys() too on in-process ranks, where the
  // state is re-sharded into the new layout). A rejected patch changes nothing; an accepted one
  // is reported through rank 0's onConfigChange, one event per changed key. A multi-process
  // (launcher) rank refuses pause, step and patches (kFailedPrecondition): one process pausing
  // would stall the others' collectives.
  std::future<Status> post(TrainerCommand command);

  // Keys a patch may change while the run goes on, on every topology.
  static const std::vector<std::string>& liveKeys();
  // The parallel layout within the same ranks: parallel.ep, .fsdp, .replicate, .a2a_chunks. A
  // patch may change them on in-process ranks (CPU threads or virtual GPU ranks): the weights,
  // gradients, AdamW moments, expert biases and step count are gathered and re-sharded into the
  // new layout at the step boundary, and the following steps equal those of a run started in
  // that layout from the same state. A one-rank run refuses them as it refuses other non-live
  // keys; a multi-process (launcher) rank refuses them, naming the key.
  static const std::vector<std::string>& layoutKeys();
  // The keys a patch may change on an in-process run of `config`: liveKeys(), plus layoutKeys()
  // when it has several ranks (parallel.world_size > 1).
  static std::vector<std::string> liveKeysFor(const RunConfig& config);

  bool paused() const { return m_paused.load(); }
  // Thread-safe: completed steps (rank 0's).
  int64_t stepsDone() const { return m_stepsDone.load(); }
  const RunConfig& config() const { return m_config; }
  // Ranks this process trains (1, parallel.world_size for in-process ranks, 1 under a launcher).
  int32_t localRanks() const;
  // Number of trainable float parameters (one-rank runs; 0 otherwise).
  int64_t parameterCount() const;
  // Every parameter's name and shape, in model order (the names used by checkpoints and dumps);
  // one-rank runs (empty otherwise).
  struct ParameterInfo {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<ParameterInfo> parameterInfos() const;
  // CPU threads a one-rank trainer computes with (run.threads, or the hardware threads when 0).
  int32_t threadCount() const;
  // The backend the steps run on: "cpu" or "cuda" (run.backend = "auto" resolved).
  std::string backendName() const;
  // What the backend runs on: "CPU, 8 threads", the GPU ("NVIDIA H200 (device 0, ...)"),
  // "4 in-process ranks (CPU threads)", "4 virtual ranks sharing GPU 0", "rank 1 of 8 processes ...".
  std::string deviceDescription() const;

 private:
  Trainer(const ValidConfig& config, std::unique_ptr<StepRunner> runner,
          std::vector<EventSink*> rankSinks);
  // onRunStart on every rank's sink and the runner's start (rank threads, rendezvous), once.
  Status startRunOnce();
  // Ends the run: the runner's finish, then onRunEnd on every rank's sink. Returns `status`, or
  // the finish's error when `status` is ok.
  Status endRun(RunOutcome outcome, Status status);
  // The step tail: divergence check, tokens/s, then per rank its expert loads, counters, onStep.
  Result<StepEvent> finishStep(std::vector<RankStepOutcome>& outcomes);
  Status maybeSaveCheckpoint();
  // Handles queued commands; returns false when the run must stop. Blocks while paused.
  bool handleCommands();
  // Answers every queued command with kFailedPrecondition (the run has ended).
  void rejectPendingCommands();
  Status applyPatch(const TrainerCommand& command);
  // The host model of a one-rank run, or kFailedPrecondition naming `what` for other topologies.
  Result<Model<float>*> singleRankModel(const std::string& what) const;
  // saveCheckpoint / loadCheckpoint of a runner without a host model (a rank group).
  Status saveGroupCheckpoint(const std::string& path) const;
  Status loadGroupCheckpoint(const std::string& path);
  struct QueuedCommand {
    TrainerCommand command;
    std::promise<Status> done;
  };

  RunConfig m_config;
  std::unique_ptr<StepRunner> m_runner;
  std::vector<EventSink*> m_sinks;  // [local ranks] (null entries: none)
  std::string m_liveRefusal;  // why pause / step / patch are refused ("" when accepted)
  std::atomic<int64_t> m_stepsDone{0};
  bool m_runStarted = false;
  bool m_runEnded = false;
  Status m_failure;  // the error of the step that failed; ok while training is healthy
  std::atomic<bool> m_stopRequested{false};
  std::mutex m_commandMutex;
  std::condition_variable m_commandReady;
  std::deque<QueuedCommand> m_commands;  // guarded by m_commandMutex
  std::atomic<bool> m_paused{false};
  bool m_singleStep = false;  // run one step while paused
  int64_t m_dumpFirstStep = 0;
  int64_t m_dumpEndStep = 0;
  std::string m_dumpDir;
  int64_t m_checkpointEverySteps = 0;
  std::string m_checkpointDir;
};

// Ok when a one-rank run of `config` fits this machine's host memory on the backend it would
// take (run.backend; "auto" takes the GPU when this build has it and a device is visible): the
// same estimate and refusal Trainer::create gives, without allocating anything. The refusal is
// kInvalidArgument naming the estimate, the machine's memory and the keys that reduce it. Runs
// with parallel.world_size > 1 are not estimated (ok).
Status checkFitsThisMachine(const RunConfig& config);

}  // namespace moewb::engine
