// SyntheticData: determinism per (seed, step), shifted targets, vocabulary range, topic cycles,
// and the Zipf skew of topic frequencies.
#include "train/synthetic_data.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace moewb::engine {
namespace {

TEST(SyntheticData, DeterministicPerSeedAndStep) {
  DataSection data;
  SyntheticData a(data, 256, 64, 1), b(data, 256, 64, 1), c(data, 256, 64, 2);
  const Batch a3 = a.batch(3), b3 = b.batch(3), a4 = a.batch(4), c3 = c.batch(3);
  int differentStep = 0, differentSeed = 0;
  for (int64_t i = 0; i < a3.inputs.numel(); ++i) {
    ASSERT_EQ(a3.inputs[i], b3.inputs[i]);
    ASSERT_EQ(a3.targets[i], b3.targets[i]);
    differentStep += a3.inputs[i] != a4.inputs[i];
    differentSeed += a3.inputs[i] != c3.inputs[i];
  }
  EXPECT_GT(differentStep, 100);
  EXPECT_GT(differentSeed, 100);
}

TEST(SyntheticData, TargetsAreShiftedInputsAndFollowTheTopicCycle) {
  DataSection data;
  data.noise = 0.0;
  data.batchSize = 4;
  const int32_t vocab = 100, seqLen = 20;
  SyntheticData source(data, vocab, seqLen, 5);
  const Batch batch = source.batch(0);
  EXPECT_EQ(batch.tokens(), 80);
  for (int64_t b = 0; b < 4; ++b) {
    const std::vector<int32_t>& cycle = source.topicCycle(batch.topics[size_t(b)]);
    for (int64_t t = 0; t < seqLen; ++t) {
      const int64_t n = b * seqLen + t;
      EXPECT_GE(batch.inputs[n], 0);
      EXPECT_LT(batch.inputs[n], vocab);
      if (t + 1 < seqLen) {
        EXPECT_EQ(batch.targets[n], batch.inputs[n + 1]);
      }
      const auto pos = std::find(cycle.begin(), cycle.end(), batch.inputs[n]) - cycle.begin();
      ASSERT_LT(size_t(pos), cycle.size());
      EXPECT_EQ(batch.targets[n], cycle[(size_t(pos) + 1) % cycle.size()]);
    }
  }
}

TEST(SyntheticData, SkewMakesEarlyTopicsFrequent) {
  DataSection data;
  data.skew = 2.0;
  data.numTopics = 16;
  data.batchSize = 64;
  SyntheticData source(data, 256, 8, 3);
  EXPECT_NEAR(source.topicProbabilities()[0], 1.0 / 1.5843, 0.01);  // 1 / sum 1/i^2
  int topicZero = 0, total = 0;
  for (int64_t step = 0; step < 20; ++step) {
    for (int32_t topic : source.batch(step).topics) {
      topicZero += topic == 0;
      ++total;
    }
  }
  EXPECT_NEAR(double(topicZero) / total, 0.63, 0.06);
  data.skew = 0.0;
  SyntheticData uniform(data, 256, 8, 3);
  EXPECT_DOUBLE_EQ(uniform.topicProbabilities()[0], 1.0 / 16);
}

}  // namespace
}  // namespace moewb::engine

namespace moewb::engine {
namespace {

TEST(SyntheticMultimodal, ImagesLeadEachSequenceAndOnlyTextIsPredicted) {
  DataSection data;
  data.batchSize = 6;
  data.imageSize = 4;  // 2 x 2 patches of 2 x 2 pixels, 2 channels: 4 patches of 8 features
  data.patchSize = 2;
  data.imageChannels = 2;
  data.imageNoise = 0.1;
  SyntheticData source(data, 64, 16, 7);
  Batch batch = source.batch(3);
  ASSERT_EQ(batch.imagePatches, 4);
  ASSERT_EQ(batch.patches.dim(0), 6 * 4);
  ASSERT_EQ(batch.patches.dim(1), 8);
  for (int64_t b = 0; b < 6; ++b) {
    for (int64_t t = 0; t < 16; ++t) {
      const int64_t n = b * 16 + t;
      if (t < 4) {
        EXPECT_EQ(batch.inputs[n], kImagePosition);
      } else {
        EXPECT_GE(batch.inputs[n], 0);
      }
      if (t < 3) {
        EXPECT_EQ(batch.targets[n], kIgnoreTarget);
      } else {
        EXPECT_GE(batch.targets[n], 0);  // the last patch predicts the first text token
      }
    }
  }
  // Same topic => nearly the same image (noise 0.1); the batch is a pure function of the step.
  Batch again = source.batch(3);
  for (int64_t i = 0; i < batch.patches.numel(); ++i) EXPECT_EQ(batch.patches[i], again.patches[i]);
  for (size_t a = 0; a < 6; ++a) {
    for (size_t b = a + 1; b < 6; ++b) {
      double dist = 0;
      for (int64_t i = 0; i < 32; ++i) {
        double d = batch.patches[int64_t(a) * 32 + i] - batch.patches[int64_t(b) * 32 + i];
        dist += d * d;
      }
      if (batch.topics[a] == batch.topics[b]) EXPECT_LT(dist, 32 * 0.1);
      else EXPECT_GT(dist, 32 * 0.5);
    }
  }
}

TEST(SyntheticMultimodal, TextOnlyStreamsDoNotChangeWhenImagesAreOff) {
  DataSection text;
  DataSection images = text;
  images.imageSize = 2;
  images.patchSize = 1;  // 4 patches
  SyntheticData a(text, 64, 16, 7), b(images, 64, 16, 7);
  Batch x = a.batch(5), y = b.batch(5);
  for (int64_t n = 0; n < x.inputs.numel(); ++n) {
    if (n % 16 >= 4) {
      EXPECT_EQ(x.inputs[n], y.inputs[n]);
    }
  }
}

}  // namespace
}  // namespace moewb::engine
