// What every rank stepper (CPU ranks: cpu_rank_stepper.h; GPU ranks: cuda_rank_stepper.h)
// shares: the communicator groups of a parallel run, the trace observer of their collectives, a
// sum of one double over ranks, and the RankStepper interface the rank runners drive.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model_parallel.h"
#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/engine/event_sink.h"
#include "train/parallel/shard_state.h"
#include "train/step_runner.h"

namespace moewb::engine {

// The groups split from the world (consecutive ranks; placeOf in shard_state.h): ep = r / ep,
// expert_dp = r % ep, fsdp = r / fsdp, replicate = r % fsdp (the group's colour; a rank's place
// in each group is its placeOf).
struct ParallelGroups {
  std::unique_ptr<Communicator> ep, expertDp, fsdp, replicate;
};

// Collective over `world`: splits the four groups of `parallel`.
Result<ParallelGroups> splitParallelGroups(Communicator& world, const ParallelSection& parallel);

// Reports every collective of `comm` to `sink` as a CollectiveEvent of `group` (and each tagged
// all-to-all-v as A2aTrafficEvent rows) with the step *step and the layer and phase of *tag at the
// time of the call. sink == null: nothing. step and tag must outlive comm's use.
void observeCollectives(Communicator& comm, const char* group, EventSink* sink, int32_t worldRank,
                        const CommTag* tag, const int64_t* step);

// Collective: the sum over the ranks of `world` of one double per rank, exact to about 1e-14
// (each value travels as two floats). Throws CollectiveError.
double sumOverRanks(Communicator& world, double value);
// The same for several values in one collective: result[i] = sum over ranks of values[i].
std::vector<double> sumsOverRanks(Communicator& world, std::span<const double> values);

// Collective: the step's global mean loss and aux loss from each rank's means over its N / W
// tokens (the mean of the ranks' means), in one collective. kInternal ("training diverged at step
// S") when either is not finite. Throws CollectiveError.
struct GlobalLosses {
  double loss = 0;
  double auxLoss = 0;
};
Result<GlobalLosses> meanLossesOverRanks(Communicator& world, double loss, double auxLoss,
                                         int64_t stepIndex);

// Collective: sums every layer's pending expert counts over `world` in one all-reduce.
struct ExpertBias;
Status sumExpertCountsOverRanks(Communicator& world, std::vector<ExpertBias>& biases);

// Collective: true on every rank of `world` when any rank passes true.
Result<bool> agreeOnStop(Communicator& world, bool stop);

// The expert-load events of one step's forward (this rank's routed rows per layer) to `sink`.
struct ForwardResult;
void emitExpertLoads(EventSink& sink, int64_t step, int32_t rank, const ForwardResult& forward);

// One rank of a parallel run, as the rank runners (rank_group_runner.h, launcher_rank_runner.h)
// see it. All ranks call the same methods in the same order (collectives).
class RankStepper {
 public:
  virtual ~RankStepper() = default;
  // One optimizer step (collective): the step event (global loss, grad norm), this rank's
  // forward result and memory account; the Trainer turns them into events.
  virtual Result<RankStepOutcome> step() = 0;
  // True on every rank when any rank passes true (a stop agreed at a step boundary).
  virtual Result<bool> agree(bool stop) = 0;
  // The live-patchable settings of a validated `config` (Model::applyLiveDims; new synthetic data
  // when the data section changed), from the next step on. Not collective.
  virtual void applyLiveConfig(const RunConfig& config) = 0;
  virtual int64_t stepsDone() const = 0;
  // At a step boundary: a copy of what this rank holds of the training state (its FSDP shards'
  // values, gradients and moments, the expert biases, the step count; shard_state.h). Not
  // collective. Errors: the device's (a GPU rank copies its shards to the host).
  virtual Result<RankShards> exportShards() = 0;
  // At a step boundary: replaces this rank's training state by `shards` (shardsOfRank of this
  // rank in this stepper's layout), so the next step continues from it. Not collective. Errors:
  // kInternal when a shard does not fit this rank's, the device's; a failed import leaves the
  // stepper unusable (its next step fails).
  virtual Status importShards(const RankShards& shards) = 0;
};

// A GPU rank (cuda_rank_stepper.h) on `deviceOrdinal`, with `world` supporting
// device collectives (virtual ranks or NCCL). A build without CUDA answers kUnimplemented.
Result<std::unique_ptr<RankStepper>> createCudaRankStepper(const ValidConfig& config,
                                                           Communicator& world, EventSink* sink,
                                                           int deviceOrdinal);

// Runs fn(comm) on worldSize virtual GPU ranks: threads of this process sharing GPU
// `deviceOrdinal`, each with its own stream (comm/cuda/virtual_gpu_comm.h), and joins them; a
// failing rank aborts the others (as runRanks). A build without CUDA answers kUnimplemented.
Status runVirtualGpuRanks(int32_t worldSize, int deviceOrdinal,
                          const std::function<Status(Communicator&)>& fn,
                          std::chrono::milliseconds timeout);

// NCCL (comm/cuda/nccl_comm.h): a new unique id (rank 0 shares it), and this process's
// communicator of rank `rank` in a world of `worldSize` on GPU `deviceOrdinal`. describeMissing
// (may be empty) names dead or slow ranks in timeout errors. A build without CUDA answers
// kUnimplemented.
Result<std::string> newNcclUniqueId();
Result<std::unique_ptr<Communicator>> createNcclCommunicator(
    int32_t rank, int32_t worldSize, int deviceOrdinal, const std::string& uniqueId,
    std::chrono::milliseconds timeout, std::function<std::string()> describeMissing);

}  // namespace moewb::engine
