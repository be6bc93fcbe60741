// Trainer: the EventSink contract (phases for every layer and pass each step, one StepEvent per
// step, expert loads summing to N k, run start/end), determinism (same seed twice, 1 vs 2
// threads, bitwise), stop requests, a null sink, and config errors.
#include "moewb/engine/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "recording_sink.h"
#include "train/memory_estimate.h"

namespace moewb::engine {
namespace {

using test::RecordingSink;

RunConfig smallConfig() {
  RunConfig config;
  config.run.threads = 2;
  config.model.seqLen = 16;
  config.data.batchSize = 4;
  return config;
}

std::vector<double> lossesOf(const RunConfig& config, int64_t steps) {
  auto trainer = Trainer::create(config, nullptr);
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  std::vector<double> losses;
  for (int64_t i = 0; i < steps; ++i) {
    Result<StepEvent> step = (*trainer)->step();
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    losses.push_back(step->loss);
    losses.push_back(step->gradNorm);
    losses.push_back(step->auxLoss);
  }
  return losses;
}

TEST(Trainer, EmitsTheSinkContract) {
  RunConfig config = smallConfig();
  RecordingSink sink;
  auto trainer = Trainer::create(config, &sink);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  ASSERT_TRUE((*trainer)->run(3).isOk());
  EXPECT_EQ((*trainer)->stepsDone(), 3);

  ASSERT_EQ(sink.runStarts.size(), 1u);
  EXPECT_EQ(sink.order.front(), RecordingSink::Kind::kRunStart);
  EXPECT_EQ(sink.order.back(), RecordingSink::Kind::kRunEnd);
  EXPECT_EQ(sink.runStarts[0].configToml, toToml(config));
  EXPECT_EQ(sink.runStarts[0].numLayers, 2);
  EXPECT_EQ(sink.runStarts[0].numExperts, 8);
  // The CPU runner's start-up: the host model's allocation, then its initialisation.
  ASSERT_EQ(sink.runStarts[0].startup.size(), 2u);
  EXPECT_EQ(sink.runStarts[0].startup[0].name, "host model allocation");
  EXPECT_EQ(sink.runStarts[0].startup[1].name, "weight initialisation");
  for (const StartupPhase& phase : sink.runStarts[0].startup) EXPECT_GE(phase.ns, 0);
  ASSERT_EQ(sink.runEnds.size(), 1u);
  EXPECT_EQ(sink.runEnds[0].outcome, RunOutcome::kCompleted);
  EXPECT_EQ(sink.runEnds[0].stepsDone, 3);

  ASSERT_EQ(sink.steps.size(), 3u);
  const int64_t tokens = config.tokensPerStep();
  for (int64_t s = 0; s < 3; ++s) {
    const StepEvent& step = sink.steps[size_t(s)];
    EXPECT_EQ(step.step, s);
    EXPECT_EQ(step.tokens, tokens);
    EXPECT_GT(step.tokensPerSecond, 0);
    EXPECT_GT(step.peakBytes, 0);
    EXPECT_GT(step.gradNorm, 0);
    EXPECT_GT(step.lr, 0);
    EXPECT_GT(step.auxLoss, 0);
    EXPECT_TRUE(std::isfinite(step.loss));
    EXPECT_LE(step.startNs, step.endNs);
  }
  // Exactly one StepEvent per step, and it is the step's last event.
  size_t stepIndex = 0, phaseIndex = 0;
  for (RecordingSink::Kind kind : sink.order) {
    if (kind == RecordingSink::Kind::kStep) ++stepIndex;
    if (kind == RecordingSink::Kind::kPhase) {
      EXPECT_EQ(sink.phases[phaseIndex++].step, int64_t(stepIndex));
    }
  }
  // Every (step, layer, phase, pass) appears once; per-layer phases nest inside their pass range.
  std::map<std::tuple<int64_t, int32_t, Phase, Pass>, int> seen;
  std::map<std::pair<int64_t, Pass>, PhaseEvent> passRange;
  for (const PhaseEvent& e : sink.phases) {
    ++seen[{e.step, e.layer, e.phase, e.pass}];
    if (e.phase == Phase::kForward || e.phase == Phase::kBackward) passRange[{e.step, e.pass}] = e;
    EXPECT_LE(e.startNs, e.endNs);
  }
  // The default pattern "KKKS" makes both layers of this 2-layer model KDA layers.
  const Phase layerPhases[] = {Phase::kKda, Phase::kRouter, Phase::kPermute, Phase::kExperts,
                               Phase::kCombine};
  for (int64_t s = 0; s < 3; ++s) {
    for (Pass pass : {Pass::kForward, Pass::kBackward}) {
      for (int32_t layer = 0; layer < 2; ++layer) {
        for (Phase phase : layerPhases) EXPECT_EQ((seen[{s, layer, phase, pass}]), 1);
        EXPECT_EQ((seen[{s, layer, Phase::kAttention, pass}]), 0);
      }
      EXPECT_EQ((seen[{s, -1, Phase::kEmbedding, pass}]), 1);
      EXPECT_EQ((seen[{s, -1, Phase::kLoss, pass}]), 1);
    }
    EXPECT_EQ((seen[{s, -1, Phase::kForward, Pass::kForward}]), 1);
    EXPECT_EQ((seen[{s, -1, Phase::kBackward, Pass::kBackward}]), 1);
    EXPECT_EQ((seen[{s, -1, Phase::kOptimizer, Pass::kNone}]), 1);
  }
  EXPECT_EQ(sink.phases.size(), size_t(3 * (2 * (2 * 5 + 2) + 3)));
  for (const PhaseEvent& e : sink.phases) {
    if (phaseDepth(e.phase) != 2) continue;
    const PhaseEvent& range = passRange[{e.step, e.pass}];
    EXPECT_GE(e.startNs, range.startNs);
    EXPECT_LE(e.endNs, range.endNs);
  }
  // One expert-load event per layer per step, summing to N k.
  ASSERT_EQ(sink.loads.size(), 6u);
  for (const ExpertLoadEvent& load : sink.loads) {
    ASSERT_EQ(load.tokensPerExpert.size(), 8u);
    ASSERT_EQ(load.droppedPerExpert.size(), 8u);
    int64_t total = 0;
    for (int64_t c : load.tokensPerExpert) total += c;
    EXPECT_EQ(total, tokens * config.moe.topK);
  }
  std::set<std::string> counterNames;
  for (const CounterEvent& c : sink.counters) counterNames.insert(c.name);
  EXPECT_TRUE(counterNames.count("lr"));
  // The memory account: every category reported, weights and optimizer state as sized by the
  // model (fp32: 4 bytes, two AdamW moments per weight), activations > 0.
  std::map<std::string, double> last;
  for (const CounterEvent& c : sink.counters) last[c.name] = c.value;
  const double weightBytes = 4.0 * double((*trainer)->parameterCount());
  EXPECT_EQ(last["memory.weights_bytes"], weightBytes);
  EXPECT_EQ(last["memory.grads_bytes"], weightBytes);
  EXPECT_EQ(last["memory.optimizer_bytes"], 2 * weightBytes);
  EXPECT_GT(last["memory.activations_bytes"], 0.0);
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
  const RunConfig config = smallConfig();
  const std::vector<double> a = lossesOf(config, 4), b = lossesOf(config, 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  RunConfig other = config;
  other.run.seed = 77;
  EXPECT_NE(lossesOf(other, 1)[0], a[0]);
}

TEST(Trainer, OneAndTwoThreadsGiveBitIdenticalLosses) {
  RunConfig one = smallConfig(), two = smallConfig();
  one.run.threads = 1;
  two.run.threads = 2;
  const std::vector<double> a = lossesOf(one, 4), b = lossesOf(two, 4);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
}

class StopAfterStep : public RecordingSink {
 public:
  StopAfterStep(int64_t stopAt) : m_stopAt(stopAt) {}
  void onStep(const StepEvent& e) override {
    RecordingSink::onStep(e);
    if (e.step == m_stopAt) trainer->requestStop();
  }
  Trainer* trainer = nullptr;

 private:
  int64_t m_stopAt;
};

TEST(Trainer, RequestStopEndsTheRunAfterTheCurrentStep) {
  StopAfterStep sink(1);
  auto trainer = Trainer::create(smallConfig(), &sink);
  ASSERT_TRUE(trainer.isOk());
  sink.trainer = trainer->get();
  ASSERT_TRUE((*trainer)->run(10).isOk());
  EXPECT_EQ((*trainer)->stepsDone(), 2);
  ASSERT_EQ(sink.runEnds.size(), 1u);
  EXPECT_EQ(sink.runEnds[0].outcome, RunOutcome::kStopped);
  EXPECT_EQ(sink.runEnds[0].stepsDone, 2);
}

TEST(Trainer, StopRequestedBetweenRunsStopsTheNextRunAtOnce) {
  RecordingSink sink;
  auto trainer = Trainer::create(smallConfig(), &sink);
  ASSERT_TRUE(trainer.isOk());
  ASSERT_TRUE((*trainer)->run(1).isOk());
  (*trainer)->requestStop();
  ASSERT_TRUE((*trainer)->run(5).isOk());
  EXPECT_EQ((*trainer)->stepsDone(), 1);
  ASSERT_EQ(sink.runEnds.size(), 2u);
  EXPECT_EQ(sink.runEnds[1].outcome, RunOutcome::kStopped);
  EXPECT_EQ(sink.runStarts.size(), 1u);
  ASSERT_TRUE((*trainer)->run(1).isOk());  // the request was consumed
  EXPECT_EQ((*trainer)->stepsDone(), 2);
}

TEST(Trainer, RunsWithoutASink) {
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  EXPECT_TRUE((*trainer)->run(2).isOk());
  Result<StepEvent> step = (*trainer)->step();
  ASSERT_TRUE(step.isOk());
  EXPECT_EQ(step->step, 2);
  EXPECT_GT((*trainer)->parameterCount(), 0);
  EXPECT_EQ((*trainer)->threadCount(), 2);
  EXPECT_EQ((*trainer)->run(-1).code(), StatusCode::kInvalidArgument);
}

TEST(Trainer, RejectsInvalidAndOversizedConfigs) {
  RunConfig bad = smallConfig();
  bad.moe.topK = 9;
  auto result = Trainer::create(bad, nullptr);
  ASSERT_FALSE(result.isOk());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  RunConfig huge = smallConfig();
  huge.model.dModel = 65536;
  huge.moe.dFf = 1048576;
  result = Trainer::create(huge, nullptr);
  ASSERT_FALSE(result.isOk());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  // `moewb config` asks the same question without building anything and gets the same answer.
  const Status fits = checkFitsThisMachine(huge);
  EXPECT_EQ(fits.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fits.message(), result.status().message());
  EXPECT_TRUE(checkFitsThisMachine(smallConfig()).isOk());
}

// Issue 19, item 8: the estimate left out the gated sparse layer's dense warm-up tensors (the
// indexer's [B*T, T] logits, target, probabilities, gradient and selection), so a config that
// could not fit trained until it ran out of memory instead of being refused.
TEST(Trainer, MemoryEstimateCountsTheSparseLayersDenseStage) {
  RunConfig config = smallConfig();
  config.run.backend = "cpu";
  config.model.seqLen = 4096;
  config.model.mixerPattern = "A";
  const double attention = estimateCpuTrainingBytes(ModelDims::fromConfig(config));
  config.model.mixerPattern = "S";
  config.sparse.warmupSteps = 10;
  const ModelDims sparseDims = ModelDims::fromConfig(config);
  const double tokens = double(sparseDims.tokens());
  const double indexerBytes = 5.0 * tokens * 4096.0 * 4.0 * double(sparseDims.numLayers);
  EXPECT_GE(estimateCpuTrainingBytes(sparseDims), attention + indexerBytes);
  config.sparse.warmupSteps = 0;  // the sparse stage from the start: [B*T, top_k] only
  EXPECT_LT(estimateCpuTrainingBytes(ModelDims::fromConfig(config)), attention);
  // A machine whose half just holds the attention model takes it and refuses the sparse one.
  const double memoryBytes = 2.02 * attention;
  config.model.mixerPattern = "A";
  EXPECT_TRUE(checkHostMemory(ModelDims::fromConfig(config), true, memoryBytes).isOk());
  const Status refused = checkHostMemory(sparseDims, true, memoryBytes);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("sparse.warmup_steps = 0"), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace moewb::engine
