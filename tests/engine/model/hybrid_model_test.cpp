// The hybrid model wired end to end: finite differences in double of the whole model's loss for
// mixes of every mixer, residual, MoE variant, loss head and multimodal input; and the shipped
// `small` config: it trains (loss halves in 300 steps), is deterministic, and resumes bit-exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "train/synthetic_data.h"
#include "grad_check.h"
#include "hybrid_dims.h"
#include "model/cpu/model.h"
#include "moewb/engine/trainer.h"
#include "../../source_dir.h"

namespace moewb::engine {
namespace {

struct HybridCase {
  const char* name;
  const char* pattern;
  bool attnRes;
  const char* router;
  int64_t latentDim;
  int32_t sharedExperts;
  bool situ;
  const char* loss;
  int64_t imagePatches;
  double capacityFactor;
};

ModelDims hybridDims(const HybridCase& c) {
  ModelDims d = test::tinyHybridDims(c.pattern);
  d.attnRes = c.attnRes;
  d.attnResBlockSize = 2;
  d.moe.routerScore = std::string(c.router) == "sigmoid" ? RouterScore::kSigmoid : RouterScore::kSoftmax;
  d.moe.latentDim = c.latentDim;
  d.moe.numSharedExperts = c.sharedExperts;
  d.moe.sharedDFf = 5;
  d.moe.activation = c.situ ? GluKind::kSitu : GluKind::kSwiGlu;
  d.moe.seqAuxLossCoef = 0.03;
  d.moe.zLossCoef = 0.01;
  d.moe.capacityFactor = c.capacityFactor;
  d.loss.kind = c.loss;
  d.loss.chunkTokens = 3;
  d.loss.cceVocabBlock = 4;
  d.imagePatches = c.imagePatches;
  d.patchDim = c.imagePatches > 0 ? 3 : 0;
  return d;
}

Batch hybridBatch(const ModelDims& d) {
  DataSection data;
  data.batchSize = int32_t(d.batchSize);
  data.numTopics = 3;
  if (d.imagePatches > 0) {  // 2 patches of 3 features would not be square: use 1x1-pixel patches
    data.imageSize = int32_t(std::lround(std::sqrt(double(d.imagePatches))));
    data.patchSize = 1;
    data.imageChannels = int32_t(d.patchDim);
  }
  return SyntheticData(data, int32_t(d.vocabSize), int32_t(d.seqLen), 99).batch(0);
}

class HybridModel : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridModel, LossGradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  const ModelDims dims = hybridDims(GetParam());
  Model<double> model(dims, pool);
  model.initialize(7);
  const Batch batch = hybridBatch(dims);
  model.forward(batch, nullptr);
  model.zeroGrads();
  model.backward(nullptr);
  auto loss = [&] { return model.forward(batch, nullptr).totalLoss(); };
  Rng pick(8);
  for (auto& param : model.parameters()) {
    Tensor<double> grad = param.grad.clone();
    std::vector<int64_t> indices;
    for (int i = 0; i < 4; ++i) indices.push_back(pick.uniformInt(param.value.numel()));
    test::expectGradientMatches(param.name, param.value, grad, loss, indices, 1e-5, 5e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, HybridModel,
    ::testing::Values(
        HybridCase{"kda_sparse_attention", "KSA", false, "softmax", 0, 0, false, "dense", 0, 0},
        HybridCase{"attnres_latent_shared_situ_cce", "SK", true, "sigmoid", 4, 1, true, "cce", 0, 0},
        HybridCase{"multimodal_chunk_capacity", "K", false, "softmax", 0, 0, false, "chunk", 1, 1.0}),
    [](const auto& info) { return std::string(info.param.name); });

RunConfig smallConfig() {
  auto config = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/small.toml");
  EXPECT_TRUE(config.isOk()) << config.status().toString();
  return config.isOk() ? config.value() : RunConfig{};
}

std::vector<double> losses(Trainer& trainer, int steps) {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    auto step = trainer.step();
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    out.push_back(step.isOk() ? step->loss : -1);
  }
  return out;
}

TEST(SmallConfig, LossFallsByHalfWithin300Steps) {
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  std::vector<double> curve = losses(**trainer, 300);
  EXPECT_LE(curve.back(), 0.5 * curve.front()) << curve.front() << " -> " << curve.back();
}

TEST(SmallConfig, SameSeedSameLossesAndResumeIsBitExact) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moewb-small-" + std::to_string(getpid()) + ".safetensors")).string();
  RunConfig config = smallConfig();
  config.sparse.warmupSteps = 3;  // cross the dense -> sparse switch inside the test
  auto a = Trainer::create(config, nullptr);
  auto b = Trainer::create(config, nullptr);
  ASSERT_TRUE(a.isOk() && b.isOk());
  std::vector<double> straight = losses(**a, 8);
  std::vector<double> first = losses(**b, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(first[size_t(i)], straight[size_t(i)]);
  ASSERT_TRUE((*b)->saveCheckpoint(path).isOk());
  auto resumed = Trainer::create(config, nullptr);
  ASSERT_TRUE(resumed.isOk());
  ASSERT_TRUE((*resumed)->loadCheckpoint(path).isOk());
  std::vector<double> tail = losses(**resumed, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tail[size_t(i)], straight[size_t(4 + i)]) << "step " << 4 + i;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::engine
