// The cost model's work rules (tuner/src/cost_model_rules.h, white box): the saved-activation
// count follows kda.keep_intermediates on the CUDA backend by the bytes the engine keeps, counted
// by hand here for samples/configs/h200.toml.
#include "cost_model_rules.h"

#include <gtest/gtest.h>

#include "moewb/engine/config.h"
#include "../source_dir.h"

namespace moewb::tuner {
namespace {

engine::RunConfig h200() {
  auto loaded =
      engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/h200.toml");
  EXPECT_TRUE(loaded.isOk()) << loaded.status().toString();
  return loaded.isOk() ? *loaded : engine::RunConfig{};
}

// h200.toml: 6 KDA layers (KKKS x 2), 4 sequences of 4096 tokens, 16 heads of 128, chunk 64.
// Per layer: 4 x 16 x 4096 = 262,144 padded rows x (3 x 128 + 2 x 128) floats of workspace plus
// 4,096 chunks x 128 x 129 floats of entry states = 235,405,312 floats (0.94 GB, the figure
// docs/GPU.md gives); in 2-byte elements twice that.
constexpr double kKeptFloatsPerLayer = 262144.0 * 640 + 4096.0 * 128 * 129;

TEST(CostModelRules, KeptKdaIntermediatesAddTheEnginesBytesOnCuda) {
  engine::RunConfig config = h200();
  ASSERT_EQ(config.run.backend, "cuda");
  config.kda.keepIntermediates = false;
  const double off = detail::workOf(config, 1.0).activationElems;
  config.kda.keepIntermediates = true;
  const double on = detail::workOf(config, 1.0).activationElems;
  EXPECT_DOUBLE_EQ(on - off, 2 * kKeptFloatsPerLayer * 6);

  // The CPU backend always recomputes: the knob changes nothing there.
  config.run.backend = "cpu";
  const double cpuOn = detail::workOf(config, 1.0).activationElems;
  config.kda.keepIntermediates = false;
  EXPECT_DOUBLE_EQ(cpuOn, detail::workOf(config, 1.0).activationElems);
}

}  // namespace
}  // namespace moewb::tuner
