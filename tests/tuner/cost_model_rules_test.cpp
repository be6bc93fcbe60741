// The cost model's work rules (tuner/src/cost_model_rules.h, white box): the saved-activation
// count follows kda.keep_intermediates on the CUDA backend by the bytes the engine keeps, counted
// by hand here for samples/configs/h200.toml; micro-batches hold less activation memory and repeat
// the per-pass costs.
#include "cost_model_rules.h"

#include <gtest/gtest.h>

#include "moewb/engine/config.h"
#include "moewb/tuner/cost_model.h"
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

// data.micro_batch_size on h200.toml (4 sequences of 4096 tokens on one GPU): the work of a step
// stays, the activations held are one micro-batch's, the idle gaps between phases repeat per
// forward + backward pass; through predict(), a CUDA calibration of the unsplit step predicts a
// lower activation peak and a longer step for 2 and 4 micro-batches.
TEST(CostModelRules, MicroBatchesHoldLessActivationMemoryAndRepeatPerPassCosts) {
  engine::RunConfig config = h200();
  const detail::Work whole = detail::workOf(config, 1.0);
  config.data.microBatchSize = 2;
  const detail::Work half = detail::workOf(config, 1.0);
  config.data.microBatchSize = 1;
  const detail::Work quarter = detail::workOf(config, 1.0);
  EXPECT_EQ(whole.microBatches, 1);
  EXPECT_EQ(half.microBatches, 2);
  EXPECT_EQ(quarter.microBatches, 4);
  EXPECT_LT(half.deviceActivationBytes, 0.6 * whole.deviceActivationBytes);
  EXPECT_LT(quarter.deviceActivationBytes, 0.6 * half.deviceActivationBytes);
  EXPECT_LT(half.activationElems, 0.6 * whole.activationElems);
  EXPECT_DOUBLE_EQ(half.phaseWork.at("experts"), whole.phaseWork.at("experts"));
  EXPECT_DOUBLE_EQ(half.paramsPerRank, whole.paramsPerRank);
  EXPECT_GT(half.idleUnits, whole.idleUnits);
  EXPECT_GT(quarter.idleUnits, half.idleUnits);

  Calibration cal;
  cal.config = h200();
  cal.backend = "cuda";
  cal.stepMs = 250;
  cal.phaseMs = {{"kda.fwd", 26.78},      {"kda.bwd", 58.07}, {"sparse_attention.fwd", 8.32},
                 {"experts.fwd", 20.0},    {"experts.bwd", 40.0}, {"optimizer", 16.55}};
  cal.idleMs = 5;
  cal.weightsBytes = cal.gradsBytes = cal.optimizerBytes = 4LL << 30;
  cal.activationsBytes = 30LL << 30;
  cal.peakBytes = 43LL << 30;
  const CostModel model(cal, Interconnect{});
  std::vector<Prediction> predictions;
  for (int32_t micro : {0, 2, 1}) {
    engine::RunConfig c = cal.config;
    c.data.microBatchSize = micro;
    auto p = model.predict(c, {.withAssumptions = true});
    ASSERT_TRUE(p.isOk()) << p.status().toString();
    predictions.push_back(*p);
  }
  for (size_t i = 1; i < predictions.size(); ++i) {
    const Prediction& more = predictions[i];
    const Prediction& fewer = predictions[i - 1];
    EXPECT_LT(more.activationsBytes, fewer.activationsBytes) << i;
    EXPECT_LT(more.peakHbmBytes, fewer.peakHbmBytes) << i;
    EXPECT_GT(more.stepMs, fewer.stepMs) << i;
    EXPECT_NEAR(more.computeMs, fewer.computeMs, 1e-9) << i;
    EXPECT_EQ(more.phaseMs.at("optimizer"), fewer.phaseMs.at("optimizer")) << i;
    EXPECT_EQ(more.optimizerBytes, fewer.optimizerBytes) << i;
  }
  bool named = false;
  for (const std::string& a : predictions[1].assumptions) {
    named = named || a.find("data.micro_batch_size: 2 micro-batches") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace moewb::tuner
