// End-to-end training on the synthetic data: the default tiny config halves its loss within 200
// steps; a hotter topic distribution (skew 2) gives a more imbalanced expert load than uniform
// topics (skew 0), and the switch aux loss reduces that imbalance.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "moewb/engine/trainer.h"
#include "recording_sink.h"

namespace moewb::engine {
namespace {

using test::RecordingSink;

TEST(Training, TinyDefaultConfigHalvesItsLossIn200Steps) {
  RunConfig config;  // the tiny sizes with the default hybrid mixer pattern (2 KDA layers)
  RecordingSink sink;
  auto trainer = Trainer::create(config, &sink);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*trainer)->run(200).isOk());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(sink.steps.size(), 200u);
  const double first = sink.steps.front().loss;
  double last = 0;
  for (size_t i = 190; i < 200; ++i) last += sink.steps[i].loss / 10;
  double tokensPerSecond = 0;
  for (size_t i = 1; i < 200; ++i) tokensPerSecond += sink.steps[i].tokensPerSecond / 199;
  EXPECT_NEAR(first, std::log(256.0), 0.1);
  EXPECT_LT(last, 0.5 * first);
  RecordProperty("seconds", std::to_string(seconds));
  RecordProperty("first_loss", std::to_string(first));
  RecordProperty("last_loss", std::to_string(last));
  std::printf(
      "tiny config: 200 steps in %.2f s (%d threads), %.0f tokens/s, loss %.4f -> %.4f, "
      "peak %.2f MiB\n",
      seconds, (*trainer)->threadCount(), tokensPerSecond, first, last,
      double(sink.steps.back().peakBytes) / (1 << 20));
}

// Mean over the last `window` steps and all layers of max/mean tokens per expert. Short
// sequences in a larger batch keep the batch-to-batch variation of topics small, so what remains
// is the persistent imbalance the skew causes.
double meanImbalance(double skew, double auxLossCoef, int64_t steps, int64_t window) {
  RunConfig config;
  config.data.skew = skew;
  config.data.batchSize = 32;
  config.model.seqLen = 16;
  config.moe.auxLossCoef = auxLossCoef;
  RecordingSink sink;
  auto trainer = Trainer::create(config, &sink);
  EXPECT_TRUE(trainer.isOk());
  EXPECT_TRUE((*trainer)->run(steps).isOk());
  double sum = 0;
  int count = 0;
  for (const ExpertLoadEvent& load : sink.loads) {
    if (load.step < steps - window) continue;
    const auto& tokens = load.tokensPerExpert;
    double total = 0;
    for (int64_t t : tokens) total += double(t);
    sum +=
        double(*std::max_element(tokens.begin(), tokens.end())) / (total / double(tokens.size()));
    ++count;
  }
  return sum / count;
}

// Routing learns to depend on the topic, so a hot topic makes hot experts, unless the switch aux
// loss balances them: with the default coefficient it largely removes a persistent skew. Skew 4:
// at skew 2 the effect within 100 steps (1.05x the uniform run's imbalance with one init seed,
// 1.08x+ with another) was too close to the init's own spread to test on one seed.
TEST(Training, SkewedTopicsMakeHotExpertsThatTheAuxLossCools) {
  const double uniform = meanImbalance(0.0, 0.0, 100, 20);
  const double skewed = meanImbalance(4.0, 0.0, 100, 20);
  const double balanced = meanImbalance(4.0, 0.05, 100, 20);
  std::printf(
      "max/mean expert load, steps 80-99: skew 0 -> %.3f, skew 4 -> %.3f, "
      "skew 4 with aux loss 0.05 -> %.3f\n",
      uniform, skewed, balanced);
  EXPECT_GT(skewed, uniform * 1.08);
  EXPECT_LT(balanced, skewed * 0.9);
}

}  // namespace
}  // namespace moewb::engine
