// The single-rank StepRunners (model_runner.h): the CPU model's step and the CUDA model's step,
// and the choice between them (run.backend).
#include "train/model_runner.h"

#include <cmath>
#include <limits>
#include <new>
#include <optional>

#include "model/swap/swap_sim_tier.h"
#include "moewb/base/units.h"
#include "runtime/phase_recorder.h"
#include "runtime/tensor/tensor.h"
#include "runtime/thread_pool.h"
#include "train/checkpoint/alignment_dump.h"
#include "train/device_backend.h"
#include "train/memory_estimate.h"
#include "train/micro_batches.h"
#include "train/optimizer.h"

namespace moewb::engine {
namespace {

// An alignment dump holds one batch, one forward's losses and the gradients of its backward: a
// step cut into micro-batches has none of these to write.
Status checkDumpable(const RunConfig& config) {
  if (config.microBatches() == 1) return Status::ok();
  return failedPrecondition(
      "an alignment dump needs the whole step in one forward and backward, but "
      "data.micro_batch_size = " + std::to_string(config.data.microBatchSize) + " cuts it into " +
      std::to_string(config.microBatches()) + " micro-batches; set data.micro_batch_size = 0 " +
      "for the dumped steps");
}

// The CPU backend keeps every activation: swap.recompute_ops has no effect here (validation
// refuses it with run.backend = "cpu"; run.backend = "auto" on a machine without a GPU lands
// here with it, and runs as if it were "").
SwapSettings cpuSwapSettings(const SwapSection& section) {
  SwapSettings settings = swapSettingsFrom(section, 0);
  settings.recomputeOps.clear();
  return settings;
}

// The fp32 reference: forward, backward, clip + AdamW on the host model. With [swap] on, the
// simulated host tier (model/swap/swap_sim_tier.h) plans and reports swaps of the activations a
// device would keep; the CPU model's own tensors and numerics are untouched.
class CpuModelRunner final : public ModelRunner {
 public:
  explicit CpuModelRunner(const ValidConfig& config, std::string backendNote)
      : ModelRunner(config),
        m_backendNote(std::move(backendNote)),
        m_swap(cpuSwapSettings(m_config.swap),
               swapProfileFor(ModelDims::forwardFromConfig(m_config)), 0) {}
  std::string backendName() const override { return "cpu"; }
  std::string deviceDescription() const override {
    return "CPU, " + std::to_string(threadCount()) + " threads" +
           (m_backendNote.empty() ? "" : " (" + m_backendNote + ")");
  }
  Result<std::vector<RankStepOutcome>> step(const StepRequest& request) override;
  Status applyLiveConfig(const ValidConfig& config) override {
    const SwapSection before = m_config.swap;
    MOEWB_RETURN_IF_ERROR(ModelRunner::applyLiveConfig(config));
    // moe.top_k, fusion.permute_into_experts and data.micro_batch_size change the candidates:
    // a new controller (auto measures again); otherwise a changed [swap] plans again at the
    // next step.
    SwapProfile sizes = swapProfileFor(ModelDims::forwardFromConfig(m_config));
    if (!sizes.sameCandidatesAs(m_swap.profile())) {
      m_swap = SwapController(cpuSwapSettings(m_config.swap), std::move(sizes), 0);
    } else if (!(m_config.swap == before)) {
      m_swap.setSettings(cpuSwapSettings(m_config.swap));
    }
    return Status::ok();
  }

 private:
  // The simulated tier around one step: the plan before it, its copies and totals after it.
  void beginSwapStep(int64_t step);
  Status endSwapStep(int64_t step, const std::vector<PhaseEvent>& phases);
  // Forward and backward of each micro-batch into the gradients (zeroed by the caller); the
  // step's forward result. Errors: the step's divergence (a micro-batch's loss not finite: no
  // backward for it).
  Result<ForwardResult> forwardBackward(const std::vector<MicroBatch>& parts, int64_t step,
                                        PhaseRecorder* recorder);

  std::string m_backendNote;  // why run.backend = "auto" stayed on the CPU (empty otherwise)
  SwapController m_swap;      // always present: it records layer times even while swap is off
};

// The same step on the CUDA backend; the host model keeps the expert bias and the identity.
class CudaModelRunner final : public ModelRunner {
 public:
  explicit CudaModelRunner(const ValidConfig& config) : ModelRunner(config) {}
  Status attach(std::unique_ptr<DeviceBackend> device) {
    m_device = std::move(device);
    return Status::ok();
  }
  std::string backendName() const override { return m_device->backendName(); }
  std::string deviceDescription() const override { return m_device->deviceDescription(); }
  Status start(const std::vector<EventSink*>& sinks) override {
    MOEWB_RETURN_IF_ERROR(ModelRunner::start(sinks));
    m_device->setEventSink(m_sink, 0);
    return Status::ok();
  }
  // A changed [swap] section goes to the backend's swap controller (it plans again at the next
  // step); unrelated patches leave it alone.
  Status applyLiveConfig(const ValidConfig& config) override {
    const SwapSection before = m_config.swap;
    MOEWB_RETURN_IF_ERROR(ModelRunner::applyLiveConfig(config));
    m_device->applyLiveDims(ModelDims::forwardFromConfig(m_config));
    if (!(m_config.swap == before)) m_device->applySwapSettings(m_config.swap);
    return Status::ok();
  }
  // Out of device memory fails only that step: the backend released the step's memory and the
  // weights are untouched, so a later step (e.g. after a smaller live patch) may run.
  bool recoverable(const Status& failure) const override {
    return failure.code() == StatusCode::kResourceExhausted;
  }
  DeviceBackend* device() override { return m_device.get(); }
  Result<std::vector<RankStepOutcome>> step(const StepRequest& request) override;

 private:
  std::unique_ptr<DeviceBackend> m_device;
};

void CpuModelRunner::beginSwapStep(int64_t step) {
  int64_t fixedBytes = 0;  // the "device" bytes resident all step: weights, grads, AdamW moments
  for (const auto& p : m_model->parameters()) {
    fixedBytes += p.value.bytes() + p.grad.bytes() + p.adamM.bytes() + p.adamV.bytes();
  }
  std::optional<SwapPlanEvent> plan = m_swap.beginStep(step, fixedBytes);
  if (plan && m_sink) m_sink->onSwapPlan(*plan);
}

Status CpuModelRunner::endSwapStep(int64_t step, const std::vector<PhaseEvent>& phases) {
  Result<SimulatedSwapStep> sim = simulateSwapStep(m_swap, phases, step, 0);
  const bool on = m_swap.settings().mode != SwapMode::kOff;
  if (!sim.isOk()) return on ? sim.status() : Status::ok();
  if (on && m_swap.plan() && m_sink) {
    for (const SwapEvent& copy : sim.value().copies) m_sink->onSwap(copy);
    m_sink->onSwapStep(sim.value().totals);
  }
  const StepLayerTimes& times = sim.value().times;
  m_swap.recordStepTimes(times.forwardMs, times.backwardMs, times.turnMs);
  return Status::ok();
}

Result<ForwardResult> CpuModelRunner::forwardBackward(const std::vector<MicroBatch>& parts,
                                                      int64_t step, PhaseRecorder* recorder) {
  ForwardResult total;
  for (size_t m = 0; m < parts.size(); ++m) {
    const LossWeights& weights = parts[m].weights;
    m_model->setLossWeights(weights);
    ForwardResult part;
    {
      ScopedPhase phase(recorder, Phase::kForward, Pass::kForward, -1);
      part = m_model->forward(parts[m].batch, recorder);
    }
    if (!std::isfinite(part.loss) || !std::isfinite(part.auxLoss)) {
      m_model->setLossWeights({});
      return divergedLoss(step, part.loss, part.auxLoss, part.nonFiniteAuxTerm);
    }
    addMicroBatchResult(total, std::move(part), weights, m == 0);
    ScopedPhase phase(recorder, Phase::kBackward, Pass::kBackward, -1);
    m_model->backward(recorder);
  }
  m_model->setLossWeights({});
  return total;
}

Result<std::vector<RankStepOutcome>> CpuModelRunner::step(const StepRequest& request) {
  const int64_t stepIndex = request.step;
  if (request.dump) MOEWB_RETURN_IF_ERROR(checkDumpable(m_config));
  TensorMemory::resetPeak();
  RankStepOutcome out;
  out.event.step = stepIndex;
  out.event.startNs = steadyNowNs();
  // Swap events exist only for a sink: without one neither the plan nor the times are needed.
  if (m_sink) beginSwapStep(stepIndex);
  PhaseCaptureSink capture(m_sink);  // the step's phases, for the swap controller's times
  PhaseRecorder recorder(m_sink ? &capture : nullptr, stepIndex);
  const std::vector<MicroBatch> parts =
      splitMicroBatches(m_data->batch(stepIndex), m_config.microBatchSize());
  m_model->zeroGrads();
  m_model->setStep(stepIndex);
  MOEWB_ASSIGN_OR_RETURN(out.forward, forwardBackward(parts, stepIndex, &recorder));
  if (request.dump) {
    MOEWB_RETURN_IF_ERROR(writeAlignmentDump(request.dumpDir, stepIndex, m_model->parameters(),
                                             m_model->expertBiases(), parts.front().batch,
                                             {out.forward.loss, out.forward.auxLoss},
                                             toToml(m_config)));
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
  // The controller's layer times come from one forward and one backward a step (swap is
  // refused with several micro-batches).
  if (m_sink && parts.size() == 1) MOEWB_RETURN_IF_ERROR(endSwapStep(stepIndex, capture.phases));
  out.event.endNs = steadyNowNs();
  out.event.loss = out.forward.loss;
  out.event.auxLoss = out.forward.auxLoss;
  out.event.tokens = stepTokens(parts);
  out.event.peakBytes = TensorMemory::peakBytes();
  out.event.gradNorm = optim.gradNorm;
  out.event.lr = optim.lr;
  // Persistent state from the parameters; activations and workspace as the rest of the peak.
  MemoryAccount& memory = out.memory;
  for (const auto& p : m_model->parameters()) {
    memory.weightsBytes += p.value.bytes();
    memory.gradsBytes += p.grad.bytes();
    memory.optimizerBytes += p.adamM.bytes() + p.adamV.bytes();
  }
  memory.activationsBytes =
      std::max<int64_t>(0, out.event.peakBytes - memory.weightsBytes - memory.gradsBytes -
                               memory.optimizerBytes);
  memory.totalBytes = TensorMemory::currentBytes();
  std::vector<RankStepOutcome> outcomes;
  outcomes.push_back(std::move(out));
  return outcomes;
}

Result<std::vector<RankStepOutcome>> CudaModelRunner::step(const StepRequest& request) {
  const int64_t stepIndex = request.step;
  RankStepOutcome out;
  out.event.step = stepIndex;
  out.event.startNs = steadyNowNs();
  PhaseRecorder recorder(m_sink, stepIndex);
  if (request.dump) MOEWB_RETURN_IF_ERROR(checkDumpable(m_config));
  const std::vector<MicroBatch> parts =
      splitMicroBatches(m_data->batch(stepIndex), m_config.microBatchSize());
  if (request.dump) MOEWB_RETURN_IF_ERROR(m_device->pullState(*m_model));
  MOEWB_ASSIGN_OR_RETURN(DeviceStepResult result,
                         m_device->trainStep(parts, stepIndex, m_config.optim, &recorder));
  out.forward = std::move(result.forward);
  if (!std::isfinite(out.forward.loss) || !std::isfinite(out.forward.auxLoss)) {
    return divergedLoss(stepIndex, out.forward.loss, out.forward.auxLoss,
                        out.forward.nonFiniteAuxTerm);
  }
  if (!std::isfinite(result.optim.gradNorm)) {
    return divergedGradNorm(stepIndex, result.optim.gradNorm);
  }
  if (request.dump) {
    MOEWB_RETURN_IF_ERROR(m_device->pullGrads(*m_model));
    MOEWB_RETURN_IF_ERROR(writeAlignmentDump(request.dumpDir, stepIndex, m_model->parameters(),
                                             m_model->expertBiases(), parts.front().batch,
                                             {out.forward.loss, out.forward.auxLoss},
                                             toToml(m_config)));
  }
  m_model->afterOptimizerStep();  // the expert bias lives on the host model
  out.event.endNs = steadyNowNs();
  out.event.loss = out.forward.loss;
  out.event.auxLoss = out.forward.auxLoss;
  out.event.tokens = stepTokens(parts);
  out.event.peakBytes = result.peakBytes;
  out.event.gradNorm = result.optim.gradNorm;
  out.event.lr = result.optim.lr;
  out.memory.weightsBytes = result.weightsBytes;
  out.memory.gradsBytes = result.gradsBytes;
  out.memory.optimizerBytes = result.optimizerBytes;
  out.memory.activationsBytes = result.activationsPeakBytes;
  out.memory.totalBytes = result.peakBytes;
  std::vector<RankStepOutcome> outcomes;
  outcomes.push_back(std::move(out));
  return outcomes;
}

}  // namespace

ModelRunner::ModelRunner(const ValidConfig& valid) : m_config(valid) {
  const RunConfig& config = valid;
  m_pool = std::make_unique<ThreadPool>(config.run.threads);
  const int64_t allocateNs = steadyNowNs();
  m_model = std::make_unique<Model<float>>(ModelDims::forwardFromConfig(config), *m_pool);
  const int64_t initializeNs = steadyNowNs();
  m_model->initialize(config.run.seed);
  m_startup.push_back({"host model allocation", initializeNs - allocateNs});
  m_startup.push_back({"weight initialisation", steadyNowNs() - initializeNs});
  m_data = std::make_unique<SyntheticData>(config.data, config.model.vocabSize, config.model.seqLen,
                                           config.run.seed);
}

ModelRunner::~ModelRunner() = default;

Status ModelRunner::start(const std::vector<EventSink*>& sinks) {
  m_sink = sinks.empty() ? nullptr : sinks[0];
  return Status::ok();
}

Status ModelRunner::applyLiveConfig(const ValidConfig& config) {
  refreshDataOnPatch(m_data, m_config, config.get());
  m_config = config.get();
  m_model->applyLiveDims(ModelDims::forwardFromConfig(m_config));
  return Status::ok();
}

Result<std::unique_ptr<StepRunner>> createModelRunner(const ValidConfig& validConfig) {
  const RunConfig& config = validConfig;
  const int64_t routedRows = config.tokensPerStep() * config.moe.topK;
  if (routedRows > std::numeric_limits<int32_t>::max()) {
    return invalidArgument(
        "data.batch_size * model.seq_len * moe.top_k = " + std::to_string(routedRows) +
        " routed rows per step; the CPU engine accepts at most 2147483647");
  }
  // run.backend: "cuda" must get the GPU (or fail naming why); "auto" takes it when this build
  // has the CUDA backend, a device is visible and the model's settings run there. On the GPU
  // the host keeps only the parameter state; on the CPU also one step's activations.
  const std::string& wanted = config.run.backend;
  const bool cpu = runsOnCpuBackend(config);
  const ModelDims dims = ModelDims::forwardFromConfig(config);
  const double memoryBytes = physicalMemoryBytes();
  const auto fits = [&](bool onCpu) { return checkHostMemory(dims, onCpu, memoryBytes); };
  MOEWB_RETURN_IF_ERROR(fits(cpu));
  try {
    if (cpu) return std::unique_ptr<StepRunner>(new CpuModelRunner(validConfig, ""));
    std::unique_ptr<CudaModelRunner> gpu(new CudaModelRunner(validConfig));
    std::vector<StartupPhase> deviceStartup;
    Result<std::unique_ptr<DeviceBackend>> device =
        createCudaBackend(config, *gpu->hostModel(), 0, &deviceStartup);
    if (device.isOk()) {
      gpu->addStartupPhases(deviceStartup);
      MOEWB_RETURN_IF_ERROR(gpu->attach(std::move(device).value()));
      return std::unique_ptr<StepRunner>(std::move(gpu));
    }
    if (wanted == "auto" && device.status().code() == StatusCode::kUnimplemented) {
      gpu.reset();
      MOEWB_RETURN_IF_ERROR(fits(true));
      return std::unique_ptr<StepRunner>(new CpuModelRunner(
          validConfig, "run.backend = \"auto\" stayed on cpu: " + device.status().message()));
    }
    return device.status();
  } catch (const std::bad_alloc&) {
    return resourceExhausted("out of memory while allocating the model");
  } catch (const ThreadStartError& e) {
    return resourceExhausted(e.what());
  }
}

}  // namespace moewb::engine
