// TrainingRun: config -> validated trainer -> trace file, shared by `moewb run` and the GUI.
#include "moewb/run/training_run.h"

#include <algorithm>
#include <filesystem>

#include "moewb/base/units.h"
#include "moewb/engine/model_flops.h"
#include "moewb/engine/trainer.h"
#include "moewb/profiler/host_tracer.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::run {

using profiler::GpuCapture;

// Keeps what the end-of-run summary needs from the events: first/last loss and throughput. The
// imbalance per layer is read back from the finished trace (TraceReader::layerImbalance), so the
// summary and `moewb info` share one definition.
class TrainingRun::SummarySink final : public engine::EventSink {
 public:
  void onRunStart(const engine::RunStartEvent& e) override { m_startNs = e.startNs; }
  void onPhase(const engine::PhaseEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onStep(const engine::StepEvent& e) override {
    if (m_summary.stepsDone == 0) m_summary.firstLoss = e.loss;
    m_summary.lastLoss = e.loss;
    m_summary.stepsDone++;
    if (m_summary.stepsDone > 1) {  // the first step pays one-time costs
      m_tokensAfterFirst += e.tokens;
      m_nsAfterFirst += e.endNs - e.startNs;
      m_stepsAfterFirst++;
    }
    m_lastEndNs = e.endNs;
  }
  void onRunEnd(const engine::RunEndEvent& e) override {
    m_summary.stopped = e.outcome == engine::RunOutcome::kStopped;
  }

  RunSummary summary() const {
    RunSummary s = m_summary;
    if (m_nsAfterFirst > 0)
      s.meanTokensPerSecond = double(m_tokensAfterFirst) * 1e9 / double(m_nsAfterFirst);
    s.wallSeconds = double(m_lastEndNs - m_startNs) / 1e9;
    return s;
  }
  // Mean seconds of a step over all steps but the first; 0 before the second step.
  double meanStepSeconds() const {
    return m_stepsAfterFirst > 0 ? double(m_nsAfterFirst) / 1e9 / double(m_stepsAfterFirst) : 0.0;
  }

 private:
  RunSummary m_summary;
  int64_t m_startNs = 0;
  int64_t m_lastEndNs = 0;
  int64_t m_tokensAfterFirst = 0;
  int64_t m_nsAfterFirst = 0;
  int64_t m_stepsAfterFirst = 0;
};

namespace {

// RunSummary's MFU fields: the count from the config and the achieved rate from the mean step
// time on every backend; on the GPU also the peak and measured GEMM rate of the GPUs the run
// trained on (one for a single rank or virtual ranks sharing GPU 0, world_size for the processes
// of a launcher run, each on its own GPU) and the MFU against that peak.
void fillMfu(const engine::RunConfig& config, const engine::Trainer& trainer,
             double meanStepSeconds, RunSummary& summary) {
  summary.modelFlopsPerStep = engine::modelFlopsPerStep(config).total();
  if (meanStepSeconds > 0) {
    summary.modelFlopsPerSecond = summary.modelFlopsPerStep / meanStepSeconds;
  }
  if (trainer.backendName() != "cuda") return;
  const int32_t gpus = std::max(1, config.parallel.worldSize / std::max(1, trainer.localRanks()));
  summary.peakFlopsPerSecond = gpus * engine::kH200Bf16PeakFlopsPerSecond;
  summary.gemmCeilingFlopsPerSecond = gpus * engine::kH200MeasuredGemmFlopsPerSecond;
  summary.mfu = summary.modelFlopsPerSecond / summary.peakFlopsPerSecond;
}

}  // namespace

TrainingRun::TrainingRun(const engine::ValidConfig& config) : m_config(config) {}

// Checks the trace writer at every step boundary (rank 0's step, on the training thread): after a
// write error (a full disk, a removed file) the run stops at the next boundary and run() returns
// the error, instead of training on for hours into a file that drops every row.
class TrainingRun::WriterWatch final : public engine::EventSink {
 public:
  explicit WriterWatch(TrainingRun& run) : m_run(run) {}
  void onRunStart(const engine::RunStartEvent&) override {}
  void onPhase(const engine::PhaseEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onStep(const engine::StepEvent&) override {
    if (m_stopped || m_run.m_writer->health().isOk() || !m_run.m_trainer) return;
    m_stopped = true;
    m_run.m_trainer->requestStop();
  }
  void onRunEnd(const engine::RunEndEvent&) override {}

 private:
  TrainingRun& m_run;
  bool m_stopped = false;
};

TrainingRun::~TrainingRun() {
  m_trainer.reset();
  if (m_gpuCapture) (void)m_gpuCapture->stop();
  if (m_writer) (void)m_writer->close();
}

Result<std::unique_ptr<TrainingRun>> TrainingRun::create(const engine::RunConfig& config,
                                                     const TrainingRunOptions& options,
                                                     engine::EventSink* observer) {
  MOEWB_ASSIGN_OR_RETURN(const engine::ValidConfig valid, engine::ValidConfig::validate(config));
  return create(valid, options, observer);
}

Result<std::unique_ptr<TrainingRun>> TrainingRun::create(const engine::ValidConfig& config,
                                                     const TrainingRunOptions& options,
                                                     engine::EventSink* observer) {
  if (options.outPath.empty()) return invalidArgument("no output trace path given");
  std::unique_ptr<TrainingRun> run(new TrainingRun(config));
  run->m_steps = options.steps >= 0 ? options.steps : config->run.steps;

  storage::WriterOptions writerOptions;
  writerOptions.overwrite = options.overwrite;
  MOEWB_ASSIGN_OR_RETURN(run->m_writer,
                         storage::TraceWriter::create(options.outPath, writerOptions));
  run->m_tracer =
      std::make_unique<HostTracer>(run->m_writer.get(), std::max(0, options.launcherRank));
  run->m_tracer->setMemoryEvents(options.hostMemoryEvents);
  run->m_summary = std::make_unique<SummarySink>();
  run->m_writerWatch = std::make_unique<WriterWatch>(*run);
  std::vector<engine::EventSink*> sinks{run->m_tracer.get(), run->m_writerWatch.get(),
                                        run->m_summary.get()};
  Status captured = options.gpuTrace ? run->startGpuCapture(options) : Status::ok();
  if (run->m_gpuCapture) sinks.push_back(run->m_gpuCapture.get());
  if (observer) sinks.push_back(observer);
  run->m_fanOut = std::make_unique<engine::FanOutSink>(sinks);

  Status ready = captured.isOk() ? run->createTrainer(options) : captured;
  if (!ready.isOk()) {
    run->m_trainer.reset();
    if (run->m_gpuCapture) (void)run->m_gpuCapture->stop();
    run->m_gpuCapture.reset();
    (void)run->m_writer->close();
    run->m_writer.reset();
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(options.outPath + suffix, ignored);
    }
    return ready;
  }
  return run;
}

Status TrainingRun::startGpuCapture(const TrainingRunOptions& options) {
  const bool oneGpuProcess = m_config->parallel.worldSize == 1 || options.launcherRank >= 0;
  if (m_config->run.backend != "cuda" || !oneGpuProcess) {
    return invalidArgument("GPU trace capture needs run.backend = cuda and one GPU per process "
                           "(one rank, or a rank of `moewb launch`); this run has run.backend = " +
                           m_config->run.backend + " and " +
                           std::to_string(m_config->parallel.worldSize) + " ranks in one process");
  }
  MOEWB_ASSIGN_OR_RETURN(m_gpuCapture, GpuCapture::create(m_writer.get(), options.gpuCapture));
  return Status::ok();
}

Status TrainingRun::checkSingleRankOptions(const TrainingRunOptions& options, int32_t worldSize) {
  // Checkpoints also work for in-process ranks (the group's state gathered into one file), not
  // for the ranks of a multi-process launch.
  const char* checkpoint = !options.resumePath.empty()          ? "--resume"
                           : options.checkpointEverySteps > 0   ? "--checkpoint-every"
                                                                : nullptr;
  if (checkpoint != nullptr && options.launcherRank >= 0) {
    return invalidArgument(std::string(checkpoint) + " is not accepted for a rank of a "
                           "multi-process launch; accepted: one rank, or in-process ranks "
                           "(--ranks N)");
  }
  const char* single = !options.initWeightsPath.empty()              ? "--init-weights"
                       : !options.exportMergedPath.empty()           ? "--export-merged"
                       : options.dumpEndStep > options.dumpFirstStep ? "--dump-steps"
                                                                     : nullptr;
  if (single != nullptr) {
    return invalidArgument(std::string(single) + " is not accepted with parallel.world_size = " +
                           std::to_string(worldSize) +
                           "; accepted: only with one rank (parallel.world_size = 1)");
  }
  return Status::ok();
}

// One Trainer for every topology: rank 0 (or this process's rank) writes through the fan-out
// (tracer, summary, GPU capture, observer), in-process ranks 1.. through tracers of their own.
Status TrainingRun::createTrainer(const TrainingRunOptions& options) {
  const bool singleRank = options.launcherRank < 0 && m_config->parallel.worldSize == 1;
  if (!singleRank) {
    MOEWB_RETURN_IF_ERROR(checkSingleRankOptions(options, m_config->parallel.worldSize));
  }
  engine::TrainerOptions trainerOptions;
  trainerOptions.rankSinks.push_back(m_fanOut.get());
  if (options.launcherRank >= 0) {
    MOEWB_ASSIGN_OR_RETURN(std::optional<engine::LauncherRank> launcher,
                           engine::detectLauncherRank());
    if (!launcher) {
      return failedPrecondition("a multi-process run needs a launcher's environment (RANK and "
                                "WORLD_SIZE, or SLURM_PROCID and SLURM_NTASKS); start it with "
                                "`moewb launch --nproc N -- moewb run ...`, torchrun or srun");
    }
    trainerOptions.launcher = *launcher;
  } else {
    trainerOptions.beforeRankStep = options.beforeRankStep;
    for (int32_t r = 1; r < m_config->parallel.worldSize; ++r) {
      m_rankTracers.push_back(std::make_unique<HostTracer>(m_writer.get(), r, m_tracer.get()));
      m_rankTracers.back()->setMemoryEvents(options.hostMemoryEvents);
      trainerOptions.rankSinks.push_back(m_rankTracers.back().get());
    }
  }
  if (options.onStuckRank && !singleRank) {
    // A rank is blocked for good: record the failure from this thread (the writer takes rows
    // from any thread; rank 0's tracer gets no more events from a run that cannot go on) and
    // close the file, then let the caller end the process.
    trainerOptions.onStuckRank = [this, handler = options.onStuckRank](const Status& status) {
      engine::RunEndEvent end;
      end.outcome = engine::RunOutcome::kFailed;
      end.message = status.toString();
      end.endNs = steadyNowNs();
      end.stepsDone = m_trainer ? m_trainer->stepsDone() : 0;
      for (auto& rankTracer : m_rankTracers) rankTracer->onRunEnd(end);  // their queued rows
      m_tracer->onRunEnd(end);
      (void)m_writer->close();
      handler(status);
    };
  }
  MOEWB_ASSIGN_OR_RETURN(m_trainer, engine::Trainer::create(m_config, std::move(trainerOptions)));
  if (singleRank) return loadSingleRankState(options);
  return options.launcherRank < 0 ? loadGroupState(options) : Status::ok();
}

// The checkpoint to resume and the checkpoint policy of a group of in-process ranks.
Status TrainingRun::loadGroupState(const TrainingRunOptions& options) {
  MOEWB_RETURN_IF_ERROR(resumeIfAsked(options));
  m_trainer->setCheckpointPolicy(options.checkpointEverySteps, options.checkpointDir);
  return Status::ok();
}

Status TrainingRun::resumeIfAsked(const TrainingRunOptions& options) {
  if (options.resumePath.empty()) return Status::ok();
  MOEWB_RETURN_IF_ERROR(m_trainer->loadCheckpoint(options.resumePath));
  if (m_trainer->stepsDone() >= m_steps) {
    return invalidArgument("checkpoint '" + options.resumePath + "' is at step " +
                           std::to_string(m_trainer->stepsDone()) +
                           ", not before the last step (" + std::to_string(m_steps) +
                           "); raise --steps / run.steps");
  }
  return Status::ok();
}

// Initial weights, the checkpoint to resume and the checkpoint / dump policies of a one-rank run.
Status TrainingRun::loadSingleRankState(const TrainingRunOptions& options) {
  m_exportMergedPath = options.exportMergedPath;
  if (!options.initWeightsPath.empty()) {
    MOEWB_RETURN_IF_ERROR(m_trainer->loadWeights(options.initWeightsPath));
  }
  MOEWB_RETURN_IF_ERROR(resumeIfAsked(options));
  m_trainer->setCheckpointPolicy(options.checkpointEverySteps, options.checkpointDir);
  m_trainer->setDumpPolicy(options.dumpFirstStep, options.dumpEndStep, options.dumpDir);
  return Status::ok();
}

std::string TrainingRun::deviceDescription() const { return m_trainer->deviceDescription(); }

Result<RunSummary> TrainingRun::run() {
  if (m_gpuCapture) m_gpuCapture->setFirstStep(m_trainer->stepsDone());
  Status trained = m_trainer->run(m_steps - m_trainer->stepsDone());
  Status captured = m_gpuCapture ? m_gpuCapture->stop() : Status::ok();
  Status closed = m_writer->close();
  if (!trained.isOk()) return trained;
  if (!captured.isOk()) return captured.withContext("GPU capture into " + m_writer->path());
  if (!closed.isOk()) return closed.withContext("writing trace " + m_writer->path());
  if (!m_exportMergedPath.empty()) {
    Status exported = m_trainer->exportMergedWeights(m_exportMergedPath);
    if (!exported.isOk()) return exported.withContext("exporting merged weights");
  }
  RunSummary summary = m_summary->summary();
  // The summary sink sees rank 0's steps, which hold 1 / world_size of each step's tokens.
  if (m_config->parallel.worldSize > 1) {
    summary.meanTokensPerSecond *= double(m_config->parallel.worldSize);
  }
  fillMfu(m_config, *m_trainer, m_summary->meanStepSeconds(), summary);
  summary.tracePath = m_writer->path();
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(summary.tracePath));
  MOEWB_ASSIGN_OR_RETURN(auto layers, reader->layerImbalance());
  for (const auto& layer : layers) summary.meanImbalancePerLayer.push_back(layer.meanMaxOverMean);
  return summary;
}

void TrainingRun::requestStop() { m_trainer->requestStop(); }

int64_t TrainingRun::committedSteps() const { return m_writer->committedSteps(); }

std::future<Status> TrainingRun::post(engine::TrainerCommand command) {
  return m_trainer->post(std::move(command));
}

const std::vector<std::string>& TrainingRun::liveKeys() {
  return engine::Trainer::liveKeys();
}

std::vector<std::string> TrainingRun::liveKeysOfThisRun() const {
  return engine::Trainer::liveKeysFor(m_config);
}

bool TrainingRun::paused() const { return m_trainer->paused(); }

int64_t TrainingRun::stepsDone() const { return m_trainer->stepsDone(); }

std::string TrainingRun::backendName() const { return m_trainer->backendName(); }

const std::string& TrainingRun::tracePath() const { return m_writer->path(); }

}  // namespace moewb::run
