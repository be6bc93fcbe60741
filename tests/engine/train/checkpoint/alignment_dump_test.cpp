// Alignment dumps: the files hold weights before the step, the batch, loss terms and gradients;
// re-running a dumped step's forward from the file gives the recorded loss exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "train/checkpoint/safetensors.h"
#include "moewb/engine/trainer.h"

namespace moewb::engine {
namespace {

RunConfig smallConfig() {
  RunConfig config;
  config.model.numLayers = 2;
  config.model.seqLen = 12;
  config.data.batchSize = 3;
  config.run.threads = 1;
  return config;
}

TEST(AlignmentDump, WritesEveryTermAndReplaysToTheSameLoss) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("moewb-dump-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  (*trainer)->setDumpPolicy(1, 3, dir);
  std::vector<double> losses;
  for (int i = 0; i < 4; ++i) {
    auto step = (*trainer)->step();
    ASSERT_TRUE(step.isOk()) << step.status().toString();
    losses.push_back(step->loss);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000000.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000003.safetensors"));
  std::string path = dir + "/step-00000002.safetensors";
  auto file = readSafetensors(path);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file->metadata.at("format"), "moewb-alignment-dump");
  EXPECT_EQ(file->metadata.at("step"), "2");
  ASSERT_TRUE(file->find("batch.tokens"));
  EXPECT_EQ(file->find("batch.tokens")->shape, (std::vector<int64_t>{3, 12}));
  ASSERT_TRUE(file->find("weights.layers.1.moe.router"));
  ASSERT_TRUE(file->find("grads.layers.1.moe.router"));
  double gradSquares = 0;
  const SafetensorsEntry* grad = file->find("grads.lm_head");
  ASSERT_TRUE(grad);
  for (int64_t i = 0; i < grad->numel(); ++i) gradSquares += double(grad->f32()[i]) * grad->f32()[i];
  EXPECT_GT(gradSquares, 0.0);
  EXPECT_FLOAT_EQ(file->find("loss.ce")->f32()[0], float(losses[2]));

  // A fresh trainer (other weights) replays step 2 from the file alone.
  RunConfig other = smallConfig();
  other.run.seed = 99;
  auto replayer = Trainer::create(other, nullptr);
  ASSERT_TRUE(replayer.isOk());
  auto replayed = (*replayer)->replayAlignmentDump(path);
  ASSERT_TRUE(replayed.isOk()) << replayed.status().toString();
  EXPECT_EQ(replayed->ce, losses[2]);
  EXPECT_EQ(replayed->ce, replayed->recordedCe);
  EXPECT_EQ(replayed->aux, replayed->recordedAux);

  RunConfig wrongBatch = smallConfig();
  wrongBatch.data.batchSize = 2;
  auto mismatched = Trainer::create(wrongBatch, nullptr);
  ASSERT_TRUE(mismatched.isOk());
  auto refused = (*mismatched)->replayAlignmentDump(path);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("data.batch_size"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moewb::engine

namespace moewb::engine {
namespace {

// The aux-loss-free router bias changes which experts a step selects, so a dump after step 0
// carries it (state.expert_bias.<layer>) and the replay selects with it.
TEST(AlignmentDump, RouterBiasTravelsWithTheDumpAndReplays) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("moewb-dump-bias-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  RunConfig config = smallConfig();
  config.moe.router = "sigmoid";
  config.moe.biasUpdateRate = 0.05;
  auto trainer = Trainer::create(config, nullptr);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  (*trainer)->setDumpPolicy(3, 4, dir);
  double loss = 0;
  for (int i = 0; i < 4; ++i) {
    auto step = (*trainer)->step();
    ASSERT_TRUE(step.isOk()) << step.status().toString();
    loss = step->loss;
  }
  const std::string path = dir + "/step-00000003.safetensors";
  auto file = readSafetensors(path);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file->metadata.at("format_version"), "2");
  for (int layer = 0; layer < 2; ++layer) {
    const SafetensorsEntry* bias = file->find("state.expert_bias." + std::to_string(layer));
    ASSERT_TRUE(bias) << layer;
    EXPECT_EQ(bias->shape, (std::vector<int64_t>{config.moe.numExperts}));
    double moved = 0;
    for (int64_t e = 0; e < bias->numel(); ++e) moved += std::abs(bias->f32()[e]);
    EXPECT_GT(moved, 0.0) << "three updates of 0.05 leave a non-zero bias";
  }
  RunConfig other = config;
  other.run.seed = 7;
  auto replayer = Trainer::create(other, nullptr);
  ASSERT_TRUE(replayer.isOk());
  auto replayed = (*replayer)->replayAlignmentDump(path);
  ASSERT_TRUE(replayed.isOk()) << replayed.status().toString();
  EXPECT_EQ(replayed->ce, loss);
  EXPECT_EQ(replayed->aux, replayed->recordedAux);

  // A model without a bias refuses a dump that has one, in words.
  RunConfig noBias = config;
  noBias.moe.biasUpdateRate = 0;
  auto plain = Trainer::create(noBias, nullptr);
  ASSERT_TRUE(plain.isOk());
  auto refused = (*plain)->replayAlignmentDump(path);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("bias_update_rate"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(AlignmentDump, MultimodalDumpCarriesThePatchesAndReplays) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("moewb-dump-mm-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  RunConfig config;
  config.model.numLayers = 2;
  config.model.seqLen = 12;
  config.model.mixerPattern = "KS";
  config.data.batchSize = 2;
  config.data.imageSize = 4;
  config.data.patchSize = 2;
  config.data.imageChannels = 3;
  config.run.threads = 1;
  auto trainer = Trainer::create(config, nullptr);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  (*trainer)->setDumpPolicy(0, 1, dir);
  auto step = (*trainer)->step();
  ASSERT_TRUE(step.isOk()) << step.status().toString();
  const std::string path = dir + "/step-00000000.safetensors";
  auto file = readSafetensors(path);
  ASSERT_TRUE(file.isOk());
  const SafetensorsEntry* patches = file->find("batch.patches");
  ASSERT_TRUE(patches);
  EXPECT_EQ(patches->shape, (std::vector<int64_t>{2, 4, 12}));
  EXPECT_EQ(file->find("batch.tokens")->i32()[0], -1);  // image position
  RunConfig other = config;
  other.run.seed = 5;
  auto replayer = Trainer::create(other, nullptr);
  ASSERT_TRUE(replayer.isOk());
  auto replayed = (*replayer)->replayAlignmentDump(path);
  ASSERT_TRUE(replayed.isOk()) << replayed.status().toString();
  EXPECT_EQ(replayed->ce, step->loss);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moewb::engine
