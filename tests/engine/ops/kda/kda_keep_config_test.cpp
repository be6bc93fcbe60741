// kda.keep_intermediates (issue 15): the config key (declared, typed, refused with the accepted
// values, not live-patchable), what it changes in the estimates (the kept device bytes; nothing
// on the CPU backend, whose KDA backward always recomputes) and the bitwise CPU equality. The
// GPU side (same bits, more activation bytes) is tests/engine_cuda/model/layers/kda_keep_cuda_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "moewb/engine/config.h"
#include "train/memory_estimate.h"

namespace moewb::engine {
namespace {

const ConfigKeyInfo* keyInfo(const std::string& key) {
  for (const auto& info : configKeys()) {
    if (info.key == key) return &info;
  }
  return nullptr;
}

TEST(KdaKeepIntermediates, IsABooleanKeyOffByDefault) {
  const ConfigKeyInfo* info = keyInfo("kda.keep_intermediates");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->type, "boolean");
  EXPECT_EQ(info->accepted, "true | false");
  EXPECT_EQ(info->defaultValue, "false");
  EXPECT_NE(info->description.find("CPU"), std::string::npos) << info->description;
  EXPECT_FALSE(RunConfig{}.kda.keepIntermediates);
}

TEST(KdaKeepIntermediates, AcceptsTrueAndFalseInTomlAndOverrides) {
  auto on = parseConfigToml("[kda]\nkeep_intermediates = true\n", "test.toml");
  ASSERT_TRUE(on.isOk()) << on.status().toString();
  EXPECT_TRUE(on.value().kda.keepIntermediates);
  EXPECT_TRUE(validateConfig(on.value()).isOk());
  RunConfig c = on.value();
  ASSERT_TRUE(applyOverride(c, "kda.keep_intermediates=false").isOk());
  EXPECT_FALSE(c.kda.keepIntermediates);
  ASSERT_TRUE(applyOverride(c, "kda.keep_intermediates=true").isOk());
  EXPECT_TRUE(c.kda.keepIntermediates);
  // The written config reads back with the key set.
  auto back = parseConfigToml(toToml(c), "back.toml");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(back.value().kda.keepIntermediates);
}

TEST(KdaKeepIntermediates, RefusesOtherValuesNamingTheAcceptedOnes) {
  for (const char* text : {"[kda]\nkeep_intermediates = \"auto\"\n",
                           "[kda]\nkeep_intermediates = 1\n"}) {
    auto bad = parseConfigToml(text, "test.toml");
    ASSERT_FALSE(bad.isOk()) << text;
    const std::string msg = bad.status().message();
    EXPECT_NE(msg.find("kda.keep_intermediates"), std::string::npos) << msg;
    EXPECT_NE(msg.find("true | false"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.toml:2"), std::string::npos) << msg;
  }
  RunConfig c;
  const Status s = applyOverride(c, "kda.keep_intermediates=yes");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("kda.keep_intermediates"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("true | false"), std::string::npos) << s.message();
  EXPECT_FALSE(c.kda.keepIntermediates);
}

// Two KDA layers of the measured shape (B=2 T=8192 H=16 K=V=128 C=64): per layer fp32
// 5 [B*H*T, 128] rows, e^{G_C} [B*H*NC, 128] and the states [B*H*NC, 128, 128].
TEST(KdaKeepIntermediates, EstimateCountsTheKeptBytesOfEachKdaLayer) {
  RunConfig config;
  config.model.dModel = 2048;
  config.model.numHeads = 16;
  config.model.numLayers = 3;
  config.model.seqLen = 8192;
  config.data.batchSize = 2;
  config.model.mixerPattern = "KKA";
  config.kda.chunkSize = 64;
  EXPECT_EQ(estimateKdaKeptBytes(ModelDims::fromConfig(config)), 0.0);  // off: nothing kept
  config.kda.keepIntermediates = true;
  const double slots = 2.0 * 16 * (8192 / 64), rows = slots * 64;
  const double perLayer = 4.0 * (rows * 5 * 128 + slots * 128 * (1 + 128));
  EXPECT_EQ(perLayer, 941621248.0);
  const ModelDims dims = ModelDims::fromConfig(config);
  EXPECT_EQ(estimateKdaKeptBytes(dims), 2 * perLayer);
  // The last chunk is padded: T = 8193 takes one more chunk per head.
  config.model.seqLen = 8193;
  const double slots2 = 2.0 * 16 * 129, rows2 = slots2 * 64;
  EXPECT_EQ(estimateKdaKeptBytes(ModelDims::fromConfig(config)),
            2 * 4.0 * (rows2 * 5 * 128 + slots2 * 128 * 129));
  config.model.mixerPattern = "A";  // no KDA layer, nothing kept
  EXPECT_EQ(estimateKdaKeptBytes(ModelDims::fromConfig(config)), 0.0);
}

// The CPU backend always recomputes: the key leaves its estimate (and its model) unchanged.
TEST(KdaKeepIntermediates, LeavesTheCpuEstimateUnchanged) {
  RunConfig config;
  config.model.mixerPattern = "K";
  const double off = estimateCpuTrainingBytes(ModelDims::fromConfig(config));
  config.kda.keepIntermediates = true;
  EXPECT_EQ(estimateCpuTrainingBytes(ModelDims::fromConfig(config)), off);
  EXPECT_GT(estimateKdaKeptBytes(ModelDims::fromConfig(config)), 0.0);
}

}  // namespace
}  // namespace moewb::engine
