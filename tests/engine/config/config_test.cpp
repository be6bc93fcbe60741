// Tests of config parsing, overrides, validation and serialisation (engine/config/config*.cpp).
#include "moewb/engine/config.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "../../source_dir.h"

namespace moewb::engine {
namespace {

RunConfig parseOk(const std::string& text) {
  auto result = parseConfigToml(text, "test.toml");
  EXPECT_TRUE(result.isOk()) << result.status().toString();
  return result.isOk() ? result.value() : RunConfig{};
}

std::string parseError(const std::string& text) {
  auto result = parseConfigToml(text, "test.toml");
  EXPECT_FALSE(result.isOk());
  return result.isOk() ? "" : result.status().message();
}

TEST(Config, EmptyFileIsTheValidDefault) {
  RunConfig config = parseOk("");
  EXPECT_EQ(config, RunConfig{});
  EXPECT_TRUE(validateConfig(config).isOk());
}

TEST(Config, ReadsEveryTypeOfKey) {
  RunConfig c = parseOk(
      "[run]\nname = \"x\"\nseed = 7\n[model]\nd_model = 32\n[moe]\ntop_k = 1\n"
      "[data]\nskew = 2\n[optim]\nlr = 1e-3\n");
  EXPECT_EQ(c.run.name, "x");
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.model.dModel, 32);
  EXPECT_EQ(c.moe.topK, 1);
  EXPECT_DOUBLE_EQ(c.data.skew, 2.0);  // an integer is accepted for a float key
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
}

TEST(Config, UnknownKeyNamesKeyLineAndAcceptedKeys) {
  std::string msg = parseError("[moe]\n\ntopk = 2\n");
  EXPECT_NE(msg.find("test.toml:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("moe.topk"), std::string::npos) << msg;
  EXPECT_NE(msg.find("top_k"), std::string::npos) << msg;
}

TEST(Config, UnknownSectionAndWrongTypeAndBadToml) {
  EXPECT_NE(parseError("[mode]\nx = 1\n").find("unknown section [mode]"), std::string::npos);
  std::string msg = parseError("[moe]\ntop_k = \"two\"\n");
  EXPECT_NE(msg.find("moe.top_k must be an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.toml:2"), std::string::npos) << msg;
}

TEST(Config, BadTomlSyntax) {
  EXPECT_NE(parseError("[moe\n").find("not valid TOML"), std::string::npos);
}

TEST(Config, ValidationNamesTheKeyAndRange) {
  RunConfig c;
  c.moe.topK = 9;
  Status s = validateConfig(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("moe.top_k"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1..8"), std::string::npos) << s.message();

  c = RunConfig{};
  c.model.numHeads = 5;
  EXPECT_NE(validateConfig(c).message().find("model.num_heads"), std::string::npos);

  c = RunConfig{};
  c.model.dModel = 0;
  EXPECT_NE(validateConfig(c).message().find("model.d_model = 0"), std::string::npos);

  c = RunConfig{};
  c.run.backend = "tpu";
  EXPECT_NE(validateConfig(c).message().find("\"cpu\" | \"cuda\" | \"auto\""), std::string::npos);

  c = RunConfig{};
  c.optim.lr = 0;
  EXPECT_NE(validateConfig(c).message().find("optim.lr"), std::string::npos);
}

TEST(Config, OverridesGoThroughTheSameChecks) {
  RunConfig c;
  EXPECT_TRUE(applyOverride(c, "moe.top_k=1").isOk());
  EXPECT_EQ(c.moe.topK, 1);
  EXPECT_TRUE(applyOverride(c, "run.name=demo").isOk());
  EXPECT_EQ(c.run.name, "demo");
  EXPECT_TRUE(applyOverride(c, "optim.lr=0.5").isOk());
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.5);
  EXPECT_NE(applyOverride(c, "moe.topk=1").message().find("top_k"), std::string::npos);
  EXPECT_NE(applyOverride(c, "moe.top_k=two").message().find("integer"), std::string::npos);
  EXPECT_FALSE(applyOverride(c, "noequals").isOk());
  EXPECT_TRUE(applyOverride(c, "moe.top_k=99").isOk());  // type ok; range is validation's job
  EXPECT_FALSE(validateConfig(c).isOk());
}

TEST(Config, TomlRoundTripIsExact) {
  RunConfig c;
  c.run.name = "quote\"and\\slash";
  c.optim.lr = 0.1 + 0.2;
  c.data.skew = 1.0 / 3.0;
  c.run.seed = 18446744073709ull;
  auto back = parseConfigToml(toToml(c), "roundtrip");
  ASSERT_TRUE(back.isOk()) << back.status().toString() << "\n" << toToml(c);
  EXPECT_EQ(back.value(), c);
}

// [kernels]: the CUDA kernel choices parse, default to auto and refuse a name they do not know
// with the accepted ones.
TEST(Config, KernelChoicesParseAndRefuseUnknownNames) {
  auto good = parseConfigToml(
      "[kernels]\nexpert_glu = \"fused\"\nexpert_wgrad_walk = \"static\"\n", "kernels");
  ASSERT_TRUE(good.isOk()) << good.status().toString();
  EXPECT_EQ(good->kernels.expertGlu, "fused");
  EXPECT_EQ(good->kernels.expertWgradWalk, "static");
  EXPECT_EQ(RunConfig().kernels.expertGlu, "auto");
  EXPECT_TRUE(validateConfig(*good).isOk());
  auto bad = parseConfigToml("[kernels]\nexpert_glu = \"fast\"\n", "kernels");
  ASSERT_TRUE(bad.isOk()) << bad.status().toString();  // the TOML is fine; the value is not
  const Status refused = validateConfig(*bad);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.message().find("kernels.expert_glu"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("pingpong"), std::string::npos) << refused.message();
}

TEST(Config, KeyTableListsEveryKeyWithDefaults) {
  const auto& keys = configKeys();
  EXPECT_GE(keys.size(), 25u);
  bool sawTopK = false;
  for (const auto& k : keys) {
    if (k.key == "moe.top_k") {
      sawTopK = true;
      EXPECT_EQ(k.defaultValue, "2");
      EXPECT_EQ(k.type, "integer");
    }
  }
  EXPECT_TRUE(sawTopK);
}

// Overrides that make room for a key's boundary values: without them the boundary would break a
// rule between keys at another key's default (moe.top_k = 4096 > moe.num_experts = 8). A rule
// added to validateConfig that refuses a boundary value fails BoundsAgreeWithValidation until it
// is either made room for here or written into the key's bounds.
const std::map<std::string, std::vector<std::string>>& roomFor() {
  static const std::map<std::string, std::vector<std::string>> kRoom = {
      {"model.vocab_size", {"data.num_topics=1"}},
      {"model.d_model", {"model.num_heads=1"}},
      {"model.num_heads", {"model.d_model=1024"}},
      {"moe.num_experts", {"moe.top_k=1"}},
      {"moe.top_k", {"moe.num_experts=4096"}},
      {"moe.num_groups", {"moe.num_experts=4096", "moe.top_k=1"}},
      {"moe.topk_groups", {"moe.num_experts=4096", "moe.num_groups=4096", "moe.top_k=1"}},
      {"moe.latent_dim", {"model.d_model=65536"}},
      {"data.num_topics", {"model.vocab_size=1048576"}},
      {"data.image_size", {"data.patch_size=4096"}},
      {"data.micro_batch_size", {"data.batch_size=1048576"}},  // 2^20 x 64 tokens = 2^26
      {"kda.num_heads", {"model.d_model=1024"}},
      {"sparse.kv_heads", {"model.num_heads=1024", "model.d_model=1024"}},
      {"parallel.world_size", {"data.batch_size=1024"}},
      {"parallel.ep", {"parallel.world_size=1024", "data.batch_size=1024", "moe.num_experts=1024"}},
      {"parallel.fsdp", {"parallel.world_size=1024", "data.batch_size=1024"}},
      {"parallel.replicate", {"parallel.world_size=1024", "data.batch_size=1024"}},
      {"parallel.a2a_chunks", {"moe.num_experts=4096"}},
  };
  return kRoom;
}

// String keys without choices whose form validateConfig checks among the rules between keys (see
// ConfigKeyInfo): their accepted text says "any string", so only their default is tried.
const std::set<std::string> kFormCheckedElsewhere = {"model.mixer_pattern", "swap.ops",
                                                     "swap.recompute_ops"};

// Number keys whose max is also bounded by this machine (validateConfig checks it against the
// physical memory): their table max is only a ceiling, so "at max" is not tried.
const std::set<std::string> kMachineBoundedMax = {"swap.pinned_budget_gb"};

// validateConfig's verdict on `info.key = valueText` over the defaults and the key's room. The
// override's own refusal (wrong type, too large for the field) counts as a refusal.
Status verdict(const ConfigKeyInfo& info, const std::string& valueText) {
  RunConfig config;
  auto room = roomFor().find(info.key);
  if (room != roomFor().end()) {
    for (const auto& assignment : room->second) {
      Status applied = applyOverride(config, assignment);
      if (!applied.isOk()) return applied;
    }
  }
  MOEWB_RETURN_IF_ERROR(applyOverride(config, info.key + "=" + valueText));
  return validateConfig(config);
}

// A number as TOML text: integers exactly, floats with every digit (read back bit for bit).
std::string numberText(const ConfigKeyInfo& info, double value) {
  char buf[40];
  if (info.integer) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", value);
  std::string text = buf;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

void expectAccepted(const ConfigKeyInfo& info, const std::string& valueText, const char* what) {
  Status s = verdict(info, valueText);
  EXPECT_TRUE(s.isOk()) << info.key << " = " << valueText << " (" << what << ", accepted "
                        << info.accepted << ") was refused: " << s.message();
}

// Refused by the key's own check: the message names the key and its accepted text.
void expectRefused(const ConfigKeyInfo& info, const std::string& valueText, const char* what) {
  Status s = verdict(info, valueText);
  EXPECT_FALSE(s.isOk()) << info.key << " = " << valueText << " (" << what << ", accepted "
                         << info.accepted << ") was accepted";
  if (s.isOk()) return;
  EXPECT_NE(s.message().find(info.key), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("accepted: " + info.accepted), std::string::npos)
      << info.key << " = " << valueText << " refused by another rule: " << s.message();
}

void checkNumberBounds(const ConfigKeyInfo& info) {
  ASSERT_TRUE(info.min.has_value()) << info.key;
  EXPECT_TRUE(info.choices.empty()) << info.key;
  const double lo = *info.min;
  const double below = info.integer ? lo - 1 : std::nextafter(lo, -HUGE_VAL);
  if (info.minExclusive) {
    ASSERT_FALSE(info.integer) << info.key << ": an integer's bound is inclusive";
    expectRefused(info, numberText(info, lo), "at the exclusive min");
    expectAccepted(info, numberText(info, std::nextafter(lo, HUGE_VAL)), "just above min");
  } else {
    expectAccepted(info, numberText(info, lo), "at min");
    expectRefused(info, numberText(info, below), "just below min");
  }
  if (info.max) {
    ASSERT_LE(lo, *info.max) << info.key;
    const double above = info.integer ? *info.max + 1 : std::nextafter(*info.max, HUGE_VAL);
    if (!kMachineBoundedMax.contains(info.key)) {
      expectAccepted(info, numberText(info, *info.max), "at max");
    }
    expectRefused(info, numberText(info, above), "just above max");
  } else {
    // No max: as large as the field holds, 32-bit or 64-bit (the largest TOML integer).
    ASSERT_TRUE(info.integer) << info.key << ": a float key needs a max";
    expectAccepted(info, "2147483647", "the largest 32-bit integer");
    Status wide = verdict(info, "9223372036854775807");
    if (!wide.isOk()) {
      EXPECT_NE(wide.message().find("is out of range; accepted: " + info.accepted),
                std::string::npos)
          << info.key << ": only the field's width may refuse it: " << wide.message();
      expectRefused(info, "2147483648", "past a 32-bit field");
    }
    expectRefused(info, "9223372036854775808", "past the largest TOML integer");
  }
  if (info.integer && (!info.max || lo + 1 <= *info.max)) {
    expectRefused(info, numberText(info, lo) + ".5", "not a whole number");
  }
}

// For every key the typed bounds agree with validateConfig: each boundary is accepted and the
// value just outside it refused by the key's own check, every choice is accepted and anything
// else refused, and the accepted text is the one written from the bounds.
TEST(ConfigKeyInfo, BoundsAgreeWithValidation) {
  const auto& keys = configKeys();
  ASSERT_GE(keys.size(), 75u);
  for (const auto& info : keys) {
    SCOPED_TRACE(info.key);
    EXPECT_TRUE(verdict(info, info.defaultValue).isOk()) << "the room for " << info.key;
    if (info.type == "integer" || info.type == "float") {
      EXPECT_EQ(info.integer, info.type == "integer");
      checkNumberBounds(info);
    } else if (info.type == "string") {
      EXPECT_FALSE(info.min || info.max || info.integer);
      for (const auto& choice : info.choices) {
        expectAccepted(info, "\"" + choice + "\"", "a choice");
      }
      if (!info.choices.empty()) {
        expectRefused(info, "\"not-a-choice\"", "not a choice");
        std::string upper = info.choices.front();
        for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
        expectRefused(info, "\"" + upper + "\"", "a choice in other case");
        expectRefused(info, "1", "a number");
      } else if (!kFormCheckedElsewhere.count(info.key)) {
        expectAccepted(info, "\"any text, at all\"", "any string");
      }
    } else {
      ASSERT_EQ(info.type, "boolean");
      EXPECT_FALSE(info.min || info.max || info.integer || !info.choices.empty());
      expectAccepted(info, "true", "true");
      expectAccepted(info, "false", "false");
      expectRefused(info, "1", "a number");
    }
  }
}

// The helpers agree with the bounds they describe, and a few keys read as documented.
TEST(ConfigKeyInfo, TypedBoundsOfKnownKeys) {
  std::map<std::string, ConfigKeyInfo> byKey;
  for (const auto& info : configKeys()) byKey[info.key] = info;

  const ConfigKeyInfo& topK = byKey.at("moe.top_k");
  EXPECT_TRUE(topK.integer);
  EXPECT_EQ(topK.min, 1.0);
  EXPECT_EQ(topK.max, 4096.0);
  EXPECT_FALSE(topK.minExclusive);
  EXPECT_EQ(topK.accepted, "1..4096");
  EXPECT_TRUE(topK.acceptsNumber(4096));
  EXPECT_FALSE(topK.acceptsNumber(4097));
  EXPECT_FALSE(topK.acceptsNumber(1.5));
  EXPECT_FALSE(topK.acceptsString("1"));

  const ConfigKeyInfo& lr = byKey.at("optim.lr");
  EXPECT_FALSE(lr.integer);
  EXPECT_TRUE(lr.minExclusive);
  EXPECT_EQ(lr.min, 0.0);
  EXPECT_EQ(lr.max, 10.0);
  EXPECT_EQ(lr.accepted, "> 0 and <= 10");
  EXPECT_FALSE(lr.acceptsNumber(0));
  EXPECT_TRUE(lr.acceptsNumber(1e-12));
  EXPECT_FALSE(lr.acceptsNumber(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(lr.acceptsNumber(std::nan("")));

  const ConfigKeyInfo& steps = byKey.at("run.steps");
  EXPECT_EQ(steps.min, 1.0);
  EXPECT_FALSE(steps.max.has_value());
  EXPECT_EQ(steps.accepted, "1..");
  EXPECT_EQ(byKey.at("optim.warmup_steps").accepted, "0..");

  const ConfigKeyInfo& backend = byKey.at("run.backend");
  EXPECT_EQ(backend.choices, (std::vector<std::string>{"cpu", "cuda", "auto"}));
  EXPECT_EQ(backend.accepted, "\"cpu\" | \"cuda\" | \"auto\"");
  EXPECT_FALSE(backend.min || backend.max);
  EXPECT_TRUE(backend.acceptsString("cuda"));
  EXPECT_FALSE(backend.acceptsString("CUDA"));
  EXPECT_FALSE(backend.acceptsNumber(1));

  EXPECT_TRUE(byKey.at("run.name").acceptsString("anything"));
  EXPECT_EQ(byKey.at("run.name").accepted, "any string");
  EXPECT_EQ(byKey.at("lora.enabled").accepted, "true | false");
  EXPECT_FALSE(byKey.at("lora.enabled").acceptsString("true"));
}

// A seed set in code past the largest TOML integer could not be read back from the trace.
TEST(Config, SeedMustFitATomlInteger) {
  RunConfig config;
  config.run.seed = uint64_t(std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(validateConfig(config).isOk());
  config.run.seed += 1;
  Status s = validateConfig(config);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("run.seed"), std::string::npos) << s.message();
}

TEST(Config, ShippedSampleConfigsAreValid) {
  std::filesystem::path dir = std::filesystem::path(moewb::test::sourceDir()) / "samples" / "configs";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    auto config = loadConfigFile(entry.path().string());
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    EXPECT_TRUE(validateConfig(config.value()).isOk()) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 1);
}

TEST(Config, MissingFileIsNotFound) {
  auto r = loadConfigFile("/nonexistent/x.toml");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/x.toml"), std::string::npos);
}

}  // namespace
}  // namespace moewb::engine
