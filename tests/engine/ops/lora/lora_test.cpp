// LoRA fine-tuning (model/lora.h): finite differences in double of the loss w.r.t. every adapter
// on a hybrid model; B = 0 reproduces the base model exactly; training moves adapters only and
// frozen weights carry no moments; the merged export reproduces the LoRA model's loss in a
// LoRA-off model; loading pretrained weights then LoRA training lowers the loss; validation;
// bit-exact resume.
#include "ops/lora/lora.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "train/checkpoint/safetensors.h"
#include "train/synthetic_data.h"
#include "grad_check.h"
#include "model/cpu/model.h"
#include "hybrid_dims.h"
#include "moewb/engine/trainer.h"
#include "../../../source_dir.h"

namespace moewb::engine {
namespace {

ModelDims loraDims(const std::string& targets, bool enabled = true) {
  ModelDims d = test::tinyHybridDims("KSA");
  d.moe.latentDim = 4;
  d.moe.numSharedExperts = 1;
  d.moe.sharedDFf = 5;
  d.lora.enabled = enabled;
  d.lora.rank = 3;
  d.lora.alpha = 4.5;
  d.lora.targets = targets;
  return d;
}

Batch loraBatch(const ModelDims& d) {
  DataSection data;
  data.batchSize = int32_t(d.batchSize);
  data.numTopics = 3;
  return SyntheticData(data, int32_t(d.vocabSize), int32_t(d.seqLen), 99).batch(0);
}

bool isAdapterName(const std::string& name) {
  return name.ends_with(".lora_a") || name.ends_with(".lora_b");
}

// Gives every B a nonzero value so that dA is nonzero too.
template <typename T>
void randomizeB(Model<T>& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& p : model.parameters()) {
    if (p.name.ends_with(".lora_b")) test::fillNormal(p.value, rng, 0.3);
  }
}

class LoraModel : public ::testing::TestWithParam<const char*> {};

TEST_P(LoraModel, AdapterGradientsMatchFiniteDifferences) {
  ThreadPool pool(2);
  const ModelDims dims = loraDims(GetParam());
  Model<double> model(dims, pool);
  model.initialize(7);
  randomizeB(model, 5);
  const Batch batch = loraBatch(dims);
  model.forward(batch, nullptr);
  model.zeroGrads();
  model.backward(nullptr);
  auto loss = [&] { return model.forward(batch, nullptr).totalLoss(); };
  Rng pick(8);
  int adapters = 0;
  for (auto& param : model.parameters()) {
    if (!isAdapterName(param.name)) {
      EXPECT_FALSE(param.trainable) << param.name;
      EXPECT_EQ(param.adamM.numel() + param.adamV.numel(), 0) << param.name;
      continue;
    }
    ++adapters;
    EXPECT_TRUE(param.trainable && !param.decay) << param.name;
    Tensor<double> grad = param.grad.clone();
    std::vector<int64_t> indices;
    for (int i = 0; i < 4; ++i) indices.push_back(pick.uniformInt(param.value.numel()));
    test::expectGradientMatches(param.name, param.value, grad, loss, indices, 1e-5, 5e-6);
  }
  // attention: 4 per layer; experts: gate/up/down + shared gate/up/down per layer; 2 tensors each.
  const int perLayer = std::string(GetParam()) == "all"         ? 10
                       : std::string(GetParam()) == "attention" ? 4
                                                                : 6;
  EXPECT_EQ(adapters, 2 * perLayer * int(dims.numLayers));
}

INSTANTIATE_TEST_SUITE_P(Targets, LoraModel, ::testing::Values("all", "attention", "experts"));

TEST(LoraModel, ZeroBGivesTheBaseModelsLossExactly) {
  ThreadPool pool(2);
  Model<double> base(loraDims("all", false), pool);
  Model<double> lora(loraDims("all"), pool);
  base.initialize(7);
  lora.initialize(7);
  for (size_t i = 0; i < base.parameters().size(); ++i) {
    const auto& a = base.parameters()[i];
    const auto& b = lora.parameters()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(0, std::memcmp(a.value.data(), b.value.data(), size_t(a.value.bytes()))) << a.name;
  }
  const Batch batch = loraBatch(base.dims());
  const ForwardResult x = base.forward(batch, nullptr);
  const ForwardResult y = lora.forward(batch, nullptr);
  EXPECT_EQ(x.loss, y.loss);
  EXPECT_EQ(x.auxLoss, y.auxLoss);
}

TEST(LoraModel, MergedWeightsGiveTheLoraModelsLoss) {
  ThreadPool pool(2);
  Model<float> plain(loraDims("all", false), pool);
  Model<float> lora(loraDims("all"), pool);
  lora.initialize(7);
  randomizeB(lora, 5);
  size_t next = 0;
  for (size_t i = 0; i < lora.parameters().size(); ++i) {
    if (lora.isLoraAdapter(i)) continue;
    auto& target = plain.parameters()[next++];
    ASSERT_EQ(target.name, lora.parameters()[i].name);
    target.value = lora.mergedValue(i);
  }
  ASSERT_EQ(next, plain.parameters().size());
  const Batch batch = loraBatch(plain.dims());
  const double x = plain.forward(batch, nullptr).totalLoss();
  const double y = lora.forward(batch, nullptr).totalLoss();
  EXPECT_NEAR(x, y, 1e-5 * std::abs(y));
}

TEST(LoraMath, MergeAndGradientsMatchDenseProducts) {
  ThreadPool pool(2);
  Rng rng(3);
  auto w = test::randomTensor<double>({2, 3, 4}, rng);  // [E, m, n]
  auto a = test::randomTensor<double>({2, 2, 4}, rng);  // [E, r, n]
  auto b = test::randomTensor<double>({2, 3, 2}, rng);  // [E, m, r]
  auto g = test::randomTensor<double>({2, 3, 4}, rng);  // dW'
  Tensor<double> merged;
  loraMerge(pool, w, a, b, 1.5, merged);
  Tensor<double> dA({2, 2, 4}), dB({2, 3, 2});
  loraBackward(pool, g, a, b, 1.5, dA, dB);
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) {
        double ba = 0;
        for (int k = 0; k < 2; ++k) ba += b[(e * 3 + i) * 2 + k] * a[(e * 2 + k) * 4 + j];
        EXPECT_NEAR(merged[(e * 3 + i) * 4 + j], w[(e * 3 + i) * 4 + j] + 1.5 * ba, 1e-12);
      }
    }
    for (int k = 0; k < 2; ++k) {
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int i = 0; i < 3; ++i) s += b[(e * 3 + i) * 2 + k] * g[(e * 3 + i) * 4 + j];
        EXPECT_NEAR(dA[(e * 2 + k) * 4 + j], 1.5 * s, 1e-12);
      }
    }
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 2; ++k) {
        double s = 0;
        for (int j = 0; j < 4; ++j) s += g[(e * 3 + i) * 4 + j] * a[(e * 2 + k) * 4 + j];
        EXPECT_NEAR(dB[(e * 3 + i) * 2 + k], 1.5 * s, 1e-12);
      }
    }
  }
}

// ---- Trainer level, on the shipped small config.

RunConfig smallConfig(bool lora) {
  auto config = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/small.toml");
  EXPECT_TRUE(config.isOk()) << config.status().toString();
  RunConfig c = config.isOk() ? config.value() : RunConfig{};
  c.lora.enabled = lora;
  return c;
}

std::string tempPath(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("moewb-lora-" + tag + "-" + std::to_string(getpid()) + ".safetensors"))
      .string();
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

class CounterSink final : public EventSink {
 public:
  void onRunStart(const RunStartEvent&) override {}
  void onPhase(const PhaseEvent&) override {}
  void onExpertLoad(const ExpertLoadEvent&) override {}
  void onCounter(const CounterEvent& e) override { last[e.name] = e.value; }
  void onStep(const StepEvent&) override {}
  void onRunEnd(const RunEndEvent&) override {}
  std::map<std::string, double> last;
};

TEST(LoraTrainer, OnlyAdaptersChangeAndFrozenWeightsHaveNoMoments) {
  const std::string before = tempPath("before"), after = tempPath("after");
  CounterSink sink;
  auto trainer = Trainer::create(smallConfig(true), &sink);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  ASSERT_TRUE((*trainer)->saveCheckpoint(before).isOk());
  losses(**trainer, 3);
  ASSERT_TRUE((*trainer)->saveCheckpoint(after).isOk());
  auto x = readSafetensors(before);
  auto y = readSafetensors(after);
  ASSERT_TRUE(x.isOk() && y.isOk());
  int64_t adapterFloats = 0;
  for (const auto& info : (*trainer)->parameterInfos()) {
    const SafetensorsEntry* a = x->find(info.name);
    const SafetensorsEntry* b = y->find(info.name);
    ASSERT_TRUE(a && b) << info.name;
    if (isAdapterName(info.name)) {
      EXPECT_NE(a->bytes, b->bytes) << info.name << " did not train";
      EXPECT_TRUE(y->find("optimizer." + info.name + ".exp_avg")) << info.name;
      adapterFloats += b->numel();
    } else {
      EXPECT_EQ(a->bytes, b->bytes) << info.name << " changed but is frozen";
      EXPECT_FALSE(y->find("optimizer." + info.name + ".exp_avg")) << info.name;
      EXPECT_FALSE(y->find("optimizer." + info.name + ".exp_avg_sq")) << info.name;
    }
  }
  EXPECT_GT(adapterFloats, 0);
  EXPECT_EQ(sink.last["memory.optimizer_bytes"], double(adapterFloats * 2 * 4));
  std::filesystem::remove(before);
  std::filesystem::remove(after);
}

TEST(LoraTrainer, MergedExportLoadsIntoALoraOffModelWithTheSameLoss) {
  const std::string merged = tempPath("merged");
  auto lora = Trainer::create(smallConfig(true), nullptr);
  auto plain = Trainer::create(smallConfig(false), nullptr);
  ASSERT_TRUE(lora.isOk() && plain.isOk());
  losses(**lora, 3);
  losses(**plain, 3);  // same step index next; its weights are replaced below
  ASSERT_TRUE((*lora)->exportMergedWeights(merged).isOk());
  auto file = readSafetensors(merged);
  ASSERT_TRUE(file.isOk());
  EXPECT_EQ(file->metadata["format"], "moewb-weights");
  EXPECT_NE(file->metadata["config"].find("[lora]\nenabled = false"), std::string::npos);
  for (const auto& t : file->tensors) {
    EXPECT_FALSE(isAdapterName(t.name) || t.name.starts_with("optimizer.")) << t.name;
  }
  Status loaded = (*plain)->loadWeights(merged);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  const double x = losses(**lora, 1)[0];
  const double y = losses(**plain, 1)[0];
  EXPECT_NEAR(x, y, 1e-5 * std::abs(x));
  std::filesystem::remove(merged);
}

// The synthetic batches differ in difficulty, so LoRA training is compared with the same start
// at a negligible learning rate over the same steps.
TEST(LoraTrainer, InitWeightsFromFullTrainingThenLoraLowersTheLoss) {
  const std::string path = tempPath("pretrained");
  auto full = Trainer::create(smallConfig(false), nullptr);
  ASSERT_TRUE(full.isOk());
  losses(**full, 30);
  ASSERT_TRUE((*full)->saveCheckpoint(path).isOk());
  RunConfig loraConfig = smallConfig(true);
  loraConfig.optim.lr = 1e-3;
  RunConfig frozenConfig = loraConfig;
  frozenConfig.optim.lr = 1e-9;
  auto fresh = Trainer::create(loraConfig, nullptr);
  auto lora = Trainer::create(loraConfig, nullptr);
  auto frozen = Trainer::create(frozenConfig, nullptr);
  ASSERT_TRUE(fresh.isOk() && lora.isOk() && frozen.isOk());
  Status loaded = (*lora)->loadWeights(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  ASSERT_TRUE((*frozen)->loadWeights(path).isOk());
  EXPECT_EQ((*lora)->stepsDone(), 0);
  const double freshLoss = losses(**fresh, 1)[0];
  std::vector<double> tuned = losses(**lora, 40);
  std::vector<double> still = losses(**frozen, 40);
  EXPECT_LT(tuned.front(), freshLoss) << "the pretrained weights were not loaded";
  EXPECT_EQ(tuned.front(), still.front());
  double tunedTail = 0, stillTail = 0;
  for (size_t i = tuned.size() - 10; i < tuned.size(); ++i) {
    tunedTail += tuned[i] / 10;
    stillTail += still[i] / 10;
  }
  EXPECT_LT(tunedTail, stillTail - 0.03) << "LoRA " << tunedTail << " vs frozen " << stillTail;
  std::filesystem::remove(path);
}

TEST(LoraTrainer, LoadWeightsNamesTheMissingTensor) {
  const std::string path = tempPath("other");
  RunConfig other;
  auto small = Trainer::create(other, nullptr);
  ASSERT_TRUE(small.isOk());
  ASSERT_TRUE((*small)->saveCheckpoint(path).isOk());
  RunConfig shared;
  shared.moe.numSharedExperts = 1;
  auto trainer = Trainer::create(shared, nullptr);
  ASSERT_TRUE(trainer.isOk());
  Status status = (*trainer)->loadWeights(path);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'layers.0.moe.shared.gate'"), std::string::npos)
      << status.message();
  std::filesystem::remove(path);
}

TEST(LoraConfig, ValidationRejectsRankZeroNamingTheKey) {
  RunConfig config;
  config.lora.enabled = true;
  config.lora.rank = 0;
  Status status = validateConfig(config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("lora.rank"), std::string::npos) << status.message();
  config.lora.enabled = false;
  EXPECT_TRUE(validateConfig(config).isOk());
  config.lora.enabled = true;
  config.lora.rank = 4;
  config.lora.targets = "mlp";
  status = validateConfig(config);
  EXPECT_NE(status.message().find("lora.targets"), std::string::npos) << status.message();
}

TEST(LoraConfig, SampleConfigParsesAndKeysAreNotLive) {
  auto config = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/lora.toml");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_TRUE(config->lora.enabled);
  EXPECT_TRUE(validateConfig(*config).isOk());
  auto parsed = parseConfigToml(toToml(*config), "roundtrip");
  ASSERT_TRUE(parsed.isOk());
  EXPECT_EQ(*parsed, *config);
  for (const auto& key : Trainer::liveKeys()) EXPECT_FALSE(key.starts_with("lora.")) << key;
}

TEST(LoraTrainer, ResumeIsBitExact) {
  const std::string path = tempPath("resume");
  RunConfig config = smallConfig(true);
  config.sparse.warmupSteps = 2;
  auto a = Trainer::create(config, nullptr);
  auto b = Trainer::create(config, nullptr);
  ASSERT_TRUE(a.isOk() && b.isOk());
  std::vector<double> straight = losses(**a, 6);
  losses(**b, 3);
  ASSERT_TRUE((*b)->saveCheckpoint(path).isOk());
  auto resumed = Trainer::create(config, nullptr);
  ASSERT_TRUE(resumed.isOk());
  Status loaded = (*resumed)->loadCheckpoint(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  std::vector<double> tail = losses(**resumed, 3);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(tail[size_t(i)], straight[size_t(3 + i)]) << "step " << 3 + i;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::engine
