// SyntheticData: a deterministic, learnable token stream with a skew knob for expert load.
//
// Every sequence draws a hidden topic from Zipf(skew) over data.num_topics topics
// (P(topic i) ∝ (i+1)^-skew; skew 0 = uniform). Topic i owns a window of the vocabulary of
// 2*max(1, V/num_topics) tokens starting at i*max(1, V/num_topics) (so neighbouring topics share
// half their tokens) and a fixed random single-cycle permutation of that window: the hidden state
// walks the cycle, and each emitted token is the state's token, or with probability data.noise a
// uniform random token. A model can predict the next token from the previous one up to the
// topic ambiguity of shared tokens, which the context resolves; so the loss falls far below
// ln(V). With a large skew the frequent topics' few tokens dominate every batch, and a router that
// learns token-dependent routing makes some experts hot.
// Multimodal (data.image_size > 0): each topic also owns a prototype image [C, S, S] drawn once
// from N(0, 1); a sequence starts with its topic's prototype plus N(0, image_noise^2) noise, cut
// into P = (S / patch_size)^2 patches (ops/patchify), followed by T - P text tokens. The first text token can only be
// predicted from the image, so a model that reads the patches does better than one that does not.
// batch(step) is a pure function of (seed, config, step). Costs: O(B T) per batch, O(topics * V)
// tables at construction. Thread-safety: const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/batch.h"
#include "moewb/engine/config.h"
#include "ops/patchify/patchify.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {

class SyntheticData {
 public:
  // `data` must have passed validateConfig (num_topics <= vocabSize, noise in [0, 1]).
  SyntheticData(const DataSection& data, int32_t vocabSize, int32_t seqLen, uint64_t seed);

  // The batch of optimizer step `step` (0-based).
  Batch batch(int64_t step) const;

 private:
  void fillImages(Batch& batch, Rng& rng) const;

 public:

  // P(topic) for every topic, [num_topics].
  const std::vector<double>& topicProbabilities() const { return m_topicProbability; }
  // The vocabulary window of a topic, in cycle order ([window size] token ids).
  const std::vector<int32_t>& topicCycle(int32_t topic) const { return m_cycle[size_t(topic)]; }

 private:
  int32_t m_batchSize;
  int32_t m_seqLen;
  int32_t m_vocabSize;
  double m_noise;
  uint64_t m_seed;
  std::vector<double> m_topicProbability;     // [topics]
  std::vector<double> m_topicCdf;             // [topics] inclusive prefix sums
  std::vector<std::vector<int32_t>> m_cycle;  // [topics][window] tokens in the order they follow
  PatchGrid m_grid;             // image geometry; imageSize 0 = text only
  double m_imageNoise = 0;
  std::vector<std::vector<float>> m_prototype;  // [topics][C * S * S] prototype images
};

// For a live patch: replaces `data` with the source of `after` when its data section differs from
// `before`'s (data.skew, data.noise), and keeps it (and its position) otherwise.
void refreshDataOnPatch(std::unique_ptr<SyntheticData>& data, const RunConfig& before,
                        const RunConfig& after);

}  // namespace moewb::engine
