// Trainer: one run of the CPU reference engine. Each step is
//   data -> forward (phases per layer) -> backward (phases in reverse) -> clip + AdamW,
// with every phase, the expert loads, a few counters and the step summary reported to the sink.
// Costs: one model step plus O(layers * experts) event data; see model.h for the model's cost.
#include "moewb/engine/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <limits>
#include <new>

#include "backend/device_backend.h"
#include "checkpoint/alignment_dump.h"
#include "checkpoint/checkpoint.h"
#include "data/synthetic_data.h"
#include "model/model.h"
#include "moewb/base/units.h"
#include "optim/optimizer.h"
#include "runtime/thread_pool.h"
#include "tensor/tensor.h"
#include "trace/phase_recorder.h"

namespace moewb::engine {
namespace {

// Rough bytes of the float parameters (value, grad, two moments) plus one step's activations.
double estimateTrainingBytes(const ModelDims& d) {
  const double n = double(d.tokens()), rows = n * double(d.topK);
  const double params =
      double(d.vocabSize) * double(d.dModel) * 2 +
      double(d.numLayers) * (4.0 * double(d.dModel) * double(d.dModel) +
                             3.0 * double(d.numExperts) * double(d.dFf) * double(d.dModel));
  const double perLayer =
      n * double(d.dModel) * 12 +
      double(d.batchSize) * double(d.numHeads) * double(d.seqLen) * double(d.seqLen) +
      rows * (2.0 * double(d.dModel) + 3.0 * double(d.dFf)) + 2.0 * n * double(d.numExperts);
  const double activations = double(d.numLayers) * perLayer + 2.0 * n * double(d.vocabSize);
  return 4.0 * (4.0 * params + activations);
}

double physicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageBytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && pageBytes > 0 ? double(pages) * double(pageBytes) : 0.0;
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::create(const RunConfig& config, EventSink* sink) {
  MOEWB_RETURN_IF_ERROR(validateConfig(config));
  const int64_t routedRows = config.tokensPerStep() * config.moe.topK;
  if (routedRows > std::numeric_limits<int32_t>::max()) {
    return invalidArgument(
        "data.batch_size * model.seq_len * moe.top_k = " + std::to_string(routedRows) +
        " routed rows per step; the CPU engine accepts at most 2147483647");
  }
  const double neededBytes = estimateTrainingBytes(ModelDims::fromConfig(config));
  const double memoryBytes = physicalMemoryBytes();
  if (memoryBytes > 0 && neededBytes > 0.5 * memoryBytes) {
    return resourceExhausted("the model and one step's activations need about " +
                             formatBytes(int64_t(neededBytes)) + ", more than half of the " +
                             formatBytes(int64_t(memoryBytes)) +
                             " of memory; reduce model.d_model, moe.num_experts, moe.d_ff, "
                             "model.vocab_size or data.batch_size * model.seq_len");
  }
  std::unique_ptr<Trainer> trainer;
  try {
    trainer.reset(new Trainer(config, sink));
  } catch (const std::bad_alloc&) {
    return resourceExhausted("out of memory while allocating the model");
  }
  MOEWB_RETURN_IF_ERROR(trainer->selectBackend());
  return trainer;
}

// run.backend: "cuda" must get the GPU (or fail naming why); "auto" takes it when this build has
// the CUDA backend, a device is visible and the model's settings run there, else stays on cpu.
Status Trainer::selectBackend() {
  const std::string& wanted = m_config.run.backend;
  if (wanted == "cpu") return Status::ok();
  if (wanted == "auto" && !cudaDeviceAvailable()) return Status::ok();
  Result<std::unique_ptr<DeviceBackend>> device = createCudaBackend(m_config, *m_model, 0);
  if (device.isOk()) {
    m_device = std::move(device).value();
    return Status::ok();
  }
  if (wanted == "auto" && device.status().code() == StatusCode::kUnimplemented) {
    m_backendNote = "run.backend = \"auto\" stayed on cpu: " + device.status().message();
    return Status::ok();
  }
  return device.status();
}

std::string Trainer::backendName() const { return m_device ? m_device->backendName() : "cpu"; }

std::string Trainer::deviceDescription() const {
  if (m_device) return m_device->deviceDescription();
  return "CPU, " + std::to_string(threadCount()) + " threads" +
         (m_backendNote.empty() ? "" : " (" + m_backendNote + ")");
}

Trainer::Trainer(const RunConfig& config, EventSink* sink) : m_config(config), m_sink(sink) {
  m_pool = std::make_unique<ThreadPool>(config.run.threads);
  m_model = std::make_unique<Model<float>>(ModelDims::fromConfig(config), *m_pool);
  m_model->initialize(config.run.seed);
  m_data = std::make_unique<SyntheticData>(config.data, config.model.vocabSize, config.model.seqLen,
                                           config.run.seed);
}

Trainer::~Trainer() = default;

int64_t Trainer::parameterCount() const {
  return m_model->parameterCount();
}
std::vector<Trainer::ParameterInfo> Trainer::parameterInfos() const {
  std::vector<ParameterInfo> infos;
  for (const auto& p : m_model->parameters()) {
    infos.push_back({p.name, p.value.shape()});
  }
  return infos;
}

int32_t Trainer::threadCount() const {
  return m_pool->size();
}

namespace {
std::vector<CheckpointState> checkpointState(Model<float>& model) {
  std::vector<CheckpointState> state;
  auto& biases = model.expertBiases();
  for (size_t l = 0; l < biases.size(); ++l) {
    state.push_back({"layers." + std::to_string(l) + ".moe.expert_bias", &biases[l].bias});
  }
  return state;
}
}  // namespace

Status Trainer::saveCheckpoint(const std::string& path) const {
  if (m_device) MOEWB_RETURN_IF_ERROR(m_device->pullState(*m_model));
  return engine::saveCheckpoint(path, m_model->parameters(), checkpointState(*m_model), m_stepsDone,
                                toToml(m_config));
}

Status Trainer::loadCheckpoint(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(int64_t nextStep, engine::loadCheckpoint(path, m_model->parameters(),
                                                                  checkpointState(*m_model)));
  m_stepsDone = nextStep;
  if (m_device) return m_device->pushState(*m_model);
  return Status::ok();
}

Status Trainer::loadWeights(const std::string& path) {
  std::vector<Parameter<float>*> base;
  auto& params = m_model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!m_model->isLoraAdapter(i)) base.push_back(&params[i]);
  }
  if (m_device) MOEWB_RETURN_IF_ERROR(m_device->pullState(*m_model));
  MOEWB_RETURN_IF_ERROR(engine::loadWeights(path, base, checkpointState(*m_model)));
  if (m_device) return m_device->pushState(*m_model);
  return Status::ok();
}

Status Trainer::exportMergedWeights(const std::string& path) const {
  if (m_device) MOEWB_RETURN_IF_ERROR(m_device->pullState(*m_model));
  const auto& params = m_model->parameters();
  std::vector<Tensor<float>> merged;  // [base params] kept alive until written
  std::vector<NamedWeight> weights;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!m_model->isLoraAdapter(i)) merged.push_back(m_model->mergedValue(i));
  }
  size_t next = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!m_model->isLoraAdapter(i)) weights.push_back({params[i].name, &merged[next++]});
  }
  RunConfig plain = m_config;
  plain.lora.enabled = false;
  return engine::saveWeights(path, weights, checkpointState(*m_model), toToml(plain));
}

void Trainer::setDumpPolicy(int64_t firstStep, int64_t endStep, const std::string& dir) {
  m_dumpFirstStep = firstStep;
  m_dumpEndStep = endStep;
  m_dumpDir = dir;
}

Result<Trainer::ReplayedLoss> Trainer::replayAlignmentDump(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(AlignmentDump dump, readAlignmentDump(path, m_model->parameters()));
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
  ForwardResult forward = m_model->forward(dump.batch, nullptr);
  return ReplayedLoss{forward.loss, forward.auxLoss, dump.loss.ce, dump.loss.aux};
}

void Trainer::setCheckpointPolicy(int64_t everySteps, const std::string& dir) {
  m_checkpointEverySteps = everySteps;
  m_checkpointDir = dir;
}

Status Trainer::maybeSaveCheckpoint() {
  if (m_checkpointEverySteps <= 0 || m_stepsDone % m_checkpointEverySteps != 0) return Status::ok();
  std::error_code error;
  std::filesystem::create_directories(m_checkpointDir, error);
  if (error) {
    return internalError("cannot create checkpoint directory '" + m_checkpointDir +
                         "': " + error.message());
  }
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.safetensors", static_cast<long long>(m_stepsDone));
  return saveCheckpoint((std::filesystem::path(m_checkpointDir) / name).string());
}

void Trainer::startRunOnce() {
  if (m_runStarted) return;
  m_runStarted = true;
  if (m_sink == nullptr) return;
  RunStartEvent event;
  event.name = m_config.run.name;
  event.configToml = toToml(m_config);
  event.backend = backendName();
  event.worldSize = 1;
  event.numLayers = m_config.model.numLayers;
  event.numExperts = m_config.moe.numExperts;
  event.startNs = steadyNowNs();
  m_sink->onRunStart(event);
  if (m_device) m_device->setEventSink(m_sink, 0);
}

void Trainer::endRun(RunOutcome outcome, const std::string& message) {
  rejectPendingCommands();
  if (m_sink == nullptr) return;
  RunEndEvent event;
  event.outcome = outcome;
  event.message = message;
  event.endNs = steadyNowNs();
  event.stepsDone = m_stepsDone;
  m_sink->onRunEnd(event);
}

Status Trainer::run(int64_t steps) {
  if (steps < 0) return invalidArgument("steps = " + std::to_string(steps) + "; accepted: >= 0");
  startRunOnce();
  for (int64_t i = 0; i < steps; ++i) {
    if (!handleCommands() || m_stopRequested.exchange(false)) {
      m_stopRequested.store(false);
      endRun(RunOutcome::kStopped, "");
      return Status::ok();
    }
    Result<StepEvent> result = step();
    Status status = result.isOk() ? maybeSaveCheckpoint() : result.status();
    if (!status.isOk()) {
      endRun(RunOutcome::kFailed, status.toString());
      return status;
    }
  }
  m_stopRequested.store(false);  // a request during the last step has nothing left to stop
  endRun(RunOutcome::kCompleted, "");
  return Status::ok();
}

Result<StepEvent> Trainer::step() {
  if (!m_failure.isOk()) {
    return failedPrecondition("training already failed: " + m_failure.toString());
  }
  startRunOnce();
  try {
    Result<StepEvent> result = trainStep();
    // Out of device memory fails only this step: the CUDA backend released the step's memory and
    // the weights are untouched, so a later step (e.g. after a smaller live patch) may run.
    const bool deviceOutOfMemory =
        m_device && !result.isOk() && result.status().code() == StatusCode::kResourceExhausted;
    if (!result.isOk() && !deviceOutOfMemory) m_failure = result.status();
    return result;
  } catch (const std::bad_alloc&) {
    m_failure = resourceExhausted("out of memory in step " + std::to_string(m_stepsDone));
    return m_failure;
  }
}

Result<StepEvent> Trainer::trainStep() {
  const int64_t stepIndex = m_stepsDone;
  TensorMemory::resetPeak();
  StepEvent event;
  event.step = stepIndex;
  event.startNs = steadyNowNs();
  PhaseRecorder recorder(m_sink, stepIndex);
  const Batch batch = m_data->batch(stepIndex);
  if (m_device) return deviceTrainStep(stepIndex, event, recorder, batch);
  m_model->zeroGrads();
  m_model->setStep(stepIndex);
  ForwardResult forward;
  {
    ScopedPhase phase(&recorder, Phase::kForward, Pass::kForward, -1);
    forward = m_model->forward(batch, &recorder);
  }
  if (!std::isfinite(forward.loss) || !std::isfinite(forward.auxLoss)) {
    return internalError("training diverged at step " + std::to_string(stepIndex) +
                         ": loss = " + std::to_string(forward.loss) +
                         ", aux loss = " + std::to_string(forward.auxLoss));
  }
  {
    ScopedPhase phase(&recorder, Phase::kBackward, Pass::kBackward, -1);
    m_model->backward(&recorder);
  }
  if (stepIndex >= m_dumpFirstStep && stepIndex < m_dumpEndStep) {
    MOEWB_RETURN_IF_ERROR(writeAlignmentDump(m_dumpDir, stepIndex, m_model->parameters(), batch,
                                             {forward.loss, forward.auxLoss}, toToml(m_config)));
  }
  OptimizerStepResult optim;
  {
    ScopedPhase phase(&recorder, Phase::kOptimizer, Pass::kNone, -1);
    optim.gradNorm = globalGradNorm(*m_pool, m_model->parameters());
    if (std::isfinite(optim.gradNorm)) {
      optim =
          optimizerStep(*m_pool, m_model->parameters(), m_config.optim, stepIndex, optim.gradNorm);
      m_model->afterOptimizerStep();
    }
  }
  if (!std::isfinite(optim.gradNorm)) {
    return internalError("training diverged at step " + std::to_string(stepIndex) +
                         ": gradient norm = " + std::to_string(optim.gradNorm));
  }
  event.endNs = steadyNowNs();
  event.loss = forward.loss;
  event.auxLoss = forward.auxLoss;
  event.tokens = batch.tokens();
  const double seconds = double(std::max<int64_t>(1, event.endNs - event.startNs)) / kNsPerSecond;
  event.tokensPerSecond = double(event.tokens) / seconds;
  event.peakBytes = TensorMemory::peakBytes();
  event.gradNorm = optim.gradNorm;
  event.lr = optim.lr;
  emitStepEvents(event, forward, hostMemoryAccount(event.peakBytes));
  ++m_stepsDone;
  return event;
}

// The CPU memory account: persistent state from the parameters, and the step's activations and
// workspace as the rest of the step's peak.
Trainer::MemoryAccount Trainer::hostMemoryAccount(int64_t peakBytes) const {
  MemoryAccount account;
  for (const auto& p : m_model->parameters()) {
    account.weightsBytes += p.value.bytes();
    account.gradsBytes += p.grad.bytes();
    account.optimizerBytes += p.adamM.bytes() + p.adamV.bytes();
  }
  account.activationsBytes = std::max<int64_t>(
      0, peakBytes - account.weightsBytes - account.gradsBytes - account.optimizerBytes);
  account.totalBytes = TensorMemory::currentBytes();
  return account;
}

void Trainer::emitStepEvents(const StepEvent& event, const ForwardResult& forward,
                             const MemoryAccount& memory) {
  if (m_sink == nullptr) return;
  for (size_t layer = 0; layer < forward.expertCounts.size(); ++layer) {
    ExpertLoadEvent load;
    load.step = event.step;
    load.layer = int32_t(layer);
    load.tokensPerExpert = forward.expertCounts[layer];
    load.droppedPerExpert = forward.expertDropped[layer];
    load.droppedPerExpert.resize(load.tokensPerExpert.size(), 0);
    load.biasPerExpert = forward.expertBias[layer];
    m_sink->onExpertLoad(load);
  }
  m_sink->onCounter({"lr", event.endNs, event.lr});
  m_sink->onCounter({"grad_norm", event.endNs, event.gradNorm});
  m_sink->onCounter({"memory.tensor_bytes", event.endNs, double(memory.totalBytes)});
  m_sink->onCounter({"memory.weights_bytes", event.endNs, double(memory.weightsBytes)});
  m_sink->onCounter({"memory.grads_bytes", event.endNs, double(memory.gradsBytes)});
  m_sink->onCounter({"memory.optimizer_bytes", event.endNs, double(memory.optimizerBytes)});
  m_sink->onCounter({"memory.activations_bytes", event.endNs, double(memory.activationsBytes)});
  m_sink->onStep(event);
}

}  // namespace moewb::engine
