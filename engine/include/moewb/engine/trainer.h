// Trainer: owns the model, optimizer and data source of one run and executes training steps on
// the CPU reference backend, reporting everything through an EventSink.
//
// Lifecycle: create (validates the config, initialises weights from run.seed) -> run / step ->
// destroy. A Trainer is used from one thread (the "training thread"); requestStop may be called
// from any thread and makes run() return after the current step. Deterministic: the same config
// (including seed and thread count-independent math) gives the same losses.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"

namespace moewb::engine {

// A command for a running trainer, handled at the next step boundary (TrainerCommand docs in
// Trainer::post).
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

template <typename T>
class Model;
class DeviceBackend;
class PhaseRecorder;
struct Batch;
struct ForwardResult;
class SyntheticData;
class ThreadPool;

class Trainer {
 public:
  // Validates `config` (validateConfig) and builds the model. `sink` may be null; otherwise it
  // must outlive the Trainer. Errors: kInvalidArgument for a bad config (validateConfig's
  // message, or more than 2^31-1 routed rows per step); kResourceExhausted when the model and one
  // step's activations would not fit in half of the machine's memory.
  static Result<std::unique_ptr<Trainer>> create(const RunConfig& config, EventSink* sink);
  ~Trainer();

  // Runs `steps` optimizer steps (onRunStart before the first call's first step, onRunEnd at the
  // end of this call). Returns ok when all steps ran or a stop was requested (outcome kStopped).
  // A failed step ends the run with outcome kFailed (message = the step's error) and returns that
  // error. steps < 0 gives kInvalidArgument (no events).
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
  // layout in engine/src/checkpoint/checkpoint.h). Errors: kInternal naming the path.
  Status saveCheckpoint(const std::string& path) const;

  // Loads a checkpoint of the same model (names and shapes must match; nothing changes on error);
  // the next step() continues at the checkpoint's step, bit-exactly as an uninterrupted run would.
  // Errors: kNotFound, kDataLoss (not a checkpoint / truncated), kInvalidArgument (other model).
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

  // Writes an alignment dump (engine/src/checkpoint/alignment_dump.h: weights before the step,
  // the batch, the loss terms, every gradient after backward) for each step in
  // [firstStep, endStep) to `dir`/step-<NNNNNNNN>.safetensors. A failed write fails the step.
  void setDumpPolicy(int64_t firstStep, int64_t endStep, const std::string& dir);

  // Loads the weights and batch of an alignment dump and runs the forward pass on them (no
  // update). Returns {ce, aux} as computed now; compare with the dump's recorded terms.
  // Errors: those of reading the dump, or kInvalidArgument when its batch shape differs from the
  // config's (data.batch_size, model.seq_len).
  struct ReplayedLoss {
    double ce = 0;
    double aux = 0;
    double recordedCe = 0;   // as written in the dump
    double recordedAux = 0;
  };
  Result<ReplayedLoss> replayAlignmentDump(const std::string& path);

  // Thread-safe: queues a command for the running trainer; it is handled before the next step
  // starts (run() also waits on commands while paused). The future is ready once the command is
  // handled: ok, or for kApplyPatch an error naming the key when the patch is invalid
  // (validateConfig) or changes a setting that needs new weights or buffers (liveKeys() lists
  // what can change). A rejected patch changes nothing; an accepted one is reported through
  // onConfigChange, one event per changed key.
  std::future<Status> post(TrainerCommand command);

  // Keys a patch may change while the run goes on.
  static const std::vector<std::string>& liveKeys();

  bool paused() const { return m_paused.load(); }
  int64_t stepsDone() const { return m_stepsDone; }
  const RunConfig& config() const { return m_config; }
  // Number of trainable float parameters.
  int64_t parameterCount() const;
  // Every parameter's name and shape, in model order (the names used by checkpoints and dumps).
  struct ParameterInfo {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<ParameterInfo> parameterInfos() const;
  // CPU threads the trainer computes with (run.threads, or the hardware threads when 0).
  int32_t threadCount() const;
  // The backend the steps run on: "cpu" or "cuda" (run.backend = "auto" resolved).
  std::string backendName() const;
  // What the backend runs on: "CPU, 8 threads" or the GPU ("NVIDIA H200 (device 0, ...)").
  std::string deviceDescription() const;

 private:
  Trainer(const RunConfig& config, EventSink* sink);
  void startRunOnce();
  void endRun(RunOutcome outcome, const std::string& message);
  Result<StepEvent> trainStep();
  Status maybeSaveCheckpoint();
  // Handles queued commands; returns false when the run must stop. Blocks while paused.
  bool handleCommands();
  // Answers every queued command with kFailedPrecondition (the run has ended).
  void rejectPendingCommands();
  Status applyPatch(const TrainerCommand& command);
  // Resolves run.backend and builds the device backend when it is not the CPU.
  Status selectBackend();
  // One step on the device backend (trainStep's device half).
  Result<StepEvent> deviceTrainStep(int64_t stepIndex, StepEvent event, PhaseRecorder& recorder,
                                    const Batch& batch);
  struct QueuedCommand {
    TrainerCommand command;
    std::promise<Status> done;
  };
  // Bytes per memory category reported with each step (host tensors, or the device's).
  struct MemoryAccount {
    int64_t weightsBytes = 0;
    int64_t gradsBytes = 0;
    int64_t optimizerBytes = 0;
    int64_t activationsBytes = 0;  // activations + workspace at the step's peak
    int64_t totalBytes = 0;        // everything in use at the step's end
  };
  MemoryAccount hostMemoryAccount(int64_t peakBytes) const;
  void emitStepEvents(const StepEvent& event, const ForwardResult& forward,
                      const MemoryAccount& memory);

  RunConfig m_config;
  EventSink* m_sink;
  std::unique_ptr<ThreadPool> m_pool;
  std::unique_ptr<Model<float>> m_model;  // the weights' owner on every backend (checkpoints)
  std::unique_ptr<DeviceBackend> m_device;  // the CUDA backend, or null on the CPU reference
  std::string m_backendNote;  // why run.backend = "auto" stayed on the CPU (empty otherwise)
  std::unique_ptr<SyntheticData> m_data;
  int64_t m_stepsDone = 0;
  bool m_runStarted = false;
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

}  // namespace moewb::engine
