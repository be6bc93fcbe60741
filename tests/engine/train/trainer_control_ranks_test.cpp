// Live control on in-process CPU ranks: the one Trainer takes pause, single step and patches at
// the step boundary for every rank of the group (live_control_check.h).
#include <gtest/gtest.h>

#include "live_control_check.h"

namespace moewb::engine {
namespace {

RunConfig fourRankConfig() {
  RunConfig config;
  config.model.numLayers = 1;
  config.model.seqLen = 8;
  config.data.batchSize = 8;
  config.run.threads = 1;
  config.moe.topK = 2;
  config.optim.warmupSteps = 10;
  config.parallel.worldSize = 4;
  config.parallel.ep = 2;
  config.parallel.fsdp = 2;
  return config;
}

TEST(TrainerControlRanks, PauseStepPatchResumeOnFourInProcessRanks) {
  test::checkLiveControlOnRanks(fourRankConfig());
}

TEST(TrainerControlRanks, OneTrainerReportsEveryRankAndItsTopology) {
  test::RecordingSink rank0, rank1;
  RunConfig config = fourRankConfig();
  config.parallel.worldSize = 2;
  config.parallel.fsdp = 0;
  auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&rank0, &rank1}});
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  EXPECT_EQ((*trainer)->deviceDescription(), "2 in-process ranks (CPU threads)");
  EXPECT_EQ((*trainer)->parameterCount(), 0);  // no single host model to count or checkpoint
  EXPECT_EQ((*trainer)->saveCheckpoint("/nonexistent/x").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*trainer)->run(2).isOk());
  for (const test::RecordingSink* sink : {&rank0, &rank1}) {
    ASSERT_EQ(sink->runStarts.size(), 1u);
    EXPECT_EQ(sink->runStarts[0].worldSize, 2);
    EXPECT_EQ(sink->steps.size(), 2u);
    ASSERT_EQ(sink->runEnds.size(), 1u);
    EXPECT_EQ(sink->runEnds[0].outcome, RunOutcome::kCompleted);
  }
  // Losses are global: equal on every rank.
  EXPECT_EQ(rank0.steps[1].loss, rank1.steps[1].loss);
  // The ranks ended with the run.
  EXPECT_EQ((*trainer)->run(1).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moewb::engine
