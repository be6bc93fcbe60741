// One GPU rank of a parallel run (see cuda_rank_stepper.h).
#include "train/parallel/cuda_rank_stepper.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "train/cuda/cuda_optimizer.h"
#include "moewb/base/units.h"
#include "model/parallel/collective_error.h"
#include "runtime/cuda/transfer.h"
#include "train/parallel/cpu_rank_stepper.h"

namespace moewb::engine::cuda {

class CudaRankStepper::Hooks final : public ModelHooks {
 public:
  explicit Hooks(CudaFsdpShards& shards) : m_shards(shards) {}
  void beforeForward(int32_t unit) override {
    if (m_gather) throwIfFailed(m_shards.gather(unit));
  }
  void afterBackward(int32_t unit) override {
    if (m_reduce) throwIfFailed(m_shards.reduce(unit));
  }
  // Micro-batching, as the CPU rank's hooks: gathers before the step's first micro-batch only
  // (the full masters and bf16 copies stay until the optimizer changes the shards),
  // reduce-scatters after its last only (the full gradients then hold the sum).
  void setMicroBatch(bool first, bool last) {
    m_gather = first;
    m_reduce = last;
  }

 private:
  CudaFsdpShards& m_shards;
  bool m_gather = true;
  bool m_reduce = true;
};

Result<std::unique_ptr<CudaRankStepper>> CudaRankStepper::create(const ValidConfig& valid,
                                                                 Communicator& world,
                                                                 EventSink* sink,
                                                                 int deviceOrdinal) {
  const RunConfig& config = valid;
  if (config.parallel.worldSize != world.worldSize()) {
    return invalidArgument("parallel.world_size = " + std::to_string(config.parallel.worldSize) +
                           " but the communicator has " + std::to_string(world.worldSize()) +
                           " ranks");
  }
  if (!world.supportsDevice()) {
    return failedPrecondition("GPU ranks need a communicator with device collectives (virtual "
                              "GPU ranks or NCCL)");
  }
  std::unique_ptr<CudaRankStepper> t(new CudaRankStepper(config, world, sink));
  MOEWB_ASSIGN_OR_RETURN(t->m_groups, splitParallelGroups(world, config.parallel));
  const int32_t r = world.rank(), w = config.parallel.worldSize;
  observeCollectives(world, "world", sink, r, &t->m_tag, &t->m_stepsDone);
  observeCollectives(*t->m_groups.ep, "ep", sink, r, &t->m_tag, &t->m_stepsDone);
  observeCollectives(*t->m_groups.expertDp, "expert_dp", sink, r, &t->m_tag, &t->m_stepsDone);
  observeCollectives(*t->m_groups.fsdp, "fsdp", sink, r, &t->m_tag, &t->m_stepsDone);
  observeCollectives(*t->m_groups.replicate, "replicate", sink, r, &t->m_tag, &t->m_stepsDone);
  ModelDims dims = ModelDims::forwardFromConfig(config);  // this rank's micro-batch
  dims.expertShards = config.parallel.ep;
  dims.expertShard = r % config.parallel.ep;
  MOEWB_RETURN_IF_ERROR(CudaModel::checkSupported(dims));
  t->m_host = std::make_unique<Model<float>>(dims, *t->m_pool);
  t->m_host->initialize(config.run.seed);
  MOEWB_ASSIGN_OR_RETURN(t->m_context, CudaContext::create(deviceOrdinal));
  MOEWB_ASSIGN_OR_RETURN(t->m_model, CudaModel::create(*t->m_context, *t->m_host));
  const FsdpGroups groups{t->m_groups.fsdp.get(), t->m_groups.replicate.get(),
                          t->m_groups.expertDp.get(), w};
  MOEWB_ASSIGN_OR_RETURN(t->m_shards, CudaFsdpShards::create(*t->m_context, *t->m_host,
                                                             t->m_model->parameters(), groups));
  t->m_hooks = std::make_unique<Hooks>(*t->m_shards);
  ModelParallel parallel;
  parallel.ep = config.parallel.ep > 1 ? t->m_groups.ep.get() : nullptr;
  parallel.world = w > 1 ? &world : nullptr;
  parallel.hooks = t->m_hooks.get();
  parallel.tag = &t->m_tag;
  parallel.a2aChunks = config.parallel.a2aChunks;
  t->m_model->setParallel(parallel);
  return t;
}

CudaRankStepper::CudaRankStepper(const RunConfig& config, Communicator& world, EventSink* sink)
    : m_config(config), m_world(world), m_sink(sink) {
  m_pool = std::make_unique<ThreadPool>(1);  // host work of a GPU rank: initialisation only
  m_data = std::make_unique<SyntheticData>(config.data, config.model.vocabSize,
                                           config.model.seqLen, config.run.seed);
}

CudaRankStepper::~CudaRankStepper() { m_memory.stop(); }

Result<bool> CudaRankStepper::agree(bool stop) { return agreeOnStop(m_world, stop); }

void CudaRankStepper::applyLiveConfig(const RunConfig& config) {
  refreshDataOnPatch(m_data, m_config, config);
  m_config = config;
  ModelDims dims = ModelDims::forwardFromConfig(config);
  m_host->applyLiveDims(dims);
  m_model->applyLiveDims(dims);
}

CudaParameter& CudaRankStepper::shardOf(size_t index) {
  // The shard sets keep model order within each kind (CudaFsdpShards::create).
  size_t dense = 0, expert = 0;
  for (size_t i = 0; i < index; ++i) (m_host->isExpertSharded(i) ? expert : dense) += 1;
  return m_host->isExpertSharded(index) ? m_shards->expertShards().all()[expert]
                                        : m_shards->denseShards().all()[dense];
}

Result<RankShards> CudaRankStepper::exportShards() {
  RankShards out;
  MOEWB_RETURN_IF_ERROR(m_context->synchronize());
  const size_t params = m_host->parameters().size();
  for (size_t i = 0; i < params; ++i) {
    const CudaParameter& d = shardOf(i);
    Parameter<float> shard;
    shard.name = d.name;
    shard.decay = d.decay;
    MOEWB_ASSIGN_OR_RETURN(shard.value, toHost(*m_context, d.master));
    MOEWB_ASSIGN_OR_RETURN(shard.grad, toHost(*m_context, d.grad));
    MOEWB_ASSIGN_OR_RETURN(shard.adamM, toHost(*m_context, d.adamM));
    MOEWB_ASSIGN_OR_RETURN(shard.adamV, toHost(*m_context, d.adamV));
    out.shards.push_back(std::move(shard));
  }
  out.expertBiases = m_host->expertBiases();
  out.stepsDone = m_stepsDone;
  return out;
}

Status CudaRankStepper::importShards(const RankShards& shards) {
  Status status = importShardsOnce(shards);
  if (!status.isOk()) m_failure = status;
  return status;
}

Status CudaRankStepper::importShardsOnce(const RankShards& in) {
  const std::string rank = "rank " + std::to_string(m_world.rank());
  const size_t params = m_host->parameters().size();
  if (in.shards.size() != params || in.expertBiases.size() != m_host->expertBiases().size()) {
    return internalError(rank + ": the imported state has " + std::to_string(in.shards.size()) +
                         " shards, this rank " + std::to_string(params));
  }
  for (size_t i = 0; i < params; ++i) {
    CudaParameter& d = shardOf(i);
    const Parameter<float>& from = in.shards[i];
    if (from.name != d.name || from.value.numel() != d.master.numel()) {
      return internalError(rank + ": the imported shard " + from.name + " does not fit " + d.name +
                           " [" + std::to_string(d.master.numel()) + "]");
    }
    MOEWB_RETURN_IF_ERROR(copyToDevice(*m_context, from.value, d.master));
    MOEWB_RETURN_IF_ERROR(copyToDevice(*m_context, from.grad, d.grad));
    MOEWB_RETURN_IF_ERROR(copyToDevice(*m_context, from.adamM, d.adamM));
    MOEWB_RETURN_IF_ERROR(copyToDevice(*m_context, from.adamV, d.adamV));
  }
  for (CudaParameters* set : {&m_shards->denseShards(), &m_shards->expertShards()}) {
    MOEWB_RETURN_IF_ERROR(set->refreshComputeCopies(*m_context));
  }
  m_host->expertBiases() = in.expertBiases;
  m_stepsDone = in.stepsDone;
  return m_context->synchronize();
}

Result<RankStepOutcome> CudaRankStepper::step() {
  if (!m_failure.isOk()) {
    return failedPrecondition("training already failed: " + m_failure.toString());
  }
  const int64_t stepIndex = m_stepsDone;
  try {
    Result<RankStepOutcome> result = trainStep();
    m_memory.emit(stepIndex);  // a failed step's events (a finished step emitted them already)
    if (!result.isOk()) m_failure = result.status();
    return result;
  } catch (const CollectiveError& e) {
    m_failure = e.status();
  }
  m_model->releaseActivations();
  m_memory.emit(stepIndex);
  return m_failure;
}

Result<RankStepOutcome> CudaRankStepper::trainStep() {
  const int64_t stepIndex = m_stepsDone;
  const int32_t w = m_world.worldSize();
  if (m_sink != nullptr && !m_memory.started()) {
    m_memory.start(*m_context, m_sink, m_world.rank(), stepIndex);
  }
  m_context->allocator().resetPeaks();
  RankStepOutcome out;
  StepEvent& event = out.event;
  event.step = stepIndex;
  event.rank = m_world.rank();
  event.startNs = steadyNowNs();
  PhaseRecorder recorder(m_sink, stepIndex);
  const std::vector<MicroBatch> parts = splitMicroBatches(
      CpuRankStepper::slice(m_data->batch(stepIndex), m_world.rank(), w),
      m_config.microBatchSize());
  MOEWB_RETURN_IF_ERROR(m_timeline.begin(m_context->stream(), &recorder));
  MOEWB_RETURN_IF_ERROR(m_model->parameters().zeroGrads(*m_context));
  m_model->setStep(stepIndex);
  Result<GlobalLosses> summed = forwardBackward(parts, stepIndex, out.forward);
  m_hooks->setMicroBatch(true, true);
  m_model->setLossWeights({});
  MOEWB_RETURN_IF_ERROR(summed.status());
  const GlobalLosses losses = *summed;
  OptimizerStepResult optim;
  {
    DevicePhase phase(&m_timeline, Phase::kOptimizer, Pass::kNone, -1);
    MOEWB_ASSIGN_OR_RETURN(optim, optimizerStep(stepIndex));
  }
  m_memory.emit(stepIndex);  // after the step's last launch, before waiting for the GPU
  MOEWB_RETURN_IF_ERROR(m_context->synchronize());
  MOEWB_RETURN_IF_ERROR(m_timeline.flush());
  // A gradient norm that is not finite (the update was skipped) fails the step in the Trainer's
  // tail, which checks every rank's outcome before it reports any.
  event.endNs = steadyNowNs();
  event.loss = losses.loss;
  event.auxLoss = losses.auxLoss;
  event.tokens = stepTokens(parts);
  event.peakBytes = m_context->allocator().stats().totalPeakInUseBytes;
  event.gradNorm = optim.gradNorm;
  event.lr = optim.lr;
  const AllocatorStats stats = m_context->allocator().stats();
  out.memory.weightsBytes = stats.inUseBytes[size_t(MemoryCategory::kWeights)];
  out.memory.gradsBytes = stats.inUseBytes[size_t(MemoryCategory::kGrads)];
  out.memory.optimizerBytes = stats.inUseBytes[size_t(MemoryCategory::kOptimizer)];
  ++m_stepsDone;
  return out;
}

// Per micro-batch: forward, the ranks' mean losses (collective: every rank sees a diverged
// micro-batch before any runs its backward), backward into the accumulated full gradients; the
// hooks gather on the first micro-batch and reduce-scatter on the last. The caller resets the
// hooks and the loss weights.
Result<GlobalLosses> CudaRankStepper::forwardBackward(const std::vector<MicroBatch>& parts,
                                                      int64_t stepIndex, ForwardResult& forward) {
  GlobalLosses losses;
  for (size_t m = 0; m < parts.size(); ++m) {
    const LossWeights& weights = parts[m].weights;
    m_hooks->setMicroBatch(m == 0, m + 1 == parts.size());
    m_model->setLossWeights(weights);
    ForwardResult part;
    {
      DevicePhase phase(&m_timeline, Phase::kForward, Pass::kForward, -1);
      MOEWB_ASSIGN_OR_RETURN(part, m_model->forward(parts[m].batch, &m_timeline));
    }
    const double weightedLoss = weights.lm * part.loss, auxLoss = part.auxLoss;
    addMicroBatchResult(forward, std::move(part), weights, m == 0);
    MOEWB_ASSIGN_OR_RETURN(const GlobalLosses mean,
                           meanLossesOverRanks(m_world, weightedLoss, auxLoss, stepIndex));
    losses.loss += mean.loss;
    losses.auxLoss += mean.auxLoss;
    DevicePhase phase(&m_timeline, Phase::kBackward, Pass::kBackward, -1);
    MOEWB_RETURN_IF_ERROR(m_model->backward(&m_timeline));
  }
  return losses;
}

// Global norm over the shards (dense shards once per replica set), clip + AdamW on the shards,
// then the aux-loss-free bias from the global counts.
Result<OptimizerStepResult> CudaRankStepper::optimizerStep(int64_t stepIndex) {
  m_tag.layer = -1;
  double squares = 0;
  for (CudaParameters* set : {&m_shards->denseShards(), &m_shards->expertShards()}) {
    if (set->all().empty()) continue;
    if (set == &m_shards->denseShards() && !m_shards->countsDenseNorm()) continue;
    MOEWB_ASSIGN_OR_RETURN(double norm, parameterGradNormCuda(*m_context, *set));
    squares += norm * norm;
  }
  OptimizerStepResult optim;
  optim.gradNorm = std::sqrt(sumOverRanks(m_world, squares));
  if (!std::isfinite(optim.gradNorm)) return optim;
  for (CudaParameters* set : {&m_shards->denseShards(), &m_shards->expertShards()}) {
    if (set->all().empty()) continue;
    MOEWB_ASSIGN_OR_RETURN(OptimizerStepResult applied,
                           optimizerStepCuda(*m_context, *set, m_config.optim, stepIndex,
                                             optim.gradNorm));
    optim.lr = applied.lr;
    optim.clipScale = applied.clipScale;
  }
  MOEWB_RETURN_IF_ERROR(sumExpertCountsOverRanks(m_world, m_host->expertBiases()));
  m_host->afterOptimizerStep();
  return optim;
}

}  // namespace moewb::engine::cuda

namespace moewb::engine {

Result<std::unique_ptr<RankStepper>> createCudaRankStepper(const ValidConfig& config,
                                                           Communicator& world, EventSink* sink,
                                                           int deviceOrdinal) {
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaRankStepper> trainer,
                         cuda::CudaRankStepper::create(config, world, sink, deviceOrdinal));
  return std::unique_ptr<RankStepper>(std::move(trainer));
}

}  // namespace moewb::engine
