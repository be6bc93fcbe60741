// The live re-tune plan (live_retune.h) on the tiny sample's config: a trial's settings split
// into the live patch, the keys that need a restart and those the run already has; a trial that
// names an unknown key or is not a settings list refused; the run's current config from its
// config_change rows, in order, and a row that cannot be applied named by step.
#include "moewb/tuner/live_retune.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "tuner_test_util.h"

namespace moewb::tuner {
namespace {

engine::RunConfig tiny() {
  auto loaded = engine::loadConfigFile(testing::tinyPath());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().toString();
  return loaded.isOk() ? *loaded : engine::RunConfig{};
}

TEST(LiveRetunePlan, SplitsLiveRestartAndUnchangedSettings) {
  const engine::RunConfig run = tiny();
  const auto& live = engine::Trainer::liveKeys();
  auto plan = planLiveRetune(
      run, "moe.capacity_factor=0.5,optim.lr=3e-3,parallel.ep=2,moe.drop_policy=position", live);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->send.size(), 2u);
  EXPECT_EQ(plan->send[0].assignment(), "moe.capacity_factor=0.5");
  EXPECT_EQ(plan->send[0].runValue, "0.0");
  EXPECT_EQ(plan->send[1].assignment(), "moe.drop_policy=\"position\"");
  ASSERT_EQ(plan->restart.size(), 1u);
  EXPECT_EQ(plan->restart[0].key, "parallel.ep");
  EXPECT_EQ(plan->restart[0].trialValue, "2");
  EXPECT_EQ(plan->restart[0].runValue, "1");
  EXPECT_EQ(plan->unchanged, std::vector<std::string>{"optim.lr"});  // 3e-3 == 0.003
}

TEST(LiveRetunePlan, TheLiveKeysGivenDecideWhatIsSent) {
  const engine::RunConfig run = tiny();
  // The keys a run's control socket answers: only what it lists is sent.
  auto plan = planLiveRetune(run, "optim.lr=1e-3,moe.capacity_factor=0.5", {"optim.lr"});
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->send.size(), 1u);
  EXPECT_EQ(plan->send[0].key, "optim.lr");
  ASSERT_EQ(plan->restart.size(), 1u);
  EXPECT_EQ(plan->restart[0].key, "moe.capacity_factor");
  auto none = planLiveRetune(run, "optim.lr=1e-3", {});
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->send.empty());
  EXPECT_EQ(none->restart.size(), 1u);
}

TEST(LiveRetunePlan, RefusesUnknownKeysAndTextThatIsNotASettingsList) {
  const engine::RunConfig run = tiny();
  const auto& live = engine::Trainer::liveKeys();
  auto unknown = planLiveRetune(run, "moe.capacity_factor=0.5,moe.no_such_key=1", live);
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("moe.no_such_key"), std::string::npos)
      << unknown.status().toString();
  auto notAList = planLiveRetune(run, "not a settings list", live);
  ASSERT_FALSE(notAList.isOk());
  EXPECT_EQ(notAList.status().code(), StatusCode::kDataLoss) << notAList.status().toString();
}

TEST(LiveRetunePlan, TheCurrentConfigFollowsTheConfigChangeRowsInOrder) {
  const engine::RunConfig run = tiny();
  std::vector<storage::ConfigChangeRow> rows(2);
  rows[0] = {12, 0, "optim.lr", "0.003", "0.001", "gui"};
  rows[1] = {14, 0, "optim.lr", "0.001", "0.002", "tuner"};
  auto now = configAfterChanges(run, rows);
  ASSERT_TRUE(now.isOk()) << now.status().toString();
  EXPECT_DOUBLE_EQ(now->optim.lr, 0.002);
  auto again = planLiveRetune(*now, "optim.lr=0.002", engine::Trainer::liveKeys());
  ASSERT_TRUE(again.isOk());
  EXPECT_TRUE(again->send.empty());
  EXPECT_EQ(again->unchanged, std::vector<std::string>{"optim.lr"});
  rows[1].newValue = "\"fast\"";
  auto bad = configAfterChanges(run, rows);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("step 14"), std::string::npos) << bad.status().toString();
}

}  // namespace
}  // namespace moewb::tuner
