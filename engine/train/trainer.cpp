// Trainer (moewb/engine/trainer.h): the loop, the run's start and end events, the step tail and
// the single-rank state (checkpoints, weights, exports, dumps). Each step is computed by the
// StepRunner of the run's topology (step_runner.h); the live command queue is trainer_control.cpp.
// Costs: one runner step plus O(ranks * layers * experts) event data per step.
#include "moewb/engine/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "moewb/base/units.h"
#include "train/checkpoint/alignment_dump.h"
#include "train/checkpoint/checkpoint.h"
#include "train/device_backend.h"
#include "train/model_runner.h"
#include "train/parallel/launcher_rank_runner.h"
#include "train/parallel/rank_common.h"
#include "train/parallel/rank_group_runner.h"
#include "train/parallel/shard_state.h"
#include "train/step_runner.h"

namespace moewb::engine {
namespace {

// Removes the partial checkpoints (step-*.safetensors.tmp) that a killed run left in `dir`: a
// finished checkpoint is renamed from its .tmp, so a .tmp is never a checkpoint to keep.
void removeStaleCheckpointFiles(const std::string& dir) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error), end;
  for (; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".safetensors.tmp")) {
      std::error_code ignored;
      std::filesystem::remove(it->path(), ignored);
    }
  }
}

std::vector<CheckpointState> checkpointState(std::vector<ExpertBias>& biases) {
  std::vector<CheckpointState> state;
  for (size_t l = 0; l < biases.size(); ++l) {
    state.push_back({"layers." + std::to_string(l) + ".moe.expert_bias", &biases[l].bias});
  }
  return state;
}

std::vector<CheckpointState> checkpointState(Model<float>& model) {
  return checkpointState(model.expertBiases());
}

Status launcherRankAccepted(const RunConfig& config, const LauncherRank& rank) {
  if (config.parallel.worldSize != rank.worldSize) {
    return invalidArgument("parallel.world_size = " + std::to_string(config.parallel.worldSize) +
                           " but the launcher started " + std::to_string(rank.worldSize) +
                           " processes (WORLD_SIZE); accepted: parallel.world_size = " +
                           std::to_string(rank.worldSize));
  }
  if (!cudaDeviceAvailable()) {
    return failedPrecondition("rank " + std::to_string(rank.rank) + ": a multi-process run "
                              "trains on GPUs over NCCL, and this process sees no CUDA device "
                              "(or this build of moewb has no CUDA backend)");
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::create(const RunConfig& config, EventSink* sink) {
  return create(config, TrainerOptions{.rankSinks = {sink}});
}

Result<std::unique_ptr<Trainer>> Trainer::create(const RunConfig& config, TrainerOptions options) {
  MOEWB_ASSIGN_OR_RETURN(ValidConfig valid, ValidConfig::validate(config));
  return create(valid, std::move(options));
}

Result<std::unique_ptr<Trainer>> Trainer::create(const ValidConfig& config, TrainerOptions options) {
  std::unique_ptr<StepRunner> runner;
  if (options.launcher) {
    MOEWB_RETURN_IF_ERROR(launcherRankAccepted(config, *options.launcher));
    runner = std::make_unique<LauncherRankRunner>(config, *options.launcher,
                                                  std::move(options.onStuckRank));
  } else if (config->parallel.worldSize > 1) {
    runner = std::make_unique<RankGroupRunner>(config, std::move(options.onStuckRank),
                                               std::move(options.beforeRankStep));
  } else {
    MOEWB_ASSIGN_OR_RETURN(runner, createModelRunner(config));
  }
  options.rankSinks.resize(size_t(runner->reportedRanks()), nullptr);
  std::unique_ptr<Trainer> trainer(
      new Trainer(config, std::move(runner), std::move(options.rankSinks)));
  if (options.launcher) {
    trainer->m_liveRefusal =
        "pause, single step and live patches are not accepted on a multi-process run (one rank "
        "per process): one process pausing would stall the others' collectives; stop the run "
        "(Ctrl-C, SIGTERM) and start it with the new config";
  }
  return trainer;
}

Trainer::Trainer(const ValidConfig& config, std::unique_ptr<StepRunner> runner,
                 std::vector<EventSink*> rankSinks)
    : m_config(config), m_runner(std::move(runner)), m_sinks(std::move(rankSinks)) {}

Trainer::~Trainer() {
  if (m_runner) (void)m_runner->finish();
}

std::string Trainer::backendName() const { return m_runner->backendName(); }
std::string Trainer::deviceDescription() const { return m_runner->deviceDescription(); }
int32_t Trainer::threadCount() const { return m_runner->threadCount(); }
int32_t Trainer::localRanks() const { return m_runner->reportedRanks(); }

int64_t Trainer::parameterCount() const {
  Model<float>* model = m_runner->hostModel();
  return model ? model->parameterCount() : 0;
}

std::vector<Trainer::ParameterInfo> Trainer::parameterInfos() const {
  std::vector<ParameterInfo> infos;
  if (Model<float>* model = m_runner->hostModel()) {
    for (const auto& p : model->parameters()) infos.push_back({p.name, p.value.shape()});
  }
  return infos;
}

Result<Model<float>*> Trainer::singleRankModel(const std::string& what) const {
  Model<float>* model = m_runner->hostModel();
  if (model == nullptr) {
    return failedPrecondition(what + " needs a one-rank run; this run has parallel.world_size = " +
                              std::to_string(m_config.parallel.worldSize));
  }
  return model;
}

Status Trainer::saveCheckpoint(const std::string& path) const {
  if (m_runner->hostModel() == nullptr) return saveGroupCheckpoint(path);
  MOEWB_ASSIGN_OR_RETURN(Model<float>* model, singleRankModel("a checkpoint"));
  if (DeviceBackend* device = m_runner->device()) MOEWB_RETURN_IF_ERROR(device->pullState(*model));
  return engine::saveCheckpoint(path, model->parameters(), checkpointState(*model),
                                m_stepsDone.load(), toToml(m_config));
}

Status Trainer::loadCheckpoint(const std::string& path) {
  if (m_runner->hostModel() == nullptr) return loadGroupCheckpoint(path);
  MOEWB_ASSIGN_OR_RETURN(Model<float>* model, singleRankModel("resuming a checkpoint"));
  MOEWB_ASSIGN_OR_RETURN(int64_t nextStep, engine::loadCheckpoint(path, model->parameters(),
                                                                  checkpointState(*model)));
  m_stepsDone.store(nextStep);
  if (DeviceBackend* device = m_runner->device()) return device->pushState(*model);
  return Status::ok();
}

// A rank group's checkpoint is the one-rank checkpoint of its gathered state: the same file a
// one-rank run writes, so it resumes in any layout (or on one rank).
Status Trainer::saveGroupCheckpoint(const std::string& path) const {
  MOEWB_ASSIGN_OR_RETURN(TrainingState state, m_runner->gatherState());
  return engine::saveCheckpoint(path, state.params, checkpointState(state.expertBiases),
                                m_stepsDone.load(), toToml(m_config));
}

Status Trainer::loadGroupCheckpoint(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(TrainingState state, emptyTrainingState(m_config));
  MOEWB_ASSIGN_OR_RETURN(const int64_t nextStep,
                         engine::loadCheckpoint(path, state.params,
                                                checkpointState(state.expertBiases)));
  state.stepsDone = nextStep;
  MOEWB_RETURN_IF_ERROR(m_runner->scatterState(state));
  m_stepsDone.store(nextStep);
  return Status::ok();
}

Status Trainer::loadWeights(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(Model<float>* model, singleRankModel("loading weights"));
  std::vector<Parameter<float>*> base;
  auto& params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!model->isLoraAdapter(i)) base.push_back(&params[i]);
  }
  DeviceBackend* device = m_runner->device();
  if (device) MOEWB_RETURN_IF_ERROR(device->pullState(*model));
  MOEWB_RETURN_IF_ERROR(engine::loadWeights(path, base, checkpointState(*model)));
  if (device) return device->pushState(*model);
  return Status::ok();
}

Status Trainer::exportMergedWeights(const std::string& path) const {
  MOEWB_ASSIGN_OR_RETURN(Model<float>* model, singleRankModel("exporting merged weights"));
  if (DeviceBackend* device = m_runner->device()) MOEWB_RETURN_IF_ERROR(device->pullState(*model));
  const auto& params = model->parameters();
  std::vector<Tensor<float>> merged;  // [base params] kept alive until written
  std::vector<NamedWeight> weights;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!model->isLoraAdapter(i)) merged.push_back(model->mergedValue(i));
  }
  size_t next = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!model->isLoraAdapter(i)) weights.push_back({params[i].name, &merged[next++]});
  }
  RunConfig plain = m_config;
  plain.lora.enabled = false;
  return engine::saveWeights(path, weights, checkpointState(*model), toToml(plain));
}

void Trainer::setDumpPolicy(int64_t firstStep, int64_t endStep, const std::string& dir) {
  m_dumpFirstStep = firstStep;
  m_dumpEndStep = endStep;
  m_dumpDir = dir;
}

Result<Trainer::ReplayedLoss> Trainer::replayAlignmentDump(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(Model<float>* model, singleRankModel("replaying an alignment dump"));
  if (m_config.microBatches() > 1) {
    return failedPrecondition(
        "replaying an alignment dump runs the dump's whole batch in one forward, but "
        "data.micro_batch_size = " + std::to_string(m_config.data.microBatchSize) +
        " builds the model for " + std::to_string(m_config.microBatchSize()) +
        " sequences; replay with data.micro_batch_size = 0");
  }
  MOEWB_ASSIGN_OR_RETURN(AlignmentDump dump, readAlignmentDump(path, model->parameters(),
                                                                 model->expertBiases()));
  if (dump.batch.batchSize != m_config.data.batchSize || dump.batch.seqLen != m_config.model.seqLen) {
    return invalidArgument(path + ": the dump's batch is [" + std::to_string(dump.batch.batchSize) +
                           ", " + std::to_string(dump.batch.seqLen) +
                           "] but the config has data.batch_size = " +
                           std::to_string(m_config.data.batchSize) +
                           " and model.seq_len = " + std::to_string(m_config.model.seqLen));
  }
  if (dump.batch.imagePatches != m_config.data.imagePatches()) {
    return invalidArgument(path + ": the dump's batch has " +
                           std::to_string(dump.batch.imagePatches) +
                           " image patches per sequence but the config has " +
                           std::to_string(m_config.data.imagePatches()));
  }
  ForwardResult forward = model->forward(dump.batch, nullptr);
  return ReplayedLoss{forward.loss, forward.auxLoss, dump.loss.ce, dump.loss.aux};
}

void Trainer::setCheckpointPolicy(int64_t everySteps, const std::string& dir) {
  m_checkpointEverySteps = everySteps;
  m_checkpointDir = dir;
}

Status Trainer::maybeSaveCheckpoint() {
  const int64_t done = m_stepsDone.load();
  if (m_checkpointEverySteps <= 0 || done % m_checkpointEverySteps != 0) return Status::ok();
  std::error_code error;
  std::filesystem::create_directories(m_checkpointDir, error);
  if (error) {
    return internalError("cannot create checkpoint directory '" + m_checkpointDir +
                         "': " + error.message());
  }
  removeStaleCheckpointFiles(m_checkpointDir);
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.safetensors", static_cast<long long>(done));
  return saveCheckpoint((std::filesystem::path(m_checkpointDir) / name).string());
}

Status Trainer::startRunOnce() {
  if (m_runStarted) return Status::ok();
  m_runStarted = true;
  RunStartEvent event;
  event.name = m_config.run.name;
  event.configToml = toToml(m_config);
  event.backend = backendName();
  event.worldSize = m_config.parallel.worldSize;
  event.numLayers = m_config.model.numLayers;
  event.numExperts = m_config.moe.numExperts;
  event.startNs = steadyNowNs();
  event.startup = m_runner->startupPhases();
  event.device = m_runner->deviceDescription();
  for (EventSink* sink : m_sinks) {
    if (sink != nullptr) sink->onRunStart(event);
  }
  return m_runner->start(m_sinks);
}

Status Trainer::endRun(RunOutcome outcome, Status status) {
  rejectPendingCommands();
  // A one-rank runner (the one with a host model) can go on after run() returns (run() may be
  // called again); a rank group or a launcher rank ends with the run.
  if (m_runner->hostModel() == nullptr) {
    Status finished = m_runner->finish();
    if (status.isOk() && !finished.isOk()) {
      status = finished;
      outcome = RunOutcome::kFailed;
    }
    m_runEnded = true;
  }
  RunEndEvent event;
  event.outcome = outcome;
  event.message = status.isOk() ? "" : status.toString();
  event.endNs = steadyNowNs();
  event.stepsDone = m_stepsDone.load();
  for (EventSink* sink : m_sinks) {
    if (sink != nullptr) sink->onRunEnd(event);
  }
  return status;
}

Status Trainer::run(int64_t steps) {
  if (steps < 0) return invalidArgument("steps = " + std::to_string(steps) + "; accepted: >= 0");
  if (m_runEnded) return failedPrecondition("this run's ranks have finished; start a new run");
  Status started = startRunOnce();
  if (!started.isOk()) {
    m_failure = started;
    return endRun(RunOutcome::kFailed, started);
  }
  for (int64_t i = 0; i < steps; ++i) {
    const bool stop = !handleCommands() || m_stopRequested.exchange(false);
    Result<bool> agreed = m_runner->agreeOnStop(stop);
    if (!agreed.isOk()) {
      m_failure = agreed.status();
      return endRun(RunOutcome::kFailed, agreed.status());
    }
    if (*agreed) {
      m_stopRequested.store(false);
      return endRun(RunOutcome::kStopped, Status::ok());
    }
    Result<StepEvent> result = step();
    Status status = result.isOk() ? maybeSaveCheckpoint() : result.status();
    if (!status.isOk()) return endRun(RunOutcome::kFailed, status);
  }
  m_stopRequested.store(false);  // a request during the last step has nothing left to stop
  return endRun(RunOutcome::kCompleted, Status::ok());
}

Result<StepEvent> Trainer::step() {
  if (!m_failure.isOk()) {
    return failedPrecondition("training already failed: " + m_failure.toString());
  }
  Status started = startRunOnce();
  if (!started.isOk()) {
    m_failure = started;
    return started;
  }
  try {
    const int64_t stepIndex = m_stepsDone.load();
    StepRequest request;
    request.step = stepIndex;
    request.dump = stepIndex >= m_dumpFirstStep && stepIndex < m_dumpEndStep;
    request.dumpDir = m_dumpDir;
    Result<std::vector<RankStepOutcome>> outcomes = m_runner->step(request);
    Result<StepEvent> result =
        outcomes.isOk() ? finishStep(*outcomes) : Result<StepEvent>(outcomes.status());
    if (!result.isOk() && !m_runner->recoverable(result.status())) m_failure = result.status();
    return result;
  } catch (const std::bad_alloc&) {
    m_failure = resourceExhausted("out of memory in step " + std::to_string(m_stepsDone.load()));
    return m_failure;
  }
}

Result<StepEvent> Trainer::finishStep(std::vector<RankStepOutcome>& outcomes) {
  for (const RankStepOutcome& outcome : outcomes) {
    const StepEvent& e = outcome.event;
    if (!std::isfinite(e.gradNorm)) {
      return divergedGradNorm(e.step, e.gradNorm);
    }
  }
  for (size_t i = 0; i < outcomes.size(); ++i) {
    StepEvent& event = outcomes[i].event;
    const double seconds =
        double(std::max<int64_t>(1, event.endNs - event.startNs)) / kNsPerSecond;
    event.tokensPerSecond = double(event.tokens) / seconds;
    EventSink* sink = i < m_sinks.size() ? m_sinks[i] : nullptr;
    if (sink == nullptr) continue;
    const MemoryAccount& memory = outcomes[i].memory;
    emitExpertLoads(*sink, event.step, event.rank, outcomes[i].forward);
    sink->onCounter({"lr", event.endNs, event.lr});
    sink->onCounter({"grad_norm", event.endNs, event.gradNorm});
    if (memory.totalBytes) {
      sink->onCounter({"memory.tensor_bytes", event.endNs, double(*memory.totalBytes)});
    }
    sink->onCounter({"memory.weights_bytes", event.endNs, double(memory.weightsBytes)});
    sink->onCounter({"memory.grads_bytes", event.endNs, double(memory.gradsBytes)});
    sink->onCounter({"memory.optimizer_bytes", event.endNs, double(memory.optimizerBytes)});
    if (memory.activationsBytes) {
      sink->onCounter({"memory.activations_bytes", event.endNs, double(*memory.activationsBytes)});
    }
    sink->onStep(event);
  }
  m_stepsDone.fetch_add(1);
  return outcomes.front().event;
}

}  // namespace moewb::engine
