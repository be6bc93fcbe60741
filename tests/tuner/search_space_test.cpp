// SearchSpace: knobs from the engine's key table; every candidate the space offers as valid
// passes the engine's validation, every other one carries the engine's refusal; user values are
// checked against the key's bounds.
#include "moewb/tuner/search_space.h"

#include <gtest/gtest.h>

#include "tuner_test_util.h"

namespace moewb::tuner {
namespace {

using testing::quickTiny;

TEST(SearchSpace, EveryOfferedCandidateIsValidAndEveryRefusalIsTheEngines) {
  engine::RunConfig base = quickTiny();
  base.parallel.worldSize = 4;
  base.model.mixerPattern = "AK";
  // Every tunable key with its generated values, in a few groups so each space stays small.
  const std::vector<std::vector<std::string>> groups = {
      {"parallel.ep", "parallel.fsdp", "parallel.replicate", "parallel.a2a_chunks"},
      {"fusion.permute_into_experts", "fusion.combine_into_experts", "parallel.ep",
       "moe.capacity_factor", "moe.drop_policy"},
      {"swap.mode", "swap.prefetch_layers", "swap.recompute_ops", "parallel.ep"},
      {"loss.kind", "loss.chunk_tokens", "loss.cce_vocab_block", "loss.cce_filter_eps",
       "kda.chunk_size", "kda.keep_intermediates", "run.threads"},
      {"kernels.expert_glu", "kernels.expert_wgrad_walk", "data.micro_batch_size"},
  };
  size_t invalid = 0;
  for (const auto& group : groups) {
    std::vector<KnobSpec> specs;
    for (const auto& key : group) specs.push_back({key, {}});
    auto space = buildSearchSpace(base, specs);
    ASSERT_TRUE(space.isOk()) << space.status().toString();
    ASSERT_FALSE(space->candidates.empty());
    EXPECT_TRUE(space->candidates.front().valid());
    for (size_t k = 0; k < space->knobs.size(); ++k) {  // the base is candidate 0
      EXPECT_EQ(space->candidates.front().settings[k].second, space->knobs[k].values.front());
    }
    for (const Candidate& c : space->candidates) {
      engine::RunConfig config = base;
      for (const auto& [key, value] : c.settings) {
        ASSERT_TRUE(engine::applyOverride(config, key + "=" + value).isOk()) << key << "=" << value;
      }
      const Status engineSays = engine::validateConfig(config);
      EXPECT_EQ(c.valid(), engineSays.isOk()) << settingsText(c.settings);
      if (!c.valid()) {
        EXPECT_EQ(c.rejection, engineSays.message());
        ++invalid;
      }
    }
  }
  EXPECT_GT(invalid, 0u);  // e.g. fusion with ep > 1, fsdp * replicate != world_size
}

TEST(SearchSpace, GeneratedValuesStayInsideTheKeyBounds) {
  engine::RunConfig base = quickTiny();
  base.parallel.worldSize = 2;
  for (const std::string& key : tunableKeys()) {
    auto space = buildSearchSpace(base, {{key, {}}});
    ASSERT_TRUE(space.isOk()) << key << ": " << space.status().toString();
    const engine::ConfigKeyInfo* info = nullptr;
    for (const auto& i : engine::configKeys()) {
      if (i.key == key) info = &i;
    }
    ASSERT_NE(info, nullptr);
    ASSERT_GE(space->knobs.front().values.size(), 2u) << key;
    for (const std::string& v : space->knobs.front().values) {
      if (info->type == "string") {
        EXPECT_TRUE(info->acceptsString(v)) << key << " " << v;
      } else if (info->type == "integer" || info->type == "float") {
        EXPECT_TRUE(info->acceptsNumber(std::stod(v))) << key << " " << v;
      }
    }
  }
}

// data.micro_batch_size: 0 (the whole batch) and the sizes that cut the rank's batch into the
// four smallest numbers of equal micro-batches; the engine refuses them beside swap.
TEST(SearchSpace, MicroBatchSizesCutTheRankBatchEvenly) {
  engine::RunConfig base = quickTiny();
  base.data.batchSize = 24;
  base.parallel.worldSize = 2;  // 12 sequences a rank: 2, 3, 4 and 6 micro-batches
  auto space = buildSearchSpace(base, {{"data.micro_batch_size", {}}});
  ASSERT_TRUE(space.isOk()) << space.status().toString();
  EXPECT_EQ(space->knobs[0].values, (std::vector<std::string>{"0", "6", "4", "3", "2"}));
  EXPECT_TRUE(space->knobs[0].gated);
  EXPECT_EQ(space->validCount(), 5u);

  base.parallel.worldSize = 1;
  base.data.batchSize = 4;
  auto withSwap = buildSearchSpace(base, {{"data.micro_batch_size", {}}, {"swap.mode", {}}});
  ASSERT_TRUE(withSwap.isOk()) << withSwap.status().toString();
  for (const Candidate& c : withSwap->candidates) {
    const bool split = c.settings[0].second != "0";
    const bool swaps = c.settings[1].second != "off";
    EXPECT_EQ(c.valid(), !(split && swaps)) << settingsText(c.settings);
    if (!c.valid()) {
      EXPECT_NE(c.rejection.find("data.micro_batch_size"), std::string::npos) << c.rejection;
    }
  }
}

TEST(SearchSpace, RefusesUnknownKeysAndValuesOutsideTheBounds) {
  const engine::RunConfig base = quickTiny();
  auto notTunable = buildSearchSpace(base, {{"model.d_model", {}}});
  ASSERT_FALSE(notTunable.isOk());
  EXPECT_NE(notTunable.status().message().find("not a tunable key"), std::string::npos);
  EXPECT_NE(notTunable.status().message().find("fusion.permute_into_experts"), std::string::npos);
  auto badChoice = buildSearchSpace(base, {{"loss.kind", {"dense", "fancy"}}});
  ASSERT_FALSE(badChoice.isOk());
  EXPECT_NE(badChoice.status().message().find("\"cce\""), std::string::npos)
      << badChoice.status().message();
  auto badNumber = buildSearchSpace(base, {{"moe.capacity_factor", {"-1"}}});
  ASSERT_FALSE(badNumber.isOk());
  EXPECT_NE(badNumber.status().message().find("moe.capacity_factor"), std::string::npos);
  auto badBool = buildSearchSpace(base, {{"fusion.permute_into_experts", {"yes"}}});
  EXPECT_FALSE(badBool.isOk());
}

TEST(SearchSpace, UserValuesAreCanonicalAndTheBaseComesFirst) {
  const engine::RunConfig base = quickTiny();
  auto space = buildSearchSpace(
      base, {{"moe.capacity_factor", {"1.25", "2", "2.0"}}, {"loss.kind", {"cce"}}});
  ASSERT_TRUE(space.isOk()) << space.status().toString();
  ASSERT_EQ(space->knobs.size(), 2u);
  EXPECT_EQ(space->knobs[0].values.size(), 3u);  // 0.0 (base), 1.25, 2.0 ("2" == "2.0")
  EXPECT_FALSE(space->knobs[0].gated);
  EXPECT_TRUE(space->knobs[1].gated);
  EXPECT_EQ(space->candidates.size(), 6u);
  // References (no gated knob away from the base) before the candidates the gate checks.
  bool seenGated = false;
  for (const Candidate& c : space->candidates) {
    const bool gatedMove = c.settings[1].second != "dense";
    EXPECT_FALSE(seenGated && !gatedMove) << settingsText(c.settings);
    seenGated = seenGated || gatedMove;
  }
}

TEST(SearchSpace, KnobListsAndSettingsTextRoundTrip) {
  auto knobs = parseKnobList("fusion.permute_into_experts,moe.capacity_factor=0|1.25");
  ASSERT_TRUE(knobs.isOk());
  ASSERT_EQ(knobs->size(), 2u);
  EXPECT_TRUE((*knobs)[0].values.empty());
  EXPECT_EQ((*knobs)[1].values, (std::vector<std::string>{"0", "1.25"}));
  EXPECT_FALSE(parseKnobList("a,,b").isOk());
  EXPECT_FALSE(parseKnobList("loss.kind=").isOk());
  EXPECT_FALSE(parseKnobList("loss.kind,loss.kind").isOk());
  const Settings s = {{"loss.kind", "cce"}, {"parallel.ep", "2"}};
  auto back = parseSettingsText(settingsText(s));
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(*back, s);
  EXPECT_FALSE(parseSettingsText("nonsense").isOk());
}

}  // namespace
}  // namespace moewb::tuner
