// One rank of a parallel run: group split, sharded model, the step with its collectives and the
// trace events (see cpu_rank_stepper.h).
#include "train/parallel/cpu_rank_stepper.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <thread>

#include "moewb/base/units.h"
#include "train/optimizer.h"
#include "model/parallel/collective_error.h"
#include "runtime/phase_recorder.h"

namespace moewb::engine {

class CpuRankStepper::Hooks final : public ModelHooks {
 public:
  explicit Hooks(FsdpShards& shards) : m_shards(shards) {}
  void beforeForward(int32_t unit) override {
    if (m_gather) m_shards.gather(unit);
  }
  void afterBackward(int32_t unit) override {
    if (m_reduce) m_shards.reduce(unit);
  }
  // Micro-batching: the next forward gathers only when it is the step's first (the full values
  // stay until the optimizer changes the shards) and the next backward reduce-scatters only when
  // it is the step's last (the full gradients then hold the sum over the micro-batches).
  void setMicroBatch(bool first, bool last) {
    m_gather = first;
    m_reduce = last;
  }

 private:
  FsdpShards& m_shards;
  bool m_gather = true;
  bool m_reduce = true;
};

Result<std::unique_ptr<CpuRankStepper>> CpuRankStepper::create(const ValidConfig& valid,
                                                               Communicator& world,
                                                               EventSink* sink) {
  const RunConfig& config = valid;
  if (config.parallel.worldSize != world.worldSize()) {
    return invalidArgument("parallel.world_size = " + std::to_string(config.parallel.worldSize) +
                           " but the communicator has " + std::to_string(world.worldSize()) +
                           " ranks");
  }
  std::unique_ptr<CpuRankStepper> trainer;
  try {
    trainer.reset(new CpuRankStepper(config, world, sink));
  } catch (const ThreadStartError& e) {
    return resourceExhausted("rank " + std::to_string(world.rank()) + ": " + e.what());
  }
  MOEWB_RETURN_IF_ERROR(trainer->split());
  const int32_t w = config.parallel.worldSize;
  ModelDims dims = ModelDims::forwardFromConfig(config);  // this rank's micro-batch
  dims.expertShards = config.parallel.ep;
  dims.expertShard = world.rank() % config.parallel.ep;
  try {
    trainer->m_model = std::make_unique<Model<float>>(dims, *trainer->m_pool);
    trainer->m_model->initialize(config.run.seed);
    FsdpGroups groups{trainer->m_groups.fsdp.get(), trainer->m_groups.replicate.get(),
                      trainer->m_groups.expertDp.get(),
                      w};
    trainer->m_shards = std::make_unique<FsdpShards>(*trainer->m_model, groups);
  } catch (const std::bad_alloc&) {
    return resourceExhausted("rank " + std::to_string(world.rank()) +
                             ": out of memory while allocating the model");
  }
  trainer->m_hooks = std::make_unique<Hooks>(*trainer->m_shards);
  ModelParallel parallel;
  parallel.ep = config.parallel.ep > 1 ? trainer->m_groups.ep.get() : nullptr;
  parallel.world = w > 1 ? &world : nullptr;
  parallel.hooks = trainer->m_hooks.get();
  parallel.tag = &trainer->m_tag;
  trainer->m_model->setParallel(parallel);
  return trainer;
}

CpuRankStepper::CpuRankStepper(const RunConfig& config, Communicator& world, EventSink* sink)
    : m_config(config), m_world(world), m_sink(sink) {
  int32_t threads = config.run.threads;
  if (threads == 0) {
    const int32_t hardware = int32_t(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, hardware / config.parallel.worldSize);
  }
  m_pool = std::make_unique<ThreadPool>(threads);
  m_data = std::make_unique<SyntheticData>(config.data, config.model.vocabSize,
                                           config.model.seqLen, config.run.seed);
}

CpuRankStepper::~CpuRankStepper() = default;

Status CpuRankStepper::split() {
  MOEWB_ASSIGN_OR_RETURN(m_groups, splitParallelGroups(m_world, m_config.parallel));
  const int32_t r = m_world.rank();
  observeCollectives(m_world, "world", m_sink, r, &m_tag, &m_stepsDone);
  observeCollectives(*m_groups.ep, "ep", m_sink, r, &m_tag, &m_stepsDone);
  observeCollectives(*m_groups.expertDp, "expert_dp", m_sink, r, &m_tag, &m_stepsDone);
  observeCollectives(*m_groups.fsdp, "fsdp", m_sink, r, &m_tag, &m_stepsDone);
  observeCollectives(*m_groups.replicate, "replicate", m_sink, r, &m_tag, &m_stepsDone);
  return Status::ok();
}

Batch CpuRankStepper::slice(const Batch& global, int32_t rank, int32_t worldSize) {
  const int64_t count = global.batchSize / worldSize;
  return sliceSequences(global, rank * count, count);
}

Result<bool> CpuRankStepper::agree(bool stop) { return agreeOnStop(m_world, stop); }

void CpuRankStepper::applyLiveConfig(const RunConfig& config) {
  refreshDataOnPatch(m_data, m_config, config);
  m_config = config;
  m_model->applyLiveDims(ModelDims::forwardFromConfig(config));
}

Result<RankShards> CpuRankStepper::exportShards() {
  RankShards out;
  try {
    for (const Parameter<float>& s : m_shards->shards()) {
      Parameter<float> copy;
      copy.name = s.name;
      copy.decay = s.decay;
      copy.value = s.value.clone();
      copy.grad = s.grad.clone();
      copy.adamM = s.adamM.clone();
      copy.adamV = s.adamV.clone();
      out.shards.push_back(std::move(copy));
    }
  } catch (const std::bad_alloc&) {
    return resourceExhausted("rank " + std::to_string(m_world.rank()) +
                             ": out of memory while copying its shards for a re-shard");
  }
  out.expertBiases = m_model->expertBiases();
  out.stepsDone = m_stepsDone;
  return out;
}

Status CpuRankStepper::importShards(const RankShards& in) {
  std::vector<Parameter<float>>& shards = m_shards->shards();
  const std::string rank = "rank " + std::to_string(m_world.rank());
  if (in.shards.size() != shards.size() ||
      in.expertBiases.size() != m_model->expertBiases().size()) {
    m_failure = internalError(rank + ": the imported state has " +
                              std::to_string(in.shards.size()) + " shards, this rank " +
                              std::to_string(shards.size()));
    return m_failure;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    Parameter<float>& mine = shards[i];
    const Parameter<float>& from = in.shards[i];
    if (from.name != mine.name || from.value.numel() != mine.value.numel()) {
      m_failure = internalError(rank + ": the imported shard " + from.name + " does not fit " +
                                mine.name + " [" + std::to_string(mine.value.numel()) + "]");
      return m_failure;
    }
    mine.value = from.value.clone();
    mine.grad = from.grad.clone();
    mine.adamM = from.adamM.clone();
    mine.adamV = from.adamV.clone();
  }
  m_model->expertBiases() = in.expertBiases;
  m_stepsDone = in.stepsDone;
  return Status::ok();
}

Result<RankStepOutcome> CpuRankStepper::step() {
  if (!m_failure.isOk()) {
    return failedPrecondition("training already failed: " + m_failure.toString());
  }
  try {
    Result<RankStepOutcome> result = trainStep();
    if (!result.isOk()) m_failure = result.status();
    return result;
  } catch (const CollectiveError& e) {
    m_failure = e.status();
  } catch (const std::bad_alloc&) {
    m_failure = resourceExhausted("rank " + std::to_string(m_world.rank()) +
                                  ": out of memory in step " + std::to_string(m_stepsDone));
  }
  return m_failure;
}

Result<RankStepOutcome> CpuRankStepper::trainStep() {
  const int64_t stepIndex = m_stepsDone;
  const int32_t w = m_world.worldSize();
  if (m_world.rank() == 0) TensorMemory::resetPeak();
  RankStepOutcome out;
  StepEvent& event = out.event;
  event.step = stepIndex;
  event.rank = m_world.rank();
  event.startNs = steadyNowNs();
  PhaseRecorder recorder(m_sink, stepIndex);
  const std::vector<MicroBatch> parts = splitMicroBatches(
      slice(m_data->batch(stepIndex), m_world.rank(), w), m_config.microBatchSize());
  m_model->zeroGrads();
  m_model->setStep(stepIndex);
  MOEWB_ASSIGN_OR_RETURN(const GlobalLosses losses,
                         forwardBackward(parts, stepIndex, recorder, out.forward));
  OptimizerStepResult optim;
  {
    ScopedPhase phase(&recorder, Phase::kOptimizer, Pass::kNone, -1);
    m_tag.layer = -1;
    optim.gradNorm = std::sqrt(sumOverRanks(m_world, m_shards->localGradSquares()));
    if (std::isfinite(optim.gradNorm)) {
      optim = optimizerStep(*m_pool, m_shards->shards(), m_config.optim, stepIndex,
                            optim.gradNorm);
      throwIfFailed(sumExpertCountsOverRanks(m_world, m_model->expertBiases()));
      m_model->afterOptimizerStep();
    }
  }
  // A gradient norm that is not finite (the update was skipped) fails the step in the Trainer's
  // tail, which checks every rank's outcome before it reports any.
  event.endNs = steadyNowNs();
  event.loss = losses.loss;
  event.auxLoss = losses.auxLoss;
  event.tokens = stepTokens(parts);
  event.peakBytes = TensorMemory::peakBytes();
  event.gradNorm = optim.gradNorm;
  event.lr = optim.lr;
  // Per rank: the full (gathered) buffers the model keeps plus this rank's shards.
  out.memory.weightsBytes = m_shards->valueBytes();
  out.memory.gradsBytes = m_shards->gradBytes();
  for (const auto& p : m_model->parameters()) {
    out.memory.weightsBytes += p.value.bytes();
    out.memory.gradsBytes += p.grad.bytes();
  }
  out.memory.optimizerBytes = m_shards->optimizerBytes();
  ++m_stepsDone;
  return out;
}

// Per micro-batch: forward, the ranks' mean losses (collective: every rank learns of a diverged
// micro-batch before any runs its backward), backward into the accumulated gradients; the FSDP
// gathers on the first micro-batch, the reduce-scatters on the last.
Result<GlobalLosses> CpuRankStepper::forwardBackward(const std::vector<MicroBatch>& parts,
                                                     int64_t stepIndex, PhaseRecorder& recorder,
                                                     ForwardResult& forward) {
  GlobalLosses losses;
  for (size_t m = 0; m < parts.size(); ++m) {
    const LossWeights& weights = parts[m].weights;
    m_hooks->setMicroBatch(m == 0, m + 1 == parts.size());
    m_model->setLossWeights(weights);
    ForwardResult part;
    {
      ScopedPhase phase(&recorder, Phase::kForward, Pass::kForward, -1);
      part = m_model->forward(parts[m].batch, &recorder);
    }
    Result<GlobalLosses> mean =
        meanLossesOverRanks(m_world, weights.lm * part.loss, part.auxLoss, stepIndex);
    addMicroBatchResult(forward, std::move(part), weights, m == 0);
    if (!mean.isOk()) {
      m_hooks->setMicroBatch(true, true);
      m_model->setLossWeights({});
      return mean.status();
    }
    losses.loss += mean->loss;
    losses.auxLoss += mean->auxLoss;
    ScopedPhase phase(&recorder, Phase::kBackward, Pass::kBackward, -1);
    m_model->backward(&recorder);
  }
  m_hooks->setMicroBatch(true, true);
  m_model->setLossWeights({});
  return losses;
}

Result<std::vector<Tensor<float>>> CpuRankStepper::gatherFull(bool grads) {
  std::vector<Tensor<float>> out;
  const auto& params = m_model->parameters();
  size_t shard = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter<float>& p = params[i];
    MOEWB_CHECK(p.trainable);  // frozen parameters (LoRA) are refused with several ranks
    const bool expert = m_model->isExpertSharded(i);
    const Parameter<float>& s = m_shards->shards()[shard++];
    const Tensor<float>& mine = grads ? s.grad : s.value;
    Communicator& group = expert ? *m_groups.expertDp : *m_groups.fsdp;
    std::vector<float> all(size_t(group.worldSize() * mine.numel()));
    MOEWB_RETURN_IF_ERROR(group.allGather(std::span<const float>(mine.data(), size_t(mine.numel())),
                                          std::span<float>(all)));
    std::vector<int64_t> shape = p.value.shape();
    Tensor<float> local(shape);
    std::copy_n(all.data(), local.numel(), local.data());
    if (expert) {
      shape[0] *= m_groups.ep->worldSize();
      Tensor<float> full(shape);
      MOEWB_RETURN_IF_ERROR(m_groups.ep->allGather(
          std::span<const float>(local.data(), size_t(local.numel())),
          std::span<float>(full.data(), size_t(full.numel()))));
      local = std::move(full);
    }
    out.push_back(std::move(local));
  }
  return out;
}

}  // namespace moewb::engine
