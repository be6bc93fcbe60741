// CpuRankStepper: one rank of a parallel run on in-process ranks (threads). Each step:
//   global batch of the step -> this rank's data.batch_size / world_size sequences ->
//   forward (FSDP all-gather per unit, EP all-to-all per MoE layer, global Switch-loss stats) ->
//   backward (EP all-to-all back, FSDP reduce-scatter per unit) -> global gradient norm ->
//   clip + AdamW on this rank's shards -> global aux-loss-free bias counts.
// Micro-batching (data.micro_batch_size, train/micro_batches.h): the rank's sequences are cut
// into micro-batches, each a forward and a backward into the same full gradients; the FSDP
// all-gathers run before the first micro-batch's forward and the reduce-scatters after the last
// one's backward only (once per step, as without micro-batching), the EP all-to-alls and the
// global switch-loss statistics per micro-batch, and one small all-reduce of the losses per
// micro-batch (so a diverged micro-batch stops every rank before its backward).
// Loss normalisation: the loss of the step is the mean over the global batch's tokens; every
// rank holds N / world_size tokens, so each rank's mean loss weighs 1 / world_size (FsdpShards).
// The step event reports the global losses and gradient norm (equal on every rank) and this
// rank's tokens; expert loads are this rank's routed assignments (rank column).
// Groups (split from the world, consecutive ranks): ep = r / ep, expert_dp = r % ep,
// fsdp = r / fsdp, replicate = r % fsdp. Every collective is reported to the sink as a
// CollectiveEvent (and EP all-to-all-v as A2aTrafficEvent rows) with the step and layer.
// Errors: a failed collective (a peer that failed, threw or did not arrive within
// parallel.timeout_ms) fails the step with its message, which names the missing rank; every later
// step fails at once. All ranks must call the same methods in the same order (collectives).
// Used from one thread (its rank's).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "train/synthetic_data.h"
#include "model/cpu/model.h"
#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"
#include "model/parallel/fsdp_shards.h"
#include "train/micro_batches.h"
#include "train/parallel/rank_common.h"
#include "runtime/thread_pool.h"

namespace moewb::engine {

class CpuRankStepper final : public RankStepper {
 public:
  // Collective over `world` (splits the groups). `config` must have parallel.world_size ==
  // world.worldSize(). `sink` may be null and must outlive the stepper. `world` must outlive the
  // stepper.
  static Result<std::unique_ptr<CpuRankStepper>> create(const ValidConfig& config,
                                                        Communicator& world, EventSink* sink);
  ~CpuRankStepper() override;

  // One optimizer step (collective): the step event (global loss, grad norm), this rank's forward
  // result and memory account.
  Result<RankStepOutcome> step() override;
  void applyLiveConfig(const RunConfig& config) override;
  // Collective: true on every rank when any rank passes true (a stop agreed at a step boundary).
  Result<bool> agree(bool stop) override;
  // This rank's shards (copies), expert biases and step count (rank_common.h).
  Result<RankShards> exportShards() override;
  // Replaces them (the model's full parameters are gathered from the shards before each use).
  Status importShards(const RankShards& shards) override;

  // Collective: the full tensor of every model parameter (full expert count), in model order:
  // the gradients of the last step as the optimizer saw them (summed over ranks, before
  // clipping), or the current values.
  Result<std::vector<Tensor<float>>> fullGradients() { return gatherFull(true); }
  Result<std::vector<Tensor<float>>> fullValues() { return gatherFull(false); }

  int64_t stepsDone() const override { return m_stepsDone; }
  int32_t rank() const { return m_world.rank(); }
  const Model<float>& model() const { return *m_model; }
  // This rank's part of `global` (sequences [rank * B / W, (rank + 1) * B / W)).
  static Batch slice(const Batch& global, int32_t rank, int32_t worldSize);

 private:
  class Hooks;
  CpuRankStepper(const RunConfig& config, Communicator& world, EventSink* sink);
  Status split();
  Result<RankStepOutcome> trainStep();
  Result<GlobalLosses> forwardBackward(const std::vector<MicroBatch>& parts, int64_t stepIndex,
                                       PhaseRecorder& recorder, ForwardResult& forward);
  Result<std::vector<Tensor<float>>> gatherFull(bool grads);

  RunConfig m_config;
  Communicator& m_world;
  EventSink* m_sink;
  ParallelGroups m_groups;
  std::unique_ptr<ThreadPool> m_pool;
  std::unique_ptr<Model<float>> m_model;
  std::unique_ptr<FsdpShards> m_shards;
  std::unique_ptr<Hooks> m_hooks;
  std::unique_ptr<SyntheticData> m_data;
  CommTag m_tag;
  int64_t m_stepsDone = 0;
  Status m_failure;
};

}  // namespace moewb::engine
