// The whole decoder on the GPU against the CPU reference: one forward + backward (loss, aux loss,
// expert counts and every parameter's gradient) on the same bf16-rounded weights and batch, for
// several MoE variants; out-of-memory inside a step as a clear, recoverable error.
#include "model/cuda/cuda_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test_util.h"
#include "train/synthetic_data.h"
#include "moewb/engine/config.h"
#include "runtime/thread_pool.h"
#include "../../source_dir.h"

namespace moewb::engine::cuda {
namespace {

RunConfig smallMoeConfig() {
  RunConfig config;
  config.model.vocabSize = 256;
  config.model.dModel = 64;
  config.model.numLayers = 2;
  config.model.numHeads = 4;
  config.model.seqLen = 32;
  config.model.mixerPattern = "A";
  config.moe.numExperts = 8;
  config.moe.topK = 2;
  config.moe.dFf = 64;
  config.data.batchSize = 4;
  return config;
}

// Rounds every weight to bf16 so both backends start from the same numbers.
void roundWeightsToBf16(Model<float>& model) {
  for (Parameter<float>& p : model.parameters()) p.value = roundedToBf16(p.value);
}

struct StepOutputs {
  ForwardResult forward;
  std::vector<Tensor<float>> grads;
};

StepOutputs cpuStep(const RunConfig& config, const Batch& batch) {
  ThreadPool pool(2);
  Model<float> model(ModelDims::fromConfig(config), pool);
  model.initialize(config.run.seed);
  roundWeightsToBf16(model);
  model.zeroGrads();
  StepOutputs out;
  out.forward = model.forward(batch, nullptr);
  model.backward(nullptr);
  for (const Parameter<float>& p : model.parameters()) out.grads.push_back(p.grad.clone());
  return out;
}

class CudaModelTest : public CudaTest {
 protected:
  void expectStepMatchesCpu(const RunConfig& config, double gradTolerance) {
    const SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen,
                             config.run.seed);
    const Batch batch = data.batch(0);
    const StepOutputs want = cpuStep(config, batch);

    ThreadPool pool(1);
    Model<float> host(ModelDims::fromConfig(config), pool);
    host.initialize(config.run.seed);
    roundWeightsToBf16(host);
    MOEWB_ASSIGN_OR_FAIL(auto model, CudaModel::create(context(), host));
    MOEWB_ASSERT_OK(model->parameters().zeroGrads(context()));
    MOEWB_ASSIGN_OR_FAIL(ForwardResult got, model->forward(batch, nullptr));
    MOEWB_ASSERT_OK(model->backward(nullptr));
    MOEWB_ASSERT_OK(model->parameters().downloadGrads(context(), host.parameters()));

    EXPECT_NEAR(got.loss, want.forward.loss, 1e-2 * want.forward.loss);
    EXPECT_NEAR(got.auxLoss, want.forward.auxLoss, 2e-2 * std::abs(want.forward.auxLoss) + 1e-6);
    ASSERT_EQ(got.expertCounts.size(), want.forward.expertCounts.size());
    for (size_t l = 0; l < got.expertCounts.size(); ++l) {
      int64_t moved = 0, total = 0;
      for (size_t e = 0; e < got.expertCounts[l].size(); ++e) {
        moved += std::abs(got.expertCounts[l][e] - want.forward.expertCounts[l][e]);
        total += want.forward.expertCounts[l][e];
      }
      // bf16 activations may flip a near-tie of the top-k for a few tokens, never many.
      EXPECT_LE(moved, total / 50 + 2) << "layer " << l;
    }
    const auto& params = host.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const double error = relativeError(params[i].grad, want.grads[i]);
      EXPECT_LT(error, gradTolerance) << params[i].name;
    }
  }
};

// The per-parameter tolerances are bf16-vs-fp32 gradient errors measured on one weight draw; with
// the per-name init streams (2026-12-01) four of them moved up (max 0.060, 0.163, 0.129, 0.137
// against 0.05, 0.15, 0.1, 0.1), so those four have more room; every new kernel in the same call
// gave its predecessor's bits, so the draw is what moved.
TEST_F(CudaModelTest, SoftmaxRouterStepMatchesCpu) {
  expectStepMatchesCpu(smallMoeConfig(), 8e-2);
}

TEST_F(CudaModelTest, SigmoidSharedLatentSituStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.moe.router = "sigmoid";
  config.moe.numSharedExperts = 1;
  config.moe.latentDim = 32;
  config.moe.activation = "situ";
  config.moe.seqAuxLossCoef = 0.01;
  config.moe.zLossCoef = 0.001;
  config.moe.biasUpdateRate = 0.001;
  expectStepMatchesCpu(config, 5e-2);
}

// Gradient bounds: bf16 activations through the stack plus the few top-k near-ties that bf16
// flips (at most 2% of assignments, checked above) put the router, norm and expert gradients of
// these steps 3-10% from the fp32 reference (measured on the H200: bench/RESULTS.md); an
// indexing or formula bug shows as an error near 1.
TEST_F(CudaModelTest, GroupLimitedRoutingStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.moe.numExperts = 16;
  config.moe.topK = 4;
  config.moe.numGroups = 4;
  config.moe.topkGroups = 2;
  expectStepMatchesCpu(config, 0.1);
}

// samples/configs/small.toml's architecture (KDA x3 + gated sparse attention, latent SiTU MoE with
// a shared expert, sigmoid router with bias, CCE) at a test size, in both sparse stages.
RunConfig hybridConfig() {
  RunConfig config = smallMoeConfig();
  config.model.numLayers = 4;
  config.model.mixerPattern = "KKKS";
  config.kda.headDim = 16;
  config.sparse.topK = 8;
  config.sparse.warmupSteps = 0;  // sparse stage (step 0 >= warmup)
  config.moe.numExperts = 16;
  config.moe.topK = 4;
  config.moe.router = "sigmoid";
  config.moe.biasUpdateRate = 0.001;
  config.moe.numSharedExperts = 1;
  config.moe.latentDim = 32;
  config.moe.activation = "situ";
  config.loss.kind = "cce";
  config.loss.cceVocabBlock = 64;
  return config;
}

// 0.2 as the dense warm-up variant below: the KDA intra forward's round 8 (tensor-core diagonal
// blocks, 2026-12-02) moves the KDA outputs' last bits, which flips a bf16 routing near-tie in
// the last layer: its MoE weights' gradient errors went from under 0.15 to 0.163-0.167 while
// every KDA weight's error stayed within the old bound (H200, first version of round 8).
TEST_F(CudaModelTest, HybridKdaSparseCceStepMatchesCpu) {
  expectStepMatchesCpu(hybridConfig(), 0.2);
}

// samples/configs/small.toml itself (dense warm-up stage at step 0, as its first step runs).
TEST_F(CudaModelTest, SmallSampleConfigStepMatchesCpu) {
  auto config = loadConfigFile(moewb::test::sourceDir() + "/samples/configs/small.toml");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  expectStepMatchesCpu(config.value(), 0.15);
}

TEST_F(CudaModelTest, HybridDenseWarmupChunkLossStepMatchesCpu) {
  RunConfig config = hybridConfig();
  config.sparse.warmupSteps = 10;  // dense warm-up stage
  config.loss.kind = "chunk";
  config.loss.chunkTokens = 48;
  expectStepMatchesCpu(config, 0.2);
}

// Capacity cut-offs turn a bf16 near-tie of the routing weights into a different dropped token,
// which moves that token's whole contribution: the step still matches the CPU's loss and counts,
// the worst gradient (the router's) within 25%.
TEST_F(CudaModelTest, CapacityStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.moe.capacityFactor = 1.0;
  config.moe.dropPolicy = "probs";
  expectStepMatchesCpu(config, 0.25);
  config.moe.dropPolicy = "position";
  config.moe.latentDim = 32;
  expectStepMatchesCpu(config, 0.25);
}

// The permute / combine fusions change where the work happens, not the function: on the same
// device, weights and batch, the fused step equals the unfused one up to bf16 rounding (dropless:
// with a capacity cut-off that rounding can move a token across the cut in the next layer).
TEST_F(CudaModelTest, FusedMoeStepEqualsUnfusedOnTheGpu) {
  RunConfig config = smallMoeConfig();
  const SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen,
                           config.run.seed);
  const Batch batch = data.batch(0);
  std::vector<std::vector<Tensor<float>>> grads;
  std::vector<double> losses;
  for (bool fused : {false, true}) {
    config.fusion.permuteIntoExperts = fused;
    config.fusion.combineIntoExperts = fused;
    ThreadPool pool(1);
    Model<float> host(ModelDims::fromConfig(config), pool);
    host.initialize(config.run.seed);
    MOEWB_ASSIGN_OR_FAIL(auto model, CudaModel::create(context(), host));
    MOEWB_ASSIGN_OR_FAIL(ForwardResult forward, model->forward(batch, nullptr));
    MOEWB_ASSERT_OK(model->backward(nullptr));
    MOEWB_ASSERT_OK(model->parameters().downloadGrads(context(), host.parameters()));
    losses.push_back(forward.loss);
    grads.emplace_back();
    for (const Parameter<float>& p : host.parameters()) grads.back().push_back(p.grad.clone());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-3 * losses[0]);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_LT(relativeError(grads[1][i], grads[0][i]), 2e-2) << i;
  }
}

TEST_F(CudaModelTest, AttnResidualsStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.model.residual = "attnres";
  config.model.numLayers = 3;
  config.model.attnresBlockSize = 2;
  expectStepMatchesCpu(config, 0.16);
}

TEST_F(CudaModelTest, LoraStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.lora.enabled = true;
  config.lora.rank = 4;
  config.lora.targets = "all";
  expectStepMatchesCpu(config, 0.1);
}

TEST_F(CudaModelTest, ImagePatchesStepMatchesCpu) {
  RunConfig config = smallMoeConfig();
  config.data.imageSize = 8;
  config.data.patchSize = 4;
  expectStepMatchesCpu(config, 0.17);
}

TEST_F(CudaModelTest, UnsupportedSettingsAreNamed) {
  RunConfig config = smallMoeConfig();
  config.model.mixerPattern = "K";
  config.kda.headDim = 256;  // wider than the CUDA KDA kernels take
  Status status = CudaModel::checkSupported(ModelDims::fromConfig(config));
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("kda.head_dim"), std::string::npos) << status.message();
}

TEST_F(CudaModelTest, ExpertShardsWithoutAnEpCommunicatorAreRefused) {
  ModelDims dims = ModelDims::fromConfig(smallMoeConfig());
  dims.expertShards = 2;  // one rank's share of expert parallelism, but no setParallel
  ThreadPool pool(1);
  Model<float> host(dims, pool);
  host.initialize(1);
  MOEWB_ASSIGN_OR_FAIL(auto context, CudaContext::create(0));
  MOEWB_ASSIGN_OR_FAIL(auto model, CudaModel::create(*context, host));
  const RunConfig config = smallMoeConfig();
  const SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen, 1);
  auto forward = model->forward(data.batch(0), nullptr);
  ASSERT_FALSE(forward.isOk());
  EXPECT_EQ(forward.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(forward.status().message().find("EP communicator"), std::string::npos)
      << forward.status().message();
}

TEST_F(CudaModelTest, OutOfMemoryInAStepIsReportedAndTheModelStaysUsable) {
  RunConfig config = smallMoeConfig();
  config.data.batchSize = 64;
  config.model.seqLen = 256;
  const SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen,
                           config.run.seed);
  const Batch batch = data.batch(0);
  ThreadPool pool(1);
  Model<float> host(ModelDims::fromConfig(config), pool);
  host.initialize(config.run.seed);
  // Enough for the weights and state, far too little for this batch's activations.
  MOEWB_ASSIGN_OR_FAIL(auto small, CudaContext::create(0, int64_t(24) << 20));
  MOEWB_ASSIGN_OR_FAIL(auto model, CudaModel::create(*small, host));
  const int64_t stateBytes = small->allocator().stats().totalInUseBytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto forward = model->forward(batch, nullptr);
    ASSERT_FALSE(forward.isOk());
    EXPECT_EQ(forward.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(forward.status().message().find("activations"), std::string::npos)
        << forward.status().message();
    model->releaseActivations();
    MOEWB_ASSERT_OK(small->synchronize());
    EXPECT_EQ(small->allocator().stats().totalInUseBytes, stateBytes) << "attempt " << attempt;
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
