// Tests of the [swap] section: its keys, their bounds and cross-key checks, each refusal naming
// the key (engine/config/config_keys.cpp, validateConfig in engine/config/config.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include "moewb/engine/config.h"
#include "moewb/engine/swap.h"

namespace moewb::engine {
namespace {

// The validation message of `toml` (parse or validate), or "" when it is accepted.
std::string refusal(const std::string& toml) {
  auto parsed = parseConfigToml(toml, "swap.toml");
  if (!parsed.isOk()) return parsed.status().message();
  Status valid = validateConfig(parsed.value());
  return valid.isOk() ? "" : valid.message();
}

TEST(SwapConfig, AGoodSectionIsAccepted) {
  EXPECT_EQ(refusal("[swap]\nmode = \"auto\"\nops = \"moe_act, expert_fc2\"\nmin_bytes = 0\n"
                    "hbm_target_gb = 0.5\npinned_budget_gb = 0.25\nprefetch_layers = 2\n"),
            "");
  auto parsed = parseConfigToml("[swap]\nmode = \"manual\"\nbidir_gbps = 20.5\n", "t");
  ASSERT_TRUE(parsed.isOk());
  EXPECT_EQ(parsed->swap.mode, "manual");
  EXPECT_DOUBLE_EQ(parsed->swap.bidirGbps, 20.5);
  // Round trip through toToml.
  auto again = parseConfigToml(toToml(parsed.value()), "round trip");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->swap, parsed->swap);
}

TEST(SwapConfig, AnUnknownOpNamesTheKeyTheEntryAndTheAcceptedNames) {
  const std::string m = refusal("[swap]\nmode = \"manual\"\nops = \"moe_act, qkv\"\n");
  EXPECT_NE(m.find("swap.ops"), std::string::npos) << m;
  EXPECT_NE(m.find("\"qkv\""), std::string::npos) << m;
  for (const auto& name : swapOpNames()) EXPECT_NE(m.find(name), std::string::npos) << m;
  EXPECT_NE(refusal("[swap]\nops = \"moe_act,,expert_fc2\"\n").find("swap.ops"),
            std::string::npos);
}

TEST(SwapConfig, ABudgetAboveHostMemoryIsRefused) {
  const double hostGb = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / 1e9;
  ASSERT_GT(hostGb, 0);
  const std::string m =
      refusal("[swap]\npinned_budget_gb = " + std::to_string(int64_t(hostGb * 2) + 1) + "\n");
  EXPECT_NE(m.find("swap.pinned_budget_gb"), std::string::npos) << m;
  EXPECT_NE(m.find("physical memory"), std::string::npos) << m;
}

TEST(SwapConfig, NegativeSizesAndBadModesAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"min_bytes = -1", "swap.min_bytes"},
      {"hbm_target_gb = -2.0", "swap.hbm_target_gb"},
      {"pinned_budget_gb = -1.0", "swap.pinned_budget_gb"},
      {"prefetch_layers = -1", "swap.prefetch_layers"},
      {"d2h_gbps = 0.0", "swap.d2h_gbps"},
      {"mode = \"sometimes\"", "swap.mode"},
  };
  for (const auto& [line, key] : cases) {
    const std::string m = refusal("[swap]\n" + line + "\n");
    EXPECT_NE(m.find(key), std::string::npos) << line << ": " << m;
  }
  EXPECT_NE(refusal("[swap]\nmode = \"sometimes\"\n").find("\"auto\""), std::string::npos);
}

TEST(SwapConfig, RecomputeOpsNameTheKeyAndNeedTheCudaBackend) {
  const std::string bad = refusal("[run]\nbackend = \"cuda\"\n[swap]\nmode = \"manual\"\n"
                                  "recompute_ops = \"attn_norm\"\n");
  EXPECT_NE(bad.find("swap.recompute_ops"), std::string::npos) << bad;
  EXPECT_NE(bad.find("\"attn_norm\""), std::string::npos) << bad;
  for (const auto& name : swapRecomputeOpNames()) EXPECT_NE(bad.find(name), std::string::npos);
  EXPECT_EQ(refusal("[run]\nbackend = \"cuda\"\n[swap]\nmode = \"auto\"\n"
                    "recompute_ops = \"moe_act, expert_fc2\"\n"),
            "");
  const std::string cpu =
      refusal("[swap]\nmode = \"manual\"\nrecompute_ops = \"moe_act\"\n");  // backend cpu
  EXPECT_NE(cpu.find("swap.recompute_ops"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("CUDA backend only"), std::string::npos) << cpu;
  EXPECT_EQ(refusal("[swap]\nmode = \"off\"\nrecompute_ops = \"moe_act\"\n"), "");
  SwapSection section;
  section.recomputeOps = " expert_fc2 ,moe_act";
  EXPECT_EQ(swapSettingsFrom(section, 0).recomputeOps,
            (std::vector<std::string>{"expert_fc2", "moe_act"}));
}

TEST(SwapConfig, SwapWithSeveralRanksIsRefusedOnEveryBackend) {
  for (const char* backend : {"cpu", "cuda", "auto"}) {
    const std::string m = refusal(std::string("[run]\nbackend = \"") + backend +
                                  "\"\n[swap]\nmode = \"auto\"\n[parallel]\nworld_size = 2\n"
                                  "[data]\nbatch_size = 8\n");
    EXPECT_NE(m.find("swap runs on one rank only"), std::string::npos) << backend << ": " << m;
    EXPECT_NE(m.find("swap.mode"), std::string::npos) << m;
  }
  EXPECT_EQ(refusal("[swap]\nmode = \"off\"\n[parallel]\nworld_size = 2\n"), "");
}

}  // namespace
}  // namespace moewb::engine
