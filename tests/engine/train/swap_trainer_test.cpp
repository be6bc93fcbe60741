// The CPU backend's simulated swap tier inside a training run: plan, copy and step events through
// the sink, the CPU model's numerics untouched, and live patches of [swap].
#include <gtest/gtest.h>

#include "../../source_dir.h"
#include "moewb/engine/trainer.h"
#include "recording_sink.h"

namespace moewb::engine {
namespace {

using Kind = TrainerCommand::Kind;

// Two small layers; a target well under the no-swap peak forces the policy to choose.
RunConfig swapConfig(const std::string& mode) {
  RunConfig config;
  config.model.numLayers = 3;
  config.model.seqLen = 16;
  config.data.batchSize = 2;
  config.run.threads = 1;
  config.swap.mode = mode;
  config.swap.minBytes = 0;
  config.swap.hbmTargetGb = 1e-6;  // 1 kB: never reached, so auto swaps what it can
  config.swap.pinnedBudgetGb = 1;
  return config;
}

std::vector<double> losses(const test::RecordingSink& sink) {
  std::vector<double> out;
  for (const auto& s : sink.steps) out.push_back(s.loss);
  return out;
}

TEST(SwapTrainer, AutoOnTheCpuEmitsPlanCopiesAndTotalsAndKeepsTheLosses) {
  test::RecordingSink off, on;
  auto plain = Trainer::create(swapConfig("off"), &off);
  ASSERT_TRUE(plain.isOk()) << plain.status().toString();
  ASSERT_TRUE((*plain)->run(4).isOk());
  auto swapped = Trainer::create(swapConfig("auto"), &on);
  ASSERT_TRUE(swapped.isOk()) << swapped.status().toString();
  ASSERT_TRUE((*swapped)->run(4).isOk());

  EXPECT_TRUE(off.swapPlans.empty());
  EXPECT_TRUE(off.swaps.empty());
  EXPECT_TRUE(off.swapSteps.empty());
  const std::vector<double> a = losses(off), b = losses(on);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);  // bitwise: the simulated tier touches no tensor

  // Step 0 measures; the plan comes at step 1 and swaps some tensors.
  ASSERT_FALSE(on.swapPlans.empty());
  const SwapPlanEvent& plan = on.swapPlans.front();
  EXPECT_EQ(plan.step, 1);
  EXPECT_EQ(plan.mode, "auto");
  EXPECT_GT(plan.fixedBytes, 0);
  EXPECT_EQ(plan.layerForwardMs.size(), 3u);
  int swappedTensors = 0;
  for (bool s : plan.tensorSwapped) swappedTensors += s;
  EXPECT_GT(swappedTensors, 0);
  ASSERT_FALSE(on.swaps.empty());
  for (const SwapEvent& e : on.swaps) {
    EXPECT_TRUE(e.simulated);
    EXPECT_GE(e.step, 1);
    EXPECT_LE(e.startNs, e.endNs);
    EXPECT_GT(e.bytes, 0);
  }
  ASSERT_EQ(on.swapSteps.size(), 3u);  // steps 1..3
  for (const SwapStepEvent& s : on.swapSteps) {
    EXPECT_TRUE(s.simulated);
    EXPECT_EQ(s.offloads, s.reloads);
    EXPECT_GT(s.swappedBytes, 0);
    EXPECT_LT(s.hbmPeakBytes, s.hbmPeakNoSwapBytes);
    EXPECT_EQ(s.pinnedCapacityBytes, 1'000'000'000);
  }
  // Order within a step: the plan before the step's phases, copies then totals before onStep.
  size_t plans = 0, steps = 0;
  bool copySinceTotals = false;
  for (auto kind : on.order) {
    if (kind == test::RecordingSink::Kind::kSwapPlan) {
      EXPECT_EQ(int64_t(steps), on.swapPlans[plans++].step);
    }
    if (kind == test::RecordingSink::Kind::kSwap) copySinceTotals = true;
    if (kind == test::RecordingSink::Kind::kSwapStep) {
      EXPECT_TRUE(copySinceTotals);
      copySinceTotals = false;
    }
    if (kind == test::RecordingSink::Kind::kStep) ++steps;
  }
}

TEST(SwapTrainer, LivePatchTurnsSwapOnAtTheNextStep) {
  test::RecordingSink sink;
  auto trainer = Trainer::create(swapConfig("off"), &sink);
  ASSERT_TRUE(trainer.isOk());
  Trainer& t = **trainer;
  ASSERT_TRUE(t.run(2).isOk());
  EXPECT_TRUE(sink.swapPlans.empty());
  auto patched = t.post({Kind::kApplyPatch, {"swap.mode=\"auto\""}, "test"});
  ASSERT_TRUE(t.run(2).isOk());
  ASSERT_TRUE(patched.get().isOk());
  EXPECT_EQ(t.config().swap.mode, "auto");
  // The off steps recorded the layer times, so auto plans at once: step 2.
  ASSERT_FALSE(sink.swapPlans.empty());
  EXPECT_EQ(sink.swapPlans.front().step, 2);
  ASSERT_FALSE(sink.swapSteps.empty());
  EXPECT_EQ(sink.swapSteps.front().step, 2);

  auto back = t.post({Kind::kApplyPatch, {"swap.mode=\"off\""}, "test"});
  ASSERT_TRUE(t.run(1).isOk());
  ASSERT_TRUE(back.get().isOk());
  EXPECT_EQ(sink.swapPlans.back().mode, "off");
  EXPECT_EQ(sink.swapSteps.back().step, 3);  // nothing for step 4
}

// The plan records the settings a re-plan needs: free lag, ops ("" when every op is allowed, as
// the key's "" means) and min_bytes.
TEST(SwapTrainer, PlanCarriesFreeLagOpsAndMinBytes) {
  RunConfig config = swapConfig("manual");
  config.swap.freeLagLayers = 2;
  config.swap.ops = "moe_act, expert_fc2";
  config.swap.minBytes = 64;
  test::RecordingSink sink;
  auto trainer = Trainer::create(config, &sink);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  ASSERT_TRUE((*trainer)->run(1).isOk());
  ASSERT_FALSE(sink.swapPlans.empty());
  EXPECT_EQ(sink.swapPlans.front().freeLagLayers, 2);
  EXPECT_EQ(sink.swapPlans.front().ops, "moe_act,expert_fc2");
  EXPECT_EQ(sink.swapPlans.front().minBytes, 64);

  config.swap.ops = "";
  test::RecordingSink all;
  trainer = Trainer::create(config, &all);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  ASSERT_TRUE((*trainer)->run(1).isOk());
  ASSERT_FALSE(all.swapPlans.empty());
  EXPECT_EQ(all.swapPlans.front().ops, "");
}

// The sample of docs/SWAP.md does what its comments say: auto has to choose and reaches the target.
TEST(SwapTrainer, TheCpuSampleForcesAChoice) {
  auto config = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/swap_cpu.toml");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  config->run.threads = 1;
  test::RecordingSink sink;
  auto trainer = Trainer::create(config.value(), &sink);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  ASSERT_TRUE((*trainer)->run(2).isOk());
  ASSERT_FALSE(sink.swapPlans.empty());
  const SwapPlanEvent& plan = sink.swapPlans.front();
  EXPECT_GT(plan.predictedPeakNoSwapBytes, plan.hbmTargetBytes) << plan.summary;
  EXPECT_LE(plan.predictedPeakBytes, plan.hbmTargetBytes) << plan.summary;
  int64_t kept = 0;
  for (bool s : plan.tensorSwapped) kept += !s;
  EXPECT_GT(kept, 0) << plan.summary;
}

}  // namespace
}  // namespace moewb::engine
