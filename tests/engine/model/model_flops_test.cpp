// modelFlopsPerStep (moewb/engine/model_flops.h): a hand count of a small config with every mixer kind
// and MoE variant, worked out term by term below; invariants that hold exactly (batch and top_k
// scaling, linear mixers in the sequence length, sparse attention's key count, the loss head not
// mattering); the weight products checked against the model's own parameter shapes; and the
// shipped h200.toml at the scale its header comment states.
#include "moewb/engine/model_flops.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "../../source_dir.h"
#include "model/cpu/mixer.h"
#include "model/cpu/model.h"
#include "model/moe/moe_options.h"

namespace moewb::engine {
namespace {

// The hand-counted config: 3 layers A, K, S; B = 2 sequences of T = 10 tokens (N = 20), D = 16,
// 2 heads of 8, vocabulary 100; KDA chunks of 4 (10 = 4 + 4 + 2) and gate rank 3; sparse
// attention with one kv head, top-4 keys, an indexer of 2 heads of 4; a latent MoE (width 12) of
// 4 experts top-2 with d_ff 6 and one shared expert of width 5.
RunConfig handConfig() {
  RunConfig c;
  c.model.vocabSize = 100;
  c.model.dModel = 16;
  c.model.numLayers = 3;
  c.model.numHeads = 2;
  c.model.seqLen = 10;
  c.model.mixerPattern = "AKS";
  c.kda.chunkSize = 4;
  c.kda.gateRank = 3;
  c.sparse.kvHeads = 1;
  c.sparse.topK = 4;
  c.sparse.indexerHeads = 2;
  c.sparse.indexerDim = 4;
  c.sparse.indexerLossCoef = 1.0;
  c.moe.numExperts = 4;
  c.moe.topK = 2;
  c.moe.dFf = 6;
  c.moe.latentDim = 12;
  c.moe.numSharedExperts = 1;
  c.moe.sharedDFf = 5;
  c.data.batchSize = 2;
  c.data.numTopics = 4;
  return c;
}

void expectCount(const FlopCount& actual, double forward, double backward, const char* part) {
  EXPECT_EQ(actual.forward, forward) << part;
  EXPECT_EQ(actual.backward, backward) << part;
}

TEST(ModelFlops, HandCountOfASmallHybridConfig) {
  const RunConfig config = handConfig();
  ASSERT_TRUE(validateConfig(config).isOk());
  const ModelFlops f = modelFlopsPerStep(config);
  EXPECT_EQ(f.tokens, 20);

  // Layer 0, softmax attention. Projections wq, wk, wv, wo: 4 x 16 x 16 = 1024 multiply-adds a
  // token, 20 tokens, 2 FLOPs each: 40960. Causal pairs per sequence 1 + 2 + ... + 10 = 55, 110
  // for the batch; QK^T and PV take 16 multiply-adds each per pair (2 heads x 8): 110 x 32 x 2 =
  // 7040. Forward 48000, backward 96000.
  expectCount(f.attention, 48000, 96000, "attention");

  // Layer 1, KDA: H = 2 heads of K = V = 8, P = 16, R = 3. Multiply-adds a token: wq, wk, wv, wo
  // 4 x 256 = 1024; wb 16 x 2 = 32; wf1 16 x 3 = 48, wf2 3 x 16 = 48, wg1 48, wg2 48: 1248 in all;
  // x 20 tokens x 2 = 49920.
  expectCount(f.kdaProjections, 49920, 99840, "kda.projections");
  // Core, per head and sequence, chunks of 4, 4 and 2 tokens. A chunk of 4: L (6 strictly-lower
  // entries x 8) 48, Aqk (10 lower entries x 8) 80, the inverse of I + L by forward substitution
  // (entries (2,0): 1, (3,0): 2, (3,1): 1) 4, W and U (10 x 8 each) 160, Aqk Vn (10 x 8) 80, W S,
  // (q e^G) S and the state update (4 x 8 x 8 each) 768: 1140. A chunk of 2: L 1 x 8 = 8, Aqk
  // 3 x 8 = 24, inverse 0, W and U 48, Aqk Vn 24, state terms 3 x 2 x 64 = 384: 488.
  // 1140 + 1140 + 488 = 2768 per head and sequence; x 2 heads x 2 sequences x 2 FLOPs = 22144.
  expectCount(f.kdaCore, 22144, 44288, "kda.core");

  // Layer 2, gated sparse attention: H = 2 query heads of 8, one kv head. Multiply-adds a token:
  // wq 16 x 16 = 256, output gate 256, wo 256, wk 16 x 8 = 128, wv 128: 1024; x 20 x 2 = 40960.
  expectCount(f.sparseProjections, 40960, 81920, "sparse.projections");
  // Keys per query min(4, t + 1): 1 + 2 + 3 + 4 x 7 = 34 per sequence, 68 for the batch; QK^T
  // and PV 16 multiply-adds each per pair: 68 x 32 x 2 = 4352.
  expectCount(f.sparseAttention, 4352, 8704, "sparse.attention");
  // Indexer projections: wq 16 x 8 = 128, wk 16 x 4 = 64, ww 16 x 2 = 32: 224 a token; x 20 x 2
  // = 8960. Scores over every causal key (110 pairs) at 2 heads x 4 = 8 multiply-adds: 110 x 8
  // x 2 = 1760. Backward: the projections' weight gradients (8960, no input gradient) and dqI,
  // dkI over the 68 selected pairs: 68 x 16 x 2 = 2176.
  expectCount(f.sparseIndexer, 8960 + 1760, 8960 + 2176, "sparse.indexer");

  // MoE in each of the 3 layers. Router 16 x 4 = 64 multiply-adds a token: 20 x 64 x 2 = 2560.
  expectCount(f.router, 3 * 2560, 3 * 5120, "moe.router");
  // Routed experts in the latent width 12: 2 experts a token, gate, up and down 12 x 6 each:
  // 2 x 3 x 72 = 432 multiply-adds a token; 20 x 432 x 2 = 17280.
  expectCount(f.experts, 3 * 17280, 3 * 34560, "moe.experts");
  // Latent down 16 x 12 and up 12 x 16: 384 a token; 20 x 384 x 2 = 15360.
  expectCount(f.latent, 3 * 15360, 3 * 30720, "moe.latent");
  // Shared expert of width 5 on the full width: 3 x 16 x 5 = 240 a token; 20 x 240 x 2 = 9600.
  expectCount(f.sharedExperts, 3 * 9600, 3 * 19200, "moe.shared");

  // LM head 16 x 100 a token: 20 x 1600 x 2 = 64000.
  expectCount(f.lmHead, 64000, 128000, "lm_head");
  expectCount(f.patchEmbed, 0, 0, "patch_embed");

  // 144000 + 149760 + 66432 + 122880 + 13056 + 21856 + 23040 + 155520 + 138240 + 86400 + 192000.
  EXPECT_EQ(f.total(), 1113184);
}

TEST(ModelFlops, PartsSumToTheTotalAndBackwardIsTwiceTheForward) {
  RunConfig config = handConfig();
  config.data.imageSize = 4;
  config.data.patchSize = 2;  // 4 patches of 4 features at the start of each sequence
  ASSERT_TRUE(validateConfig(config).isOk());
  const ModelFlops f = modelFlopsPerStep(config);
  double forward = 0, backward = 0;
  for (const ModelFlops::Part& part : f.parts()) {
    forward += part.flops.forward;
    backward += part.flops.backward;
    const std::string name = part.name;
    if (name != "sparse.indexer" && name != "patch_embed") {
      EXPECT_EQ(part.flops.backward, 2 * part.flops.forward) << name;
    }
    EXPECT_GT(part.flops.forward, 0) << name;  // the config has every part
  }
  EXPECT_EQ(f.sum().forward, forward);
  EXPECT_EQ(f.total(), forward + backward);
  // Patch embedding: 2 sequences x 4 patches x 4 features x 16 x 2 = 1024, weight gradient only.
  expectCount(f.patchEmbed, 1024, 1024, "patch_embed");
}

TEST(ModelFlops, DoublingTheBatchDoublesEveryPart) {
  RunConfig config = handConfig();
  const ModelFlops one = modelFlopsPerStep(config);
  config.data.batchSize *= 2;
  const ModelFlops two = modelFlopsPerStep(config);
  for (size_t i = 0; i < one.parts().size(); ++i) {
    EXPECT_EQ(two.parts()[i].flops.total(), 2 * one.parts()[i].flops.total())
        << one.parts()[i].name;
  }
}

TEST(ModelFlops, DoublingTopKDoublesOnlyTheRoutedExperts) {
  RunConfig config = handConfig();
  const ModelFlops two = modelFlopsPerStep(config);
  config.moe.topK = 4;
  const ModelFlops four = modelFlopsPerStep(config);
  EXPECT_EQ(four.experts.total(), 2 * two.experts.total());
  EXPECT_EQ(four.total() - two.total(), two.experts.total());
}

TEST(ModelFlops, LinearMixersAndTheMoeScaleLinearlyInTheSequenceLength) {
  RunConfig config = handConfig();
  config.model.mixerPattern = "K";
  config.kda.chunkSize = 5;  // 10 and 20 tokens: whole chunks
  const ModelFlops t10 = modelFlopsPerStep(config);
  config.model.seqLen = 20;
  const ModelFlops t20 = modelFlopsPerStep(config);
  EXPECT_EQ(t20.total(), 2 * t10.total());
  config.model.seqLen = 23;  // a partial last chunk (3 of 5) costs less per token than a whole one
  const double ratio = modelFlopsPerStep(config).kdaCore.total() / t10.kdaCore.total();
  EXPECT_GT(ratio, 2.0);
  EXPECT_LT(ratio, 2.3);
}

TEST(ModelFlops, SoftmaxAttentionGrowsWithTheCausalHalfOfTheSquare) {
  RunConfig config = handConfig();
  config.model.mixerPattern = "A";
  config.model.numLayers = 1;
  const double dModel = 16, batch = 2;
  const ModelFlops t10 = modelFlopsPerStep(config);
  config.model.seqLen = 20;
  const ModelFlops t20 = modelFlopsPerStep(config);
  // Attention = projections (linear in N) + 4 D B T (T + 1) / 2 for the causal QK^T and PV.
  const double core10 = 4 * dModel * batch * 55, core20 = 4 * dModel * batch * 210;
  EXPECT_EQ(t20.attention.forward - core20, 2 * (t10.attention.forward - core10));
  EXPECT_GT(t20.total(), 2 * t10.total());
}

TEST(ModelFlops, SparseAttentionCountsTheSelectedKeysOfTheSparseStage) {
  RunConfig config = handConfig();
  config.model.mixerPattern = "S";
  config.model.numLayers = 1;
  const double heads = 2, headDim = 8, batch = 2;
  config.sparse.topK = 10;  // every causal key: the count of dense causal attention
  EXPECT_EQ(modelFlopsPerStep(config).sparseAttention.forward, 4 * heads * headDim * batch * 55);
  config.sparse.topK = 1;  // one key per query
  EXPECT_EQ(modelFlopsPerStep(config).sparseAttention.forward, 4 * heads * headDim * batch * 10);
  const ModelFlops sparse = modelFlopsPerStep(config);
  config.sparse.warmupSteps = 0;  // the count is the sparse stage's whatever the warm-up
  EXPECT_EQ(modelFlopsPerStep(config).total(), sparse.total());
  config.sparse.indexerLossCoef = 0;  // no indexer loss: the indexer has no backward
  const ModelFlops noLoss = modelFlopsPerStep(config);
  EXPECT_EQ(noLoss.sparseIndexer.backward, 0);
  EXPECT_EQ(noLoss.sparseIndexer.forward, sparse.sparseIndexer.forward);
}

TEST(ModelFlops, LossKindAndNonShapeSettingsDoNotChangeTheCount) {
  RunConfig config = handConfig();
  const double dense = modelFlopsPerStep(config).total();
  for (const char* kind : {"chunk", "cce"}) {
    config.loss.kind = kind;
    EXPECT_EQ(modelFlopsPerStep(config).total(), dense) << kind;
  }
  config.moe.capacityFactor = 1.0;  // drops are not subtracted
  config.moe.router = "sigmoid";
  config.model.residual = "attnres";
  config.run.backend = "cuda";
  EXPECT_EQ(modelFlopsPerStep(config).total(), dense);
}

// 2 N x elements, summed over the model's weight matrices that `select` accepts (by local name:
// "kda.wq", "moe.gate", ...); a routed expert's weights see top_k / num_experts of the tokens.
// Built from the parameters Model<float> allocates, independently of model_flops.cpp.
double weightProductsForward(const RunConfig& config,
                             const std::function<bool(const std::string&)>& select) {
  ThreadPool pool(1);
  const ModelDims dims = ModelDims::fromConfig(config);
  Model<float> model(dims, pool);
  double flops = 0;
  for (const Parameter<float>& p : model.parameters()) {
    const std::string local =
        p.name.starts_with("layers.") ? p.name.substr(p.name.find('.', 7) + 1) : p.name;
    if (p.value.rank() < 2 || !select(local)) continue;
    const bool routed = local == "moe.gate" || local == "moe.up" || local == "moe.down";
    const double rows = routed ? double(dims.tokens() * dims.topK) / double(dims.numExperts)
                               : double(dims.tokens());
    flops += 2 * rows * double(p.value.numel());
  }
  return flops;
}

TEST(ModelFlops, WeightProductsMatchTheModelsParameterShapes) {
  const RunConfig config = handConfig();
  const ModelFlops f = modelFlopsPerStep(config);
  auto starts = [](const char* prefix) {
    return [prefix](const std::string& name) { return name.starts_with(prefix); };
  };
  EXPECT_EQ(weightProductsForward(config, starts("attn.")), f.attention.forward - 7040);
  // The short convs' taps [P, 4] are not a product (depthwise).
  EXPECT_EQ(weightProductsForward(config,
                                  [](const std::string& n) {
                                    return n.starts_with("kda.") && !n.starts_with("kda.conv");
                                  }),
            f.kdaProjections.forward);
  EXPECT_EQ(
      weightProductsForward(config, [](const std::string& n) { return n.starts_with("sparse.w"); }),
      f.sparseProjections.forward);
  EXPECT_EQ(weightProductsForward(config, starts("sparse.indexer.")),
            f.sparseIndexer.forward - 1760);
  EXPECT_EQ(weightProductsForward(config, starts("moe.router")), f.router.forward);
  EXPECT_EQ(weightProductsForward(config,
                                  [](const std::string& n) {
                                    return n == "moe.gate" || n == "moe.up" || n == "moe.down";
                                  }),
            f.experts.forward);
  EXPECT_EQ(weightProductsForward(config, starts("moe.latent.")), f.latent.forward);
  EXPECT_EQ(weightProductsForward(config, starts("moe.shared.")), f.sharedExperts.forward);
  EXPECT_EQ(weightProductsForward(config, starts("lm_head")), f.lmHead.forward);
}

// The parameter count of `config`'s model from the layer parameter lists the model is built
// from (mixerParameterSpecs, moeParameterSpecs), without allocating it; no LoRA.
int64_t parameterCountFromSpecs(const RunConfig& config) {
  const ModelDims dims = ModelDims::fromConfig(config);
  const int64_t d = dims.dModel;
  int64_t count = 2 * dims.vocabSize * d + d;  // embedding, LM head, final norm
  if (dims.imagePatches > 0) count += d * dims.patchDim + d;
  if (dims.attnRes) count += 2 * d + dims.numLayers * 4 * d;
  auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t extent : shape) n *= extent;
    return n;
  };
  for (int64_t layer = 0; layer < dims.numLayers; ++layer) {
    count += 2 * d;  // mixer and MoE norms
    for (const auto& spec : mixerParameterSpecs(dims.mixerOf(layer), dims))
      count += numel(spec.shape);
    for (const auto& spec : moeParameterSpecs(dims.moe, d, dims.numExperts, dims.dFf)) {
      count += numel(spec.shape);
    }
  }
  return count;
}

TEST(ModelFlops, ParameterCountFromSpecsMatchesTheModel) {
  auto small = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/small.toml");
  ASSERT_TRUE(small.isOk()) << small.status().toString();
  for (const RunConfig& config : {handConfig(), small.value()}) {
    ThreadPool pool(1);
    Model<float> model(ModelDims::fromConfig(config), pool);
    EXPECT_EQ(parameterCountFromSpecs(config), model.parameterCount());
  }
}

// h200.toml is the full hybrid model at one H200's scale (issue 14): at least 1B parameters and
// 16k tokens per step; its header comment states the parameter count and the model FLOPs per
// step, which must stay those of the config.
TEST(ModelFlops, SampleH200ConfigIsAtOneH200ScaleAndItsCommentIsCurrent) {
  const std::string path = moewb::test::sourceDir() + "/samples/configs/h200.toml";
  auto loaded = loadConfigFile(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  const RunConfig& c = loaded.value();
  ASSERT_TRUE(validateConfig(c).isOk());
  EXPECT_EQ(c.run.backend, "cuda");
  EXPECT_EQ(c.model.mixerPattern, "KKKS");
  EXPECT_GT(c.moe.latentDim, 0);
  EXPECT_GT(c.moe.numSharedExperts, 0);
  EXPECT_EQ(c.moe.activation, "situ");
  EXPECT_EQ(c.moe.router, "sigmoid");
  EXPECT_GT(c.moe.biasUpdateRate, 0);
  EXPECT_EQ(c.loss.kind, "cce");
  EXPECT_GE(c.tokensPerStep(), 16384);
  const int64_t params = parameterCountFromSpecs(c);
  EXPECT_GE(params, int64_t(1'000'000'000));
  const ModelFlops f = modelFlopsPerStep(c);

  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  char flops[64];
  std::snprintf(flops, sizeof flops, "%.0f model FLOPs per step", f.total());
  const std::string paramsText = std::to_string(params) + " parameters";
  EXPECT_NE(text.str().find(paramsText), std::string::npos)
      << "h200.toml should say " << paramsText;
  EXPECT_NE(text.str().find(flops), std::string::npos) << "h200.toml should say " << flops;
  for (const ModelFlops::Part& part : f.parts()) {
    std::printf("  %-20s %.4g  (%.1f%%)\n", part.name, part.flops.total(),
                100 * part.flops.total() / f.total());
  }
}

}  // namespace
}  // namespace moewb::engine
