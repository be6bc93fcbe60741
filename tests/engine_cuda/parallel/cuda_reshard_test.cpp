// Live re-shard on 4 virtual GPU ranks sharing one GPU: a patch of parallel.ep, of the FSDP /
// replicate split and of parallel.a2a_chunks after 3 steps, against a group started in the new
// layout from the state gathered at that step (losses and gradient norms bit for bit), and
// within bf16 rounding of the run that kept its layout. The same check as the CPU ranks'
// (tests/engine/parallel/reshard_check.h).
#include <gtest/gtest.h>

#include "../../engine/parallel/reshard_check.h"
#include "cuda_test_util.h"

namespace moewb::engine::cuda {
namespace {

class CudaReshardTest : public CudaTest {};

RunConfig gpuRanksConfig() {
  RunConfig config;
  config.run.backend = "cuda";
  config.run.seed = 5;
  config.model.mixerPattern = "A";
  config.model.numLayers = 2;
  config.model.dModel = 64;
  config.model.numHeads = 4;
  config.model.seqLen = 16;
  config.moe.numExperts = 8;
  config.moe.topK = 2;
  config.moe.dFf = 64;
  config.moe.biasUpdateRate = 0.01;
  config.data.batchSize = 8;
  config.optim.warmupSteps = 4;
  config.optim.gradClip = 0.5;
  config.parallel.worldSize = 4;
  config.parallel.ep = 2;
  config.parallel.fsdp = 2;
  return config;
}

constexpr double kBf16LossTolerance = 5e-3;  // another reduction order in bf16

TEST_F(CudaReshardTest, LivePatchOfEpEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(gpuRanksConfig(), {"parallel.ep=4"}, kBf16LossTolerance);
}

TEST_F(CudaReshardTest, LivePatchOfFsdpAndReplicateEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(gpuRanksConfig(), {"parallel.fsdp=1", "parallel.replicate=4"},
                       kBf16LossTolerance);
}

TEST_F(CudaReshardTest, LivePatchOfA2aChunksEqualsAGroupStartedInTheNewLayout) {
  test::checkLivePatch(gpuRanksConfig(), {"parallel.a2a_chunks=2"}, kBf16LossTolerance);
}

TEST_F(CudaReshardTest, GatherScatterIntoTheSameLayoutChangesNothing) {
  const RunConfig config = gpuRanksConfig();
  test::Trajectory straight;
  {
    test::Group group(config);
    straight = group.run(test::kStepsBefore + test::kStepsAfter);
  }
  test::Group group(config);
  test::Trajectory resumed = group.run(test::kStepsBefore);
  Result<TrainingState> state = group.runner().gatherState();
  ASSERT_TRUE(state.isOk()) << state.status().toString();
  EXPECT_EQ(state->stepsDone, test::kStepsBefore);
  MOEWB_ASSERT_OK(group.runner().scatterState(*state));
  resumed.append(group.run(test::kStepsAfter));
  test::expectBitwise(straight, resumed);
}

}  // namespace
}  // namespace moewb::engine::cuda
