// CudaRankStepper: one GPU rank of a parallel run, the device twin of parallel/cpu_rank_stepper.h
// (same data slice, groups, loss normalisation, FSDP chunking and trace events), on a
// communicator with device collectives: virtual ranks sharing one GPU, or NCCL with one process
// per GPU. Each step:
//   this rank's data.batch_size / world_size sequences -> forward on the CudaModel (FSDP device
//   all-gather per unit, EP device all-to-all per MoE layer, global Switch-loss statistics) ->
//   backward (EP all-to-all back, FSDP reduce-scatter per unit) -> global gradient norm -> clip +
//   AdamW on this rank's shards -> global aux-loss-free bias counts.
// Micro-batching (data.micro_batch_size) as on the CPU ranks: forward and backward per
// micro-batch into the full gradients, the FSDP gathers before the first and the reduce-scatters
// after the last micro-batch only.
// Trace: the step's phases (GPU-timed, NVTX ranges), every collective with its group, layer and
// phase, all-to-all traffic per layer, expert loads, the device-memory timeline of this rank.
// Errors: a failed collective or a CUDA error fails the step and every later step (the message
// names the missing rank where the communicator knows it). Used from its rank's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/device_memory_reporter.h"
#include "model/cuda/device_timeline.h"
#include "model/parallel/cuda_fsdp_shards.h"
#include "train/micro_batches.h"
#include "train/synthetic_data.h"
#include "train/optimizer.h"
#include "train/parallel/rank_common.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {

class CudaRankStepper final : public RankStepper {
 public:
  // Collective over `world` (splits the groups). `config` must have parallel.world_size ==
  // world.worldSize(); world.supportsDevice() must hold. `sink` may be
  // null; sink and world must outlive the trainer. Errors: kInvalidArgument, kFailedPrecondition
  // (no device collectives), the CUDA backend's (kUnimplemented settings, kResourceExhausted).
  static Result<std::unique_ptr<CudaRankStepper>> create(const ValidConfig& config,
                                                         Communicator& world, EventSink* sink,
                                                         int deviceOrdinal);
  ~CudaRankStepper() override;

  Result<RankStepOutcome> step() override;
  Result<bool> agree(bool stop) override;
  void applyLiveConfig(const RunConfig& config) override;
  int64_t stepsDone() const override { return m_stepsDone; }
  // This rank's fp32 master shards, their gradients and moments copied to the host (waits for
  // the stream), the expert biases and the step count (rank_common.h).
  Result<RankShards> exportShards() override;
  // Copies `shards` into the device shards (and their bf16 copies), waits for the stream.
  Status importShards(const RankShards& shards) override;

 private:
  class Hooks;
  CudaRankStepper(const RunConfig& config, Communicator& world, EventSink* sink);
  Result<RankStepOutcome> trainStep();
  Result<GlobalLosses> forwardBackward(const std::vector<MicroBatch>& parts, int64_t stepIndex,
                                       ForwardResult& forward);
  Result<OptimizerStepResult> optimizerStep(int64_t stepIndex);
  // The device shard of trainable parameter `index` (model order): its dense or expert shard.
  CudaParameter& shardOf(size_t index);
  Status importShardsOnce(const RankShards& shards);

  RunConfig m_config;
  Communicator& m_world;
  EventSink* m_sink;
  ParallelGroups m_groups;
  std::unique_ptr<ThreadPool> m_pool;
  std::unique_ptr<Model<float>> m_host;
  std::unique_ptr<CudaContext> m_context;
  DeviceMemoryReporter m_memory;  // after m_context: stops before the context goes
  std::unique_ptr<CudaModel> m_model;
  std::unique_ptr<CudaFsdpShards> m_shards;
  std::unique_ptr<Hooks> m_hooks;
  std::unique_ptr<SyntheticData> m_data;
  DeviceTimeline m_timeline;
  CommTag m_tag;
  int64_t m_stepsDone = 0;
  Status m_failure;
};

}  // namespace moewb::engine::cuda
