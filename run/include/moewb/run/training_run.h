// TrainingRun: one training run of the embedded engine recorded into a trace file. This is the
// piece the CLI (`moewb run`) and the GUI's Run action share.
//
// Lifecycle: create() validates the config and only then creates the trace file (so a bad config
// leaves nothing behind), run() trains on the calling thread and returns a summary, requestStop()
// (any thread) ends the run after the current step. Every completed step is committed to the file
// before run() moves on, so the GUI can read the file live.
// One engine::Trainer runs every topology. With parallel.world_size > 1 the run trains on that many
// in-process ranks and every rank writes into the same file: one run row, per rank a trainer
// thread track and a "collectives" comm track, step / expert_load rows with the rank column, the
// collective and a2a_traffic tables. Checkpoints, resume, dumps, initial weights and merged
// exports need a single rank (kInvalidArgument); live commands work on every rank at once.
// With options.launcherRank >= 0 this process is one rank of a multi-process run started by a
// launcher (NCCL, one GPU per process): the file holds this rank's rows only (`moewb merge` joins
// the ranks' files), --gpu-trace captures this process's GPU, and pause / patches are refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"

#include "moewb/engine/trainer.h"
#include "moewb/profiler/gpu_capture.h"

namespace moewb::storage {
class TraceWriter;
}

namespace moewb::profiler {
class HostTracer;
}

namespace moewb::run {

using profiler::GpuCaptureOptions;
using profiler::HostTracer;

struct TrainingRunOptions {
  std::string outPath;          // trace file to create
  bool overwrite = true;        // replace an existing file at outPath
  int64_t steps = -1;           // total steps of the training run; -1 = config.run.steps
  std::string resumePath;       // checkpoint to continue from ("" = start at step 0)
  int64_t checkpointEverySteps = 0;  // save a checkpoint after every N-th step (0 = never)
  std::string checkpointDir;    // where those checkpoints go
  int64_t dumpFirstStep = 0;    // alignment dumps for steps in [dumpFirstStep, dumpEndStep)
  int64_t dumpEndStep = 0;
  std::string dumpDir;          // where the dumps go
  std::string initWeightsPath;  // base weights to start from (Trainer::loadWeights; "" = init)
  std::string exportMergedPath; // after training, write merged weights here ("" = none)
  bool gpuTrace = false;        // capture GPU activity with CUPTI (run.backend = cuda, one rank)
  GpuCaptureOptions gpuCapture; // buffers, capture mode (which steps) and kinds of that capture
  bool hostMemoryEvents = true; // false: the host trace drops device-memory events (memory_event
                                // rows); the overhead benchmark's "phases only" mode
  int32_t launcherRank = -1;    // >= 0: this rank of a multi-process run (see above)
  // Called once, after the trace has recorded the run as failed with `status` and the file was
  // closed, when a rank cannot be stopped (engine::TrainerOptions::onStuckRank): a multi-process
  // rank whose GPU work is stuck behind a dead peer (from a watchdog thread), or an in-process
  // rank thread still stalled after the run failed (from the training thread). It should end
  // the process (run() would not return). Empty: the run keeps waiting for the rank.
  std::function<void(const Status&)> onStuckRank;
  // Tests only (engine::TrainerOptions::beforeRankStep): called on in-process rank r's thread
  // before each of its steps.
  std::function<void(int32_t rank, int64_t step)> beforeRankStep;
};

struct RunSummary {
  std::string tracePath;
  int64_t stepsDone = 0;
  double firstLoss = 0;
  double lastLoss = 0;
  double meanTokensPerSecond = 0;   // over all steps but the first
  // MFU (docs/MFU.md): model FLOPs of one step counted from the config (forward + backward, the
  // whole batch of every rank), divided by the mean step time over all steps but the first and by
  // the peak of the GPUs the run trained on (the H200's dense bf16 peak, 989.4 TFLOP/s per GPU).
  // The CPU backend has no peak: peak, ceiling and mfu stay 0 there.
  double modelFlopsPerStep = 0;          // FLOPs (moewb/engine/model_flops.h)
  double modelFlopsPerSecond = 0;        // achieved, FLOP/s; 0 with fewer than two steps
  double peakFlopsPerSecond = 0;         // bf16 dense peak of the run's GPUs, FLOP/s; 0 on the CPU
  double gemmCeilingFlopsPerSecond = 0;  // bf16 GEMM rate measured on those GPUs, FLOP/s
  double mfu = 0;                        // modelFlopsPerSecond / peakFlopsPerSecond, 0..1
  double wallSeconds = 0;
  std::vector<double> meanImbalancePerLayer;  // mean over steps of max/mean expert load, [layers]
  bool stopped = false;         // true when requestStop ended the run early
};

class TrainingRun {
 public:
  // Validates `config` (kInvalidArgument naming the key, nothing created), then creates the
  // trace at options.outPath and the trainer, and loads options.resumePath if given (a bad
  // checkpoint gives its error and removes the new trace again). Training then runs from the
  // checkpoint's step up to options.steps in total. options.initWeightsPath is loaded before the
  // checkpoint (Trainer::loadWeights; a bad file fails create the same way). With
  // options.gpuTrace the GPU capture starts before the trainer exists (kInvalidArgument unless
  // run.backend = cuda on one rank; kUnimplemented in a build without CUPTI).
  // `observer` (may be null, must outlive the run)
  // receives every engine event after the tracer, e.g. a progress printer.
  static Result<std::unique_ptr<TrainingRun>> create(const engine::RunConfig& config,
                                                   const TrainingRunOptions& options,
                                                   engine::EventSink* observer = nullptr);
  // The same from a config validated before (engine::ValidConfig: no second validation; the
  // CLI and the GUI validate once where they load the file).
  static Result<std::unique_ptr<TrainingRun>> create(const engine::ValidConfig& config,
                                                   const TrainingRunOptions& options,
                                                   engine::EventSink* observer = nullptr);
  ~TrainingRun();

  // Trains options.steps steps on the calling thread and closes the trace, then writes
  // options.exportMergedPath (Trainer::exportMergedWeights) when set. Errors from the engine,
  // the writer or the export are returned; steps committed before the error stay in the file.
  Result<RunSummary> run();

  // Thread-safe; the run ends after the step in progress with status "stopped".
  void requestStop();

  // Thread-safe: steps every rank of the run has committed to the trace file (what a SIGKILL
  // would keep; storage::TraceWriter::committedSteps). May lag the steps computed by a few steps.
  int64_t committedSteps() const;

  // Thread-safe: pause / resume / single-step / stop / apply a live config patch; handled at the
  // next step boundary (engine::Trainer::post). Accepted patches appear in the trace's
  // config_change table.
  std::future<Status> post(engine::TrainerCommand command);
  // Keys a live patch may change.
  static const std::vector<std::string>& liveKeys();
  // Keys a live patch may change on this run (engine::Trainer::liveKeysFor: liveKeys(), plus the
  // parallel layout keys on in-process ranks).
  std::vector<std::string> liveKeysOfThisRun() const;
  // True while the trainer is paused by a command.
  bool paused() const;
  // Thread-safe: steps completed so far (rank 0's; engine::Trainer::stepsDone).
  int64_t stepsDone() const;
  // The backend the steps run on: "cpu" or "cuda" ("auto" resolved).
  std::string backendName() const;
  // The trace file this run writes.
  const std::string& tracePath() const;

  const engine::RunConfig& config() const { return m_config.get(); }
  int64_t plannedSteps() const { return m_steps; }
  // What the run trains on: "CPU, 8 threads" or the GPU with its driver ("NVIDIA H200 (device 0,
  // ...; driver 580.95.05, CUDA 13.0)"), as engine::Trainer::deviceDescription.
  std::string deviceDescription() const;

 private:
  class SummarySink;
  class WriterWatch;
  explicit TrainingRun(const engine::ValidConfig& config);
  Status startGpuCapture(const TrainingRunOptions& options);
  Status createTrainer(const TrainingRunOptions& options);
  Status loadSingleRankState(const TrainingRunOptions& options);
  // The checkpoint to resume and the checkpoint policy of a group of in-process ranks.
  Status loadGroupState(const TrainingRunOptions& options);
  // Loads options.resumePath when set; kInvalidArgument when it is not before the last step.
  Status resumeIfAsked(const TrainingRunOptions& options);
  static Status checkSingleRankOptions(const TrainingRunOptions& options, int32_t worldSize);

  engine::ValidConfig m_config;
  int64_t m_steps = 0;
  std::string m_exportMergedPath;
  std::unique_ptr<storage::TraceWriter> m_writer;
  std::unique_ptr<profiler::GpuCapture> m_gpuCapture;  // options.gpuTrace
  std::unique_ptr<HostTracer> m_tracer;
  std::unique_ptr<SummarySink> m_summary;
  std::unique_ptr<WriterWatch> m_writerWatch;
  std::unique_ptr<engine::FanOutSink> m_fanOut;
  std::unique_ptr<engine::Trainer> m_trainer;
  std::vector<std::unique_ptr<HostTracer>> m_rankTracers;  // ranks 1.. (in-process ranks)
};

}  // namespace moewb::run
