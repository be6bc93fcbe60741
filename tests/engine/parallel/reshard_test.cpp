// Live re-sharding of an in-process rank group (rank_group_runner.h, shard_state.h): the gathered
// state against the ranks' own collective gather, gather / scatter round trips across layouts,
// a patch of parallel.ep / .fsdp / .replicate / .a2a_chunks in the middle of a run against a
// group started in the new layout from the state gathered at that step (losses and gradient
// norms bitwise), gather -> scatter into the same layout, and refused layout patches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/in_process_comm.h"
#include "model/cpu/parameter_layout.h"
#include "reshard_check.h"
#include "train/parallel/cpu_rank_stepper.h"
#include "train/parallel/shard_state.h"

namespace moewb::engine {
namespace {

using test::expectBitwise;
using test::Group;
using test::kStepsAfter;
using test::kStepsBefore;
using test::LiveRun;
using test::patched;
using test::runLive;
using test::Trajectory;
using test::valid;

constexpr double kLossTolerance = 1e-5;  // fp32: the old layout's losses, another sum order

RunConfig baseConfig() { return test::smallGroupConfig(); }

bool sameBits(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() &&
         (a.numel() == 0 || std::memcmp(a.data(), b.data(), size_t(a.bytes())) == 0);
}

void expectSameState(const TrainingState& a, const TrainingState& b) {
  EXPECT_EQ(a.stepsDone, b.stepsDone);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    const Parameter<float>& p = a.params[i];
    const Parameter<float>& q = b.params[i];
    EXPECT_EQ(p.name, q.name);
    EXPECT_TRUE(sameBits(p.value, q.value)) << p.name << " value";
    EXPECT_TRUE(sameBits(p.grad, q.grad)) << p.name << " grad";
    EXPECT_TRUE(sameBits(p.adamM, q.adamM)) << p.name << " adam m";
    EXPECT_TRUE(sameBits(p.adamV, q.adamV)) << p.name << " adam v";
  }
  ASSERT_EQ(a.expertBiases.size(), b.expertBiases.size());
  for (size_t l = 0; l < a.expertBiases.size(); ++l) {
    EXPECT_EQ(a.expertBiases[l].bias, b.expertBiases[l].bias) << "layer " << l;
  }
}

TEST(ShardState, PlaceFollowsTheGroupSplit) {
  RunConfig c = baseConfig();  // world 4, ep 2, fsdp 2
  const ParallelPlace p3 = placeOf(c.parallel, 3);
  EXPECT_EQ(p3.expertShard, 1);
  EXPECT_EQ(p3.expertDpRank, 1);
  EXPECT_EQ(p3.expertDpSize, 2);
  EXPECT_EQ(p3.fsdpRank, 1);
  EXPECT_EQ(p3.fsdpSize, 2);
  EXPECT_EQ(p3.replica, 1);
  c.parallel.ep = 4;
  c.parallel.fsdp = 0;
  c.parallel.replicate = 4;  // pure replication: fsdp degree 1
  const ParallelPlace p2 = placeOf(c.parallel, 2);
  EXPECT_EQ(p2.expertShard, 2);
  EXPECT_EQ(p2.expertDpSize, 1);
  EXPECT_EQ(p2.fsdpSize, 1);
  EXPECT_EQ(p2.fsdpRank, 0);
  EXPECT_EQ(p2.replica, 2);
}

// The gathered state equals what the ranks' own collective gather (CpuRankStepper::fullValues,
// fullGradients) returns, has the one-rank model's names and shapes, and survives a scatter into
// other layouts and a gather back bit for bit.
TEST(ShardState, GatherMatchesTheRanksOwnGatherAndRoundTripsAcrossLayouts) {
  const RunConfig config = baseConfig();
  const ValidConfig v = valid(config);
  const int32_t world = config.parallel.worldSize;
  std::vector<RankShards> ranks(static_cast<size_t>(world));
  std::vector<Tensor<float>> values, grads;
  std::mutex mutex;
  const Status status = runRanks(world, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(auto stepper, CpuRankStepper::create(v, comm, nullptr));
    for (int i = 0; i < 2; ++i) MOEWB_RETURN_IF_ERROR(stepper->step().status());
    MOEWB_ASSIGN_OR_RETURN(auto full, stepper->fullValues());
    MOEWB_ASSIGN_OR_RETURN(auto fullGrads, stepper->fullGradients());
    MOEWB_ASSIGN_OR_RETURN(RankShards shards, stepper->exportShards());
    std::lock_guard<std::mutex> lock(mutex);
    ranks[size_t(comm.rank())] = std::move(shards);
    if (comm.rank() == 0) {
      values = std::move(full);
      grads = std::move(fullGrads);
    }
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  Result<TrainingState> state = assembleTrainingState(config, ranks);
  ASSERT_TRUE(state.isOk()) << state.status().toString();
  EXPECT_EQ(state->stepsDone, 2);
  ASSERT_EQ(state->expertBiases.size(), 2u);
  double biasMagnitude = 0;
  for (float b : state->expertBiases[0].bias) biasMagnitude += std::fabs(b);
  EXPECT_GT(biasMagnitude, 0.0);  // two bias updates happened
  const std::vector<ParameterDecl> layout = modelParameterLayout(ModelDims::fromConfig(config));
  ASSERT_EQ(state->params.size(), layout.size());
  ASSERT_EQ(values.size(), layout.size());
  double moments = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const Parameter<float>& p = state->params[i];
    EXPECT_EQ(p.name, layout[i].name);
    EXPECT_EQ(p.value.shape(), layout[i].shape) << p.name;
    EXPECT_TRUE(sameBits(p.value, values[i])) << p.name;
    EXPECT_TRUE(sameBits(p.grad, grads[i])) << p.name;
    for (int64_t k = 0; k < p.adamV.numel(); ++k) moments += p.adamV[k];
  }
  EXPECT_GT(moments, 0.0);

  for (const auto& assignments : std::vector<std::vector<std::string>>{
           {"parallel.ep=4"}, {"parallel.ep=1", "parallel.fsdp=4"},
           {"parallel.fsdp=1", "parallel.replicate=4"}, {"parallel.ep=4", "parallel.fsdp=4"}}) {
    const RunConfig other = patched(config, assignments);
    SCOPED_TRACE(assignments.front());
    ASSERT_TRUE(validateConfig(other).isOk()) << validateConfig(other).toString();
    std::vector<RankShards> scattered;
    for (int32_t r = 0; r < world; ++r) {
      Result<RankShards> shards = shardsOfRank(other, *state, r);
      ASSERT_TRUE(shards.isOk()) << shards.status().toString();
      scattered.push_back(std::move(shards).value());
    }
    Result<TrainingState> back = assembleTrainingState(other, scattered);
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    expectSameState(*state, *back);
  }
}

TEST(ShardState, RefusesStateOfAnotherModelAndDisagreeingReplicas) {
  const RunConfig config = baseConfig();
  Group group(config);
  group.run(1);
  Result<TrainingState> state = group.runner().gatherState();
  ASSERT_TRUE(state.isOk()) << state.status().toString();
  RunConfig wider = config;
  wider.model.dModel = 24;
  const Result<RankShards> wrong = shardsOfRank(wider, *state, 0);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("embedding"), std::string::npos)
      << wrong.status().message();
  std::vector<RankShards> ranks;
  for (int32_t r = 0; r < config.parallel.worldSize; ++r) {
    ranks.push_back(std::move(shardsOfRank(config, *state, r)).value());
  }
  ranks[2].shards[0].value[0] += 1.0f;  // rank 2 replicates rank 0's dense chunk
  const Result<TrainingState> split = assembleTrainingState(config, ranks);
  EXPECT_EQ(split.status().code(), StatusCode::kInternal);
  EXPECT_NE(split.status().message().find("rank 2's replica"), std::string::npos)
      << split.status().message();
}

// (b) Gather -> scatter into the same layout: the run goes on exactly as without it.
TEST(Reshard, GatherScatterIntoTheSameLayoutChangesNothing) {
  const RunConfig config = baseConfig();
  Trajectory straight;
  {
    Group group(config);
    straight = group.run(kStepsBefore + kStepsAfter);
  }
  Group group(config);
  Trajectory resumed = group.run(kStepsBefore);
  Result<TrainingState> state = group.runner().gatherState();
  ASSERT_TRUE(state.isOk()) << state.status().toString();
  ASSERT_TRUE(group.runner().scatterState(*state).isOk());
  resumed.append(group.run(kStepsAfter));
  expectBitwise(straight, resumed);
}

TEST(Reshard, LivePatchOfEpEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(baseConfig(), {"parallel.ep=4"}, kLossTolerance);
}

TEST(Reshard, LivePatchOfFsdpAndReplicateEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(baseConfig(), {"parallel.fsdp=1", "parallel.replicate=4"}, kLossTolerance);
  test::checkLivePatch(baseConfig(), {"parallel.ep=1", "parallel.fsdp=4"}, kLossTolerance);
}

TEST(Reshard, LivePatchOfA2aChunksEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(baseConfig(), {"parallel.a2a_chunks=2"}, kLossTolerance);
}
// (c) Invalid layouts are refused naming the key, and the run goes on unchanged.
TEST(Reshard, InvalidLayoutPatchIsRefusedAndTheRunGoesOn) {
  const RunConfig config = baseConfig();
  Trajectory straight;
  {
    Group group(config);
    straight = group.run(kStepsBefore + kStepsAfter);
  }
  const struct {
    std::vector<std::string> assignments;
    const char* key;
  } cases[] = {
      {{"parallel.ep=3"}, "parallel.ep"},                              // divides neither
      {{"parallel.fsdp=2", "parallel.replicate=4"}, "parallel.fsdp"},  // 2 * 4 != 4
      {{"parallel.a2a_chunks=8"}, "parallel.a2a_chunks"},              // > 8 / ep experts
      {{"parallel.world_size=2"}, "parallel.world_size"},              // not a layout key
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.assignments.front());
    const LiveRun live = runLive(config, c.assignments);
    EXPECT_FALSE(live.patch.isOk());
    EXPECT_NE(live.patch.message().find(c.key), std::string::npos) << live.patch.message();
    EXPECT_TRUE(live.changes.empty());
    EXPECT_EQ(live.configAfter.parallel, config.parallel);
    expectBitwise(live.trajectory, straight);
  }
}

TEST(Reshard, OneRankRunRefusesLayoutKeysAsBefore) {
  RunConfig config = baseConfig();
  config.parallel.worldSize = 1;
  config.parallel.ep = 1;
  config.parallel.fsdp = 0;
  const LiveRun live = runLive(config, {"parallel.ep=2"});
  EXPECT_EQ(live.patch.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(live.patch.message().find("parallel.ep cannot change while the run goes on"),
            std::string::npos)
      << live.patch.message();
  EXPECT_EQ(live.patch.message().find("parallel.fsdp"), std::string::npos);  // not listed live
  EXPECT_EQ(Trainer::liveKeysFor(config), Trainer::liveKeys());
  config.parallel.worldSize = 4;
  EXPECT_EQ(Trainer::liveKeysFor(config).size(),
            Trainer::liveKeys().size() + Trainer::layoutKeys().size());
}

}  // namespace
}  // namespace moewb::engine
