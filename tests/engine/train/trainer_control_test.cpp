// Live control of a running trainer: pause / single step / resume / stop from another thread, and
// config patches that are validated, applied at a step boundary and reported, or refused.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "moewb/engine/trainer.h"
#include "recording_sink.h"

namespace moewb::engine {
namespace {

using Kind = TrainerCommand::Kind;

RunConfig smallConfig() {
  RunConfig config;
  config.model.numLayers = 1;
  config.model.seqLen = 8;
  config.data.batchSize = 2;
  config.run.threads = 1;
  return config;
}

void waitUntil(const std::function<bool()>& done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(done());
}

TEST(TrainerControl, PauseSingleStepResumeAndStop) {
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  Trainer& t = **trainer;
  std::future<Status> pause = t.post({Kind::kPause});  // handled before the first step
  Status runStatus;
  std::thread runner([&] { runStatus = t.run(1'000'000); });
  EXPECT_TRUE(pause.get().isOk());
  waitUntil([&] { return t.paused(); });
  int64_t pausedAt = t.stepsDone();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(t.stepsDone(), pausedAt);  // really paused

  EXPECT_TRUE(t.post({Kind::kStep}).get().isOk());
  waitUntil([&] { return t.stepsDone() == pausedAt + 1 && t.paused(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(t.stepsDone(), pausedAt + 1);  // exactly one step

  EXPECT_TRUE(t.post({Kind::kResume}).get().isOk());
  waitUntil([&] { return t.stepsDone() > pausedAt + 3; });
  EXPECT_TRUE(t.post({Kind::kStop}).get().isOk());
  runner.join();
  EXPECT_TRUE(runStatus.isOk());
  EXPECT_LT(t.stepsDone(), 1'000'000);
}

TEST(TrainerControl, PatchIsAppliedAtAStepBoundaryAndReported) {
  test::RecordingSink sink;
  auto trainer = Trainer::create(smallConfig(), &sink);
  ASSERT_TRUE(trainer.isOk());
  Trainer& t = **trainer;
  ASSERT_TRUE(t.run(3).isOk());
  auto accepted = t.post({Kind::kApplyPatch, {"optim.lr=0.0005", "data.skew=2"}, "test"});
  ASSERT_TRUE(t.run(2).isOk());
  ASSERT_TRUE(accepted.get().isOk());
  EXPECT_DOUBLE_EQ(t.config().optim.lr, 0.0005);
  EXPECT_DOUBLE_EQ(t.config().data.skew, 2.0);
  ASSERT_EQ(sink.configChanges.size(), 2u);
  EXPECT_EQ(sink.configChanges[0].key, "optim.lr");
  EXPECT_EQ(sink.configChanges[0].oldValue, "0.0030000000000000001");
  EXPECT_EQ(sink.configChanges[0].newValue, "0.00050000000000000001");
  EXPECT_EQ(sink.configChanges[0].step, 3);
  EXPECT_EQ(sink.configChanges[0].source, "test");
  // The new learning rate is in effect from step 3 on (warm-up is 10 steps: lr * 4/10).
  EXPECT_NEAR(sink.steps.back().lr, 0.0005 * 5.0 / 10.0, 1e-12);
}

TEST(TrainerControl, PatchesThatNeedNewWeightsOrAreInvalidAreRefusedUnchanged) {
  test::RecordingSink sink;
  auto trainer = Trainer::create(smallConfig(), &sink);
  ASSERT_TRUE(trainer.isOk());
  Trainer& t = **trainer;
  auto shape = t.post({Kind::kApplyPatch, {"optim.lr=0.001", "model.d_model=128"}});
  auto range = t.post({Kind::kApplyPatch, {"optim.beta1=2"}});
  auto unknown = t.post({Kind::kApplyPatch, {"optim.learning_rate=1"}});
  ASSERT_TRUE(t.run(1).isOk());
  Status s = shape.get();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("model.d_model cannot change"), std::string::npos) << s.message();
  EXPECT_NE(range.get().message().find("optim.beta1"), std::string::npos);
  EXPECT_NE(unknown.get().message().find("optim.learning_rate"), std::string::npos);
  EXPECT_DOUBLE_EQ(t.config().optim.lr, RunConfig{}.optim.lr);  // nothing of the patch applied
  EXPECT_TRUE(sink.configChanges.empty());
}

TEST(TrainerControl, CommandsAfterTheRunEndAreAnswered) {
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  ASSERT_TRUE((*trainer)->run(1).isOk());
  auto late = (*trainer)->post({Kind::kApplyPatch, {"optim.lr=0.001"}});
  ASSERT_TRUE((*trainer)->run(1).isOk());  // the next run handles it
  EXPECT_TRUE(late.get().isOk());
}

}  // namespace
}  // namespace moewb::engine

namespace moewb::engine {
namespace {

RunConfig hybridConfig() {
  RunConfig config;
  config.model.numLayers = 2;
  config.model.seqLen = 16;
  config.model.mixerPattern = "KS";
  config.sparse.warmupSteps = 1;
  config.moe.latentDim = 32;
  config.moe.numSharedExperts = 1;
  config.data.batchSize = 2;
  config.run.threads = 1;
  return config;
}

// Runs 3 steps, applies `patch` through the command queue, runs 3 more; returns the 6 losses.
std::vector<double> lossesWithPatch(const std::vector<std::string>& patch,
                                    test::RecordingSink* sink = nullptr) {
  auto trainer = Trainer::create(hybridConfig(), sink);
  EXPECT_TRUE(trainer.isOk());
  std::vector<double> out;
  for (int i = 0; i < 6; ++i) {
    if (i == 3 && !patch.empty()) {
      auto applied = (*trainer)->post({Kind::kApplyPatch, patch, "test"});
      EXPECT_TRUE((*trainer)->run(1).isOk());
      EXPECT_TRUE(applied.get().isOk());
      out.push_back(sink ? sink->steps.back().loss : 0);
      continue;
    }
    auto step = (*trainer)->step();
    EXPECT_TRUE(step.isOk());
    out.push_back(step.isOk() ? step->loss : -1);
  }
  return out;
}

TEST(TrainerControl, FusionAndLossHeadChangeLiveWithoutChangingTheMath) {
  test::RecordingSink plainSink, fusedSink, cceSink;
  const std::vector<double> plain = lossesWithPatch({"optim.lr=0.003"}, &plainSink);
  const std::vector<double> fused = lossesWithPatch(
      {"fusion.permute_into_experts=true", "fusion.combine_into_experts=true"}, &fusedSink);
  const std::vector<double> cce = lossesWithPatch({"loss.kind=\"cce\""}, &cceSink);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(fused[i], plain[i]) << "step " << i;  // fused stages are bitwise the unfused ones
    EXPECT_NEAR(cce[i], plain[i], 1e-5 * plain[i]) << "step " << i;
  }
  ASSERT_EQ(fusedSink.configChanges.size(), 2u);
  EXPECT_EQ(fusedSink.configChanges[0].key, "fusion.permute_into_experts");
  EXPECT_EQ(cceSink.configChanges[0].newValue, "\"cce\"");
}

// The CUDA kernel choices are live keys; the CPU backend (one kernel per op) takes a patch of
// them without changing its math, and the change is recorded like any other.
TEST(TrainerControl, KernelChoicesPatchLiveAndLeaveTheCpuMathAlone) {
  test::RecordingSink plainSink, kernelSink;
  const std::vector<double> plain = lossesWithPatch({"optim.lr=0.003"}, &plainSink);
  const std::vector<double> kernels = lossesWithPatch(
      {"optim.lr=0.003", "kernels.expert_glu=\"fused\"", "kernels.expert_wgrad_walk=\"static\""},
      &kernelSink);
  EXPECT_EQ(kernels, plain);
  ASSERT_EQ(kernelSink.configChanges.size(), 3u);
  EXPECT_EQ(kernelSink.configChanges[1].key, "kernels.expert_glu");
  EXPECT_EQ(kernelSink.configChanges[1].newValue, "\"fused\"");
  EXPECT_EQ(kernelSink.configChanges[2].key, "kernels.expert_wgrad_walk");
}

// loss.cce_filter_weight_grad reaches the loss head live: with the filter on, dropping the
// filtered tiles from the head's weight gradient too changes the following updates (not the loss
// of the step that takes the patch, whose forward is the same).
TEST(TrainerControl, CceFilterOfTheWeightGradientChangesLive) {
  const std::vector<std::string> filtered = {"loss.kind=\"cce\"", "loss.cce_vocab_block=16",
                                             "loss.cce_filter_eps=0.5"};
  std::vector<std::string> weights = filtered;
  weights.push_back("loss.cce_filter_weight_grad=true");
  test::RecordingSink dhSink, weightSink;
  const std::vector<double> dhOnly = lossesWithPatch(filtered, &dhSink);
  const std::vector<double> both = lossesWithPatch(weights, &weightSink);
  for (size_t i = 0; i <= 3; ++i) EXPECT_EQ(both[i], dhOnly[i]) << "step " << i;
  EXPECT_NE(both[5], dhOnly[5]);
  ASSERT_EQ(weightSink.configChanges.size(), 4u);
  EXPECT_EQ(weightSink.configChanges[3].key, "loss.cce_filter_weight_grad");
  EXPECT_EQ(weightSink.configChanges[3].newValue, "true");
}

TEST(TrainerControl, TopKChangesLiveAndRoutesFewerAssignments) {
  test::RecordingSink sink;
  lossesWithPatch({"moe.top_k=1"}, &sink);
  const int64_t tokens = hybridConfig().tokensPerStep();
  for (const ExpertLoadEvent& load : sink.loads) {
    int64_t total = 0;
    for (int64_t c : load.tokensPerExpert) total += c;
    EXPECT_EQ(total, tokens * (load.step < 3 ? 2 : 1)) << "step " << load.step;
  }
}

}  // namespace
}  // namespace moewb::engine
