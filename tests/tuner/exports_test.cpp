// Exports: our TOML loads back with the engine's parser to the same config; Megatron flags and
// torchtitan TOML use only option names (and types, choices) from the targets' own tables
// (megatron_options.h, torchtitan_options.h); every setting a target cannot express is listed in
// the header comment; the provenance header names the study, trial, measured and predicted step
// time, commit, machine and device (GPU and driver).
#include "moewb/tuner/exports.h"

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <cstdlib>
#include <set>
#include <sstream>

#include "megatron_options.h"
#include "moewb/tuner/study.h"
#include "torchtitan_options.h"
#include "tuner_test_util.h"

namespace moewb::tuner {
namespace {

Provenance sampleProvenance() {
  Provenance p;
  p.studyPath = "runs/study.sqlite";
  p.trialId = 7;
  p.settings = "loss.kind=cce";
  p.steps = 6;
  p.stepTimeMs = 12.5;
  p.tokensPerSecond = 40960;
  p.peakBytes = 1234;
  p.gitCommit = "0123abcd";
  p.machine = "box (cpu, 1 rank)";
  p.device = "NVIDIA H200 (device 0; driver 580.95.05, CUDA 13.0)";
  p.predictedStepTimeMs = 12.25;
  p.predictedPeakBytes = 1200;
  return p;
}

// Configs that exercise every branch of the writers; each passes validateConfig.
std::vector<engine::RunConfig> sampleConfigs() {
  std::vector<engine::RunConfig> out;
  engine::RunConfig tiny = testing::quickTiny();
  out.push_back(tiny);
  engine::RunConfig a = tiny;  // capacity, fusion, sigmoid router with groups and bias, shared
  a.moe.capacityFactor = 1.25;
  a.moe.dropPolicy = "position";
  a.fusion.permuteIntoExperts = true;
  a.moe.router = "sigmoid";
  a.moe.routeScale = 2.5;
  a.moe.numGroups = 4;
  a.moe.topkGroups = 2;
  a.moe.biasUpdateRate = 1e-3;
  a.moe.zLossCoef = 1e-3;
  a.moe.seqAuxLossCoef = 1e-4;
  a.moe.numSharedExperts = 1;
  out.push_back(a);
  engine::RunConfig b = tiny;  // hybrid mixers, CCE, EP x FSDP over 4 ranks, a2a chunks
  b.model.mixerPattern = "KKKS";
  b.loss.kind = "cce";
  b.parallel.worldSize = 4;
  b.parallel.ep = 2;
  b.parallel.fsdp = 4;
  b.parallel.a2aChunks = 2;
  b.run.backend = "cuda";
  out.push_back(b);
  engine::RunConfig c = tiny;  // HSDP, chunk loss, SiTU, latent MoE, no aux loss
  c.parallel.worldSize = 4;
  c.parallel.fsdp = 2;
  c.parallel.replicate = 2;
  c.loss.kind = "chunk";
  c.moe.activation = "situ";
  c.moe.latentDim = 32;
  c.moe.auxLossCoef = 0;
  out.push_back(c);
  engine::RunConfig d = tiny;  // 8 sequences on 2 ranks in micro-batches of 2
  d.parallel.worldSize = 2;
  d.data.batchSize = 8;
  d.data.microBatchSize = 2;
  out.push_back(d);
  for (const auto& config : out) EXPECT_TRUE(engine::validateConfig(config).isOk());
  engine::RunConfig swapped = tiny;  // manual swap beside recompute (GPU)
  swapped.run.backend = "cuda";
  swapped.swap.mode = "manual";
  swapped.swap.ops = "attn_norm, mixer_input, moe_input, expert_fc1";
  swapped.swap.recomputeOps = "moe_act, expert_fc2";
  out.push_back(swapped);
  return out;
}

bool parsesAs(const std::string& type, const std::string& v) {
  char* end = nullptr;
  if (type == "int" || type == "int+") {
    std::strtoll(v.c_str(), &end, 10);
  } else if (type == "float" || type == "float+") {
    std::strtod(v.c_str(), &end);
  } else {
    return !v.empty() && v.rfind("--", 0) != 0;
  }
  return end != v.c_str() && *end == '\0';
}

TEST(Exports, OurTomlLoadsBackToTheSameConfig) {
  for (const auto& config : sampleConfigs()) {
    ExportText out = exportConfig(config, sampleProvenance(), ExportFormat::kToml);
    EXPECT_TRUE(out.unexpressed.empty());
    auto back = engine::parseConfigToml(out.text, "export");
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_TRUE(*back == config);
    EXPECT_TRUE(engine::validateConfig(*back).isOk());
  }
}

TEST(Exports, ProvenanceHeaderNamesStudyTrialTimeCommitMachineAndDevice) {
  for (ExportFormat f : {ExportFormat::kToml, ExportFormat::kMegatron, ExportFormat::kTorchtitan}) {
    const std::string text = exportConfig(testing::quickTiny(), sampleProvenance(), f).text;
    for (const char* needle : {"runs/study.sqlite", "trial 7", "12.500 ms", "0123abcd",
                               "box (cpu, 1 rank)", "loss.kind=cce", "driver 580.95.05",
                               "predicted by the cost model: step time 12.250 ms"}) {
      EXPECT_NE(text.find(needle), std::string::npos) << exportFormatName(f) << ": " << needle;
    }
    EXPECT_EQ(text.rfind("# ", 0), 0u) << exportFormatName(f);
  }
}

TEST(Exports, MegatronUsesOnlyItsOwnOptionNamesAndTypes) {
  const auto& table = testing::megatronOptions();
  for (const auto& config : sampleConfigs()) {
    ExportText out = exportConfig(config, sampleProvenance(), ExportFormat::kMegatron);
    std::istringstream in(out.text);
    std::string line;
    std::set<std::string> seen;
    while (std::getline(in, line)) {
      if (line.empty() || line.front() == '#') continue;
      std::istringstream words(line);
      std::string name;
      words >> name;
      ASSERT_EQ(name.rfind("--", 0), 0u) << line;
      name = name.substr(2);
      EXPECT_TRUE(seen.insert(name).second) << "twice: " << name;
      const testing::MegatronOption* option = nullptr;
      for (const auto& o : table) {
        if (name == o.name) option = &o;
      }
      ASSERT_NE(option, nullptr) << "--" << name << " is not in megatron_options.h";
      std::vector<std::string> values;
      for (std::string v; words >> v;) values.push_back(v);
      const std::string type = option->type;
      if (type == "flag") {
        EXPECT_TRUE(values.empty()) << line;
        continue;
      }
      if (type.back() == '+') {
        EXPECT_GE(values.size(), 1u) << line;
      } else {
        EXPECT_EQ(values.size(), 1u) << line;
      }
      for (const auto& v : values) {
        EXPECT_TRUE(parsesAs(type, v)) << line;
        if (!option->choices.empty()) {
          EXPECT_NE(std::find(option->choices.begin(), option->choices.end(), v),
                    option->choices.end())
              << line;
        }
      }
    }
    EXPECT_TRUE(seen.count("expert-model-parallel-size"));
  }
}

TEST(Exports, TorchtitanUsesOnlyItsOwnSectionsKeysAndTypes) {
  const auto& table = testing::torchtitanOptions();
  for (const auto& config : sampleConfigs()) {
    ExportText out = exportConfig(config, sampleProvenance(), ExportFormat::kTorchtitan);
    toml::table doc;
    try {
      doc = toml::parse(out.text);
    } catch (const toml::parse_error& e) {
      FAIL() << e.what() << "\n" << out.text;
    }
    size_t keys = 0;
    for (auto&& [section, node] : doc) {
      ASSERT_TRUE(node.is_table()) << section.str();
      for (auto&& [key, value] : *node.as_table()) {
        const std::string full = std::string(section.str()) + "." + std::string(key.str());
        const testing::TorchtitanOption* option = nullptr;
        for (const auto& o : table) {
          if (full == o.key) option = &o;
        }
        ASSERT_NE(option, nullptr) << full << " is not in torchtitan_options.h";
        const std::string type = option->type;
        if (type == "int") {
          EXPECT_TRUE(value.is_integer()) << full;
        } else if (type == "float") {
          EXPECT_TRUE(value.is_number()) << full;
        } else if (type == "bool") {
          EXPECT_TRUE(value.is_boolean()) << full;
        } else {
          ASSERT_TRUE(value.is_string()) << full;
          if (!option->choices.empty()) {
            const std::string v = *value.value<std::string>();
            EXPECT_NE(std::find(option->choices.begin(), option->choices.end(), v),
                      option->choices.end())
                << full << " = " << v;
          }
        }
        ++keys;
      }
    }
    EXPECT_GT(keys, 10u);
    EXPECT_EQ(doc["parallelism"]["expert_parallel_degree"].value<int64_t>(),
              int64_t(config.parallel.ep));
  }
}

TEST(Exports, SettingsATargetCannotExpressAreListedNeverDropped) {
  const engine::RunConfig hybrid = sampleConfigs()[2];  // KKKS, cce, a2a_chunks = 2
  const engine::RunConfig hsdp = sampleConfigs()[3];    // fsdp 2 x replicate 2, chunk, SiTU
  struct Case {
    engine::RunConfig config;
    ExportFormat format;
    std::vector<std::string> listed;
  };
  const std::vector<Case> cases = {
      {hybrid,
       ExportFormat::kMegatron,
       {"loss.kind = cce", "parallel.a2a_chunks = 2", "model.mixer_pattern = KKKS",
        "kda.chunk_size = 64", "sparse.top_k = 16", "loss.cce_vocab_block = 256"}},
      {hsdp,
       ExportFormat::kMegatron,
       {"parallel.fsdp = 2", "parallel.replicate = 2", "loss.chunk_tokens = 256",
        "moe.activation = situ", "moe.latent_dim = 32"}},
      {hybrid,
       ExportFormat::kTorchtitan,
       {"loss.kind = cce", "fusion.permute_into_experts = false", "moe.capacity_factor = 0.0",
        "parallel.a2a_chunks = 2", "model.mixer_pattern = KKKS", "kda.chunk_size = 64"}},
  };
  for (const Case& c : cases) {
    ExportText out = exportConfig(c.config, sampleProvenance(), c.format);
    for (const std::string& key : c.listed) {
      bool found = false;
      for (const auto& line : out.unexpressed) found = found || line.rfind(key, 0) == 0;
      EXPECT_TRUE(found) << exportFormatName(c.format) << " does not list " << key;
      EXPECT_NE(out.text.find("#   " + key), std::string::npos) << key;
    }
  }
  // Every tunable key is either expressed by a flag or listed.
  for (const auto& config : sampleConfigs()) {
    ExportText out = exportConfig(config, sampleProvenance(), ExportFormat::kMegatron);
    if (config.moe.capacityFactor > 0) {
      EXPECT_NE(out.text.find("--moe-expert-capacity-factor 1.25"), std::string::npos);
      EXPECT_NE(out.text.find("--moe-token-drop-policy position"), std::string::npos);
      EXPECT_NE(out.text.find("--moe-permute-fusion"), std::string::npos);
    }
  }
}

// data.micro_batch_size is both targets' per-rank batch of one forward (Megatron-Core's
// --micro-batch-size, torchtitan's [training] local_batch_size) beside the global batch of all
// ranks: each target accumulates global / (micro x data-parallel ranks) micro-batches a step,
// the engine's microBatches(). Without it, the micro-batch is the rank's whole share.
TEST(Exports, MicroBatchesAreTheTargetsPerRankBatches) {
  const engine::RunConfig split = sampleConfigs()[4];
  ASSERT_EQ(split.microBatches(), 2);
  const engine::RunConfig whole = sampleConfigs()[3];  // 4 sequences on 4 ranks
  ExportText megatron = exportConfig(split, sampleProvenance(), ExportFormat::kMegatron);
  EXPECT_NE(megatron.text.find("--global-batch-size 8\n"), std::string::npos) << megatron.text;
  EXPECT_NE(megatron.text.find("--micro-batch-size 2\n"), std::string::npos) << megatron.text;
  for (const std::string& line : megatron.unexpressed) {
    EXPECT_EQ(line.rfind("data.micro_batch_size", 0), std::string::npos) << line;
  }
  megatron = exportConfig(whole, sampleProvenance(), ExportFormat::kMegatron);
  EXPECT_NE(megatron.text.find("--micro-batch-size 1\n"), std::string::npos) << megatron.text;
  for (const engine::RunConfig& config : {split, whole}) {
    ExportText titan = exportConfig(config, sampleProvenance(), ExportFormat::kTorchtitan);
    const toml::table doc = toml::parse(titan.text);
    const int64_t local = doc["training"]["local_batch_size"].value_or(int64_t(0));
    const int64_t global = doc["training"]["global_batch_size"].value_or(int64_t(0));
    const int64_t dp = doc["parallelism"]["data_parallel_shard_degree"].value_or(int64_t(0)) *
                       doc["parallelism"]["data_parallel_replicate_degree"].value_or(int64_t(0));
    EXPECT_EQ(local, config.microBatchSize());
    EXPECT_EQ(global, config.data.batchSize);
    ASSERT_GT(local * dp, 0);
    EXPECT_EQ(global / (local * dp), config.microBatches());  // torchtitan's accumulation steps
    for (const std::string& line : titan.unexpressed) {
      EXPECT_EQ(line.rfind("data.micro_batch_size", 0), std::string::npos) << line;
    }
  }
}

// Manual swap and recompute map to Megatron's fine-grained offloading and selective recompute;
// what Megatron cannot express (moe_input has no offload module, our moe_act recompute re-runs
// only the gate / up GEMM) is listed with the nearest.
TEST(Exports, MegatronSwapAndRecomputeFlags) {
  const engine::RunConfig swapped = sampleConfigs().back();
  ExportText out = exportConfig(swapped, sampleProvenance(), ExportFormat::kMegatron);
  EXPECT_NE(out.text.find("--fine-grained-activation-offloading\n"), std::string::npos);
  EXPECT_NE(out.text.find("--offload-modules attn_norm qkv_linear expert_fc1\n"),
            std::string::npos) << out.text;
  EXPECT_NE(out.text.find("--recompute-granularity selective\n--recompute-modules moe_act\n"),
            std::string::npos) << out.text;
  bool ops = false, recompute = false;
  for (const auto& line : out.unexpressed) {
    ops = ops || (line.rfind("swap.ops", 0) == 0 &&
                  line.find("moe_input has no Megatron offload module") != std::string::npos);
    recompute = recompute || (line.rfind("swap.recompute_ops", 0) == 0 &&
                              line.find("--recompute-modules moe") != std::string::npos);
  }
  EXPECT_TRUE(ops) << out.text;
  EXPECT_TRUE(recompute) << out.text;
  engine::RunConfig off = sampleConfigs().front();
  ExportText plain = exportConfig(off, sampleProvenance(), ExportFormat::kMegatron);
  EXPECT_EQ(plain.text.find("offload"), std::string::npos);
  for (const auto& line : plain.unexpressed) EXPECT_NE(line.rfind("swap.", 0), 0u) << line;
}

TEST(Exports, FromAStudyTheBestPassingTrialByDefault) {
  testing::TempDir dir("export");
  StudyOptions o;
  o.studyPath = dir.file("study.sqlite");
  o.base = testing::quickTiny();
  o.knobs = {{"fusion.combine_into_experts", {}}, {"moe.capacity_factor", {"1.5"}}};
  o.steps = 2;
  auto result = runStudy(o);
  ASSERT_TRUE(result.isOk()) << result.status().toString();
  ASSERT_TRUE(result->best.has_value());
  auto exported = exportStudyTrial(o.studyPath, std::nullopt, ExportFormat::kToml);
  ASSERT_TRUE(exported.isOk()) << exported.status().toString();
  EXPECT_EQ(exported->trial.id, result->best->trial.id);
  auto back = engine::parseConfigToml(exported->text.text, "export");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  auto expected = applySettings(o.base, *parseSettingsText(result->best->trial.settings));
  ASSERT_TRUE(expected.isOk());
  EXPECT_TRUE(*back == expected->get());
  auto byId = exportStudyTrial(o.studyPath, result->table.back().trial.id, ExportFormat::kMegatron);
  ASSERT_TRUE(byId.isOk()) << byId.status().toString();
  EXPECT_EQ(exportStudyTrial(o.studyPath, 999, ExportFormat::kToml).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(parseExportFormat("deepspeed").isOk());
}

}  // namespace
}  // namespace moewb::tuner
