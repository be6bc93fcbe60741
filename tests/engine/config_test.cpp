// Tests of config parsing, overrides, validation and serialisation (engine/config/config*.cpp).
#include "moewb/engine/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include "../source_dir.h"

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
