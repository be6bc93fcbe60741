// Micro-batching (data.micro_batch_size, engine/train/micro_batches.h): the split and its weights,
// the accumulated gradient against the whole batch's (Model<double>), the trainer's losses and
// gradient norms with 1, 2 and 4 micro-batches (bitwise without a split; within fp32 rounding
// with the LM loss alone, close with aux losses and capacity), the activation peak, the
// validation messages, a live change, in-process ranks and the alignment-dump refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "model/cpu/model.h"
#include "moewb/engine/trainer.h"
#include "recording_sink.h"
#include "train/micro_batches.h"
#include "train/synthetic_data.h"

namespace moewb::engine {
namespace {

using Kind = TrainerCommand::Kind;

// Two layers (softmax attention and KDA: both per sequence), dropless, 4 sequences of 16.
RunConfig baseConfig() {
  RunConfig config;
  config.run.threads = 2;
  config.model.numLayers = 2;
  config.model.seqLen = 16;
  config.model.mixerPattern = "AK";
  config.data.batchSize = 4;
  return config;
}

// The LM loss alone: no aux loss, dense head, dropless routing (per token), no expert bias.
RunConfig lmOnlyConfig() {
  RunConfig config = baseConfig();
  config.loss.kind = "dense";
  config.moe.auxLossCoef = 0;
  config.moe.seqAuxLossCoef = 0;
  config.moe.zLossCoef = 0;
  config.moe.capacityFactor = 0;
  return config;
}

std::vector<StepEvent> stepsOf(RunConfig config, int32_t microBatchSize, int64_t steps,
                               test::RecordingSink* sink = nullptr) {
  config.data.microBatchSize = microBatchSize;
  auto trainer = Trainer::create(config, sink);
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  std::vector<StepEvent> out;
  if (!trainer.isOk()) return out;
  for (int64_t i = 0; i < steps; ++i) {
    Result<StepEvent> step = (*trainer)->step();
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    if (step.isOk()) out.push_back(*step);
  }
  return out;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::fabs(b)); }

// Relative tolerances of a split run against the whole batch's (auxLoss < 0: not compared).
struct Closeness {
  double loss = 0, gradNorm = 0, auxLoss = -1;
};

// Expects `split` to have `whole`'s steps, each within `tol` of it; `what` names the run.
void expectTracks(const std::vector<StepEvent>& split, const std::vector<StepEvent>& whole,
                  const Closeness& tol, const std::string& what) {
  ASSERT_EQ(split.size(), whole.size()) << what;
  for (size_t s = 0; s < whole.size(); ++s) {
    EXPECT_LT(relative(split[s].loss, whole[s].loss), tol.loss) << what << " step " << s;
    if (tol.auxLoss >= 0) {
      EXPECT_LT(relative(split[s].auxLoss, whole[s].auxLoss), tol.auxLoss)
          << what << " step " << s;
    }
    EXPECT_LT(relative(split[s].gradNorm, whole[s].gradNorm), tol.gradNorm)
        << what << " step " << s;
  }
}

TEST(MicroBatches, SplitKeepsTheSequencesAndWeighsByValidTargets) {
  RunConfig config = baseConfig();
  config.data.imageSize = 8;  // 4 patches lead each sequence: 3 ignored targets per sequence
  config.data.patchSize = 4;
  SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen, 7);
  const Batch whole = data.batch(3);
  const std::vector<MicroBatch> parts = splitMicroBatches(data.batch(3), 2);
  ASSERT_EQ(parts.size(), 2u);
  double lm = 0, aux = 0;
  for (size_t m = 0; m < parts.size(); ++m) {
    const Batch& b = parts[m].batch;
    EXPECT_EQ(b.batchSize, 2);
    EXPECT_EQ(b.imagePatches, whole.imagePatches);
    for (int64_t i = 0; i < b.inputs.numel(); ++i) {
      EXPECT_EQ(b.inputs[i], whole.inputs[int64_t(m) * b.inputs.numel() + i]);
    }
    EXPECT_EQ(b.patches.numel() * 2, whole.patches.numel());
    EXPECT_EQ(b.patches[0], whole.patches[int64_t(m) * b.patches.numel()]);
    EXPECT_EQ(b.topics[1], whole.topics[2 * m + 1]);
    lm += parts[m].weights.lm;
    aux += parts[m].weights.aux;
  }
  EXPECT_EQ(validTargets(whole), 4 * (16 - 3));
  EXPECT_DOUBLE_EQ(lm, 1.0);
  EXPECT_DOUBLE_EQ(aux, 1.0);
  const std::vector<MicroBatch> one = splitMicroBatches(data.batch(3), 0);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].batch.batchSize, 4);
  EXPECT_EQ(one[0].weights.lm, 1.0);
  EXPECT_EQ(one[0].weights.aux, 1.0);
}

// In double, the gradient accumulated over micro-batches is the whole batch's: the LM loss is the
// same sum reordered, and the z-loss and the sequence aux loss are means over tokens and
// sequences, so their 1 / M average over equal micro-batches is the whole batch's mean too.
TEST(MicroBatches, AccumulatedGradientIsTheWholeBatchsInDouble) {
  RunConfig config = lmOnlyConfig();
  config.moe.zLossCoef = 0.01;
  config.moe.seqAuxLossCoef = 0.01;
  ThreadPool pool(2);
  SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen, 5);
  Model<double> whole(ModelDims::fromConfig(config), pool);
  whole.initialize(11);
  whole.zeroGrads();
  const ForwardResult full = whole.forward(data.batch(0), nullptr);
  whole.backward(nullptr);

  config.data.microBatchSize = 1;
  Model<double> split(ModelDims::forwardFromConfig(config), pool);
  split.initialize(11);
  split.zeroGrads();
  ForwardResult step;
  std::vector<MicroBatch> parts = splitMicroBatches(data.batch(0), 1);
  ASSERT_EQ(parts.size(), 4u);
  for (size_t m = 0; m < parts.size(); ++m) {
    split.setLossWeights(parts[m].weights);
    addMicroBatchResult(step, split.forward(parts[m].batch, nullptr), parts[m].weights, m == 0);
    split.backward(nullptr);
  }
  EXPECT_NEAR(step.loss, full.loss, 1e-12 * full.loss);
  EXPECT_NEAR(step.auxLoss, full.auxLoss, 1e-12 * full.auxLoss);
  for (size_t l = 0; l < full.expertCounts.size(); ++l) {
    EXPECT_EQ(step.expertCounts[l], full.expertCounts[l]) << "layer " << l;
  }
  double maxError = 0, maxGrad = 0;
  for (size_t i = 0; i < whole.parameters().size(); ++i) {
    const Tensor<double>& a = whole.parameters()[i].grad;
    const Tensor<double>& b = split.parameters()[i].grad;
    for (int64_t j = 0; j < a.numel(); ++j) {
      maxError = std::max(maxError, std::fabs(a[j] - b[j]));
      maxGrad = std::max(maxGrad, std::fabs(a[j]));
    }
  }
  EXPECT_GT(maxGrad, 0);
  EXPECT_LT(maxError, 1e-12 * maxGrad);
}

TEST(MicroBatches, WholeBatchAsOneMicroBatchIsBitwiseToday) {
  const RunConfig config = baseConfig();  // aux losses on: the unsplit path must not change
  const std::vector<StepEvent> today = stepsOf(config, 0, 3);
  const std::vector<StepEvent> whole = stepsOf(config, 4, 3);
  ASSERT_EQ(today.size(), 3u);
  ASSERT_EQ(whole.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(today[s].loss, whole[s].loss) << "step " << s;
    EXPECT_EQ(today[s].auxLoss, whole[s].auxLoss) << "step " << s;
    EXPECT_EQ(today[s].gradNorm, whole[s].gradNorm) << "step " << s;
  }
}

TEST(MicroBatches, TwoAndFourMicroBatchesTrackTheWholeBatchWithTheLmLossAlone) {
  const RunConfig config = lmOnlyConfig();
  const std::vector<StepEvent> whole = stepsOf(config, 0, 4);
  for (int32_t micro : {2, 1}) {
    const std::vector<StepEvent> split = stepsOf(config, micro, 4);
    expectTracks(split, whole, {1e-6, 1e-6}, "micro " + std::to_string(micro));
    for (size_t s = 0; s < std::min(split.size(), whole.size()); ++s) {
      EXPECT_EQ(split[s].tokens, whole[s].tokens);
    }
  }
}

TEST(MicroBatches, AuxLossesAndCapacityStayClose) {
  RunConfig config = baseConfig();
  config.moe.seqAuxLossCoef = 0.01;
  config.moe.zLossCoef = 0.001;
  config.moe.capacityFactor = 1.25;
  config.moe.biasUpdateRate = 0.01;
  const std::vector<StepEvent> whole = stepsOf(config, 0, 3);
  const std::vector<StepEvent> split = stepsOf(config, 2, 3);
  expectTracks(split, whole, {1e-3, 1e-2, 1e-2}, "2 sequences a micro-batch");
}

// The largest memory.activations_bytes counter of a run of 2 steps.
double activationPeak(const RunConfig& config, int32_t microBatchSize, int64_t* forwards) {
  test::RecordingSink sink;
  stepsOf(config, microBatchSize, 2, &sink);
  double peak = 0;
  for (const CounterEvent& c : sink.counters) {
    if (c.name == "memory.activations_bytes") peak = std::max(peak, c.value);
  }
  *forwards = 0;
  for (const PhaseEvent& e : sink.phases) *forwards += e.phase == Phase::kForward ? 1 : 0;
  return peak;
}

TEST(MicroBatches, ActivationPeakFallsAndEveryMicroBatchIsTraced) {
  const RunConfig config = lmOnlyConfig();  // dense head: [N, V] logits per forward
  int64_t forwardsWhole = 0, forwardsSplit = 0;
  const double whole = activationPeak(config, 0, &forwardsWhole);
  const double split = activationPeak(config, 1, &forwardsSplit);
  EXPECT_EQ(forwardsWhole, 2);
  EXPECT_EQ(forwardsSplit, 8);  // 4 forward phases a step
  EXPECT_GT(whole, 0);
  EXPECT_LT(split, 0.5 * whole);
}

TEST(MicroBatches, ValidationNamesTheKeysAndTheAcceptedValues) {
  RunConfig config = baseConfig();
  config.data.microBatchSize = 3;
  Status notDivisor = validateConfig(config);
  EXPECT_EQ(notDivisor.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(notDivisor.message().find("data.micro_batch_size"), std::string::npos);
  EXPECT_NE(notDivisor.message().find("does not divide the 4 sequences"), std::string::npos)
      << notDivisor.message();
  EXPECT_NE(notDivisor.message().find("data.batch_size = 4"), std::string::npos);
  EXPECT_NE(notDivisor.message().find("divisor of 4 (1, 2, 4)"), std::string::npos);

  config.data.microBatchSize = -1;
  Status negative = validateConfig(config);
  EXPECT_NE(negative.message().find("data.micro_batch_size = -1 is not accepted; accepted: 0.."),
            std::string::npos)
      << negative.message();

  config.data.batchSize = 8;
  config.parallel.worldSize = 2;  // 4 sequences a rank
  config.data.microBatchSize = 4;
  EXPECT_TRUE(validateConfig(config).isOk());
  config.data.microBatchSize = 8;
  Status perRank = validateConfig(config);
  EXPECT_NE(perRank.message().find("parallel.world_size = 2"), std::string::npos)
      << perRank.message();

  config = baseConfig();
  config.swap.mode = "manual";
  config.data.microBatchSize = 2;
  Status swap = validateConfig(config);
  EXPECT_NE(swap.message().find("swap.mode"), std::string::npos) << swap.message();
  EXPECT_NE(swap.message().find("data.micro_batch_size = 2"), std::string::npos);
  config.data.microBatchSize = 4;  // one micro-batch: swap runs as without the key
  EXPECT_TRUE(validateConfig(config).isOk());
}

TEST(MicroBatches, LiveChangeTakesEffectAtTheNextStep) {
  test::RecordingSink sink;
  RunConfig config = lmOnlyConfig();
  auto trainer = Trainer::create(config, &sink);
  ASSERT_TRUE(trainer.isOk());
  Trainer& t = **trainer;
  ASSERT_TRUE(t.run(2).isOk());
  auto bad = t.post({Kind::kApplyPatch, {"data.micro_batch_size=3"}, "test"});
  auto good = t.post({Kind::kApplyPatch, {"data.micro_batch_size=1"}, "test"});
  ASSERT_TRUE(t.run(2).isOk());
  EXPECT_EQ(bad.get().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(good.get().isOk());
  EXPECT_EQ(t.config().data.microBatchSize, 1);
  ASSERT_EQ(sink.configChanges.size(), 1u);
  EXPECT_EQ(sink.configChanges[0].key, "data.micro_batch_size");
  EXPECT_EQ(sink.configChanges[0].step, 2);
  std::vector<int> forwards(4, 0);
  for (const PhaseEvent& e : sink.phases) {
    if (e.phase == Phase::kForward) ++forwards[size_t(e.step)];
  }
  EXPECT_EQ(forwards, (std::vector<int>{1, 1, 4, 4}));
  // The split steps continue the same training: step 2's loss is that of an unsplit run.
  const std::vector<StepEvent> whole = stepsOf(config, 0, 4);
  ASSERT_EQ(sink.steps.size(), 4u);
  EXPECT_LT(relative(sink.steps[3].loss, whole[3].loss), 1e-6);
}

TEST(MicroBatches, InProcessRanksAccumulateBeforeTheirReduceScatter) {
  RunConfig config = lmOnlyConfig();
  config.run.threads = 1;
  config.data.batchSize = 8;
  config.parallel.worldSize = 2;
  config.parallel.ep = 2;
  const std::vector<StepEvent> whole = stepsOf(config, 0, 3);
  const std::vector<StepEvent> split = stepsOf(config, 2, 3);
  ASSERT_EQ(split.size(), 3u);
  ASSERT_EQ(whole.size(), 3u);
  expectTracks(split, whole, {1e-6, 1e-6}, "2 ranks");
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(split[s].tokens, 4 * 16);  // this rank's tokens, all of its micro-batches
  }
}

TEST(MicroBatches, AlignmentDumpsRefuseASplitStep) {
  RunConfig config = baseConfig();
  config.data.microBatchSize = 2;
  auto trainer = Trainer::create(config, nullptr);
  ASSERT_TRUE(trainer.isOk());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "moewb-micro-batch-dump";
  (*trainer)->setDumpPolicy(0, 1, dir.string());
  Result<StepEvent> step = (*trainer)->step();
  ASSERT_FALSE(step.isOk());
  EXPECT_EQ(step.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(step.status().message().find("data.micro_batch_size = 2"), std::string::npos)
      << step.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000000.safetensors"));
}

}  // namespace
}  // namespace moewb::engine
