// SyntheticData tables (Zipf CDF, per-topic Sattolo cycles) and batch generation.
#include "train/synthetic_data.h"

#include <algorithm>
#include <cmath>

#include "ops/patchify/patchify.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {
namespace {
constexpr uint64_t kTableStream = 0x7461626c6573ull;  // "tables"
constexpr uint64_t kBatchStream = 0x626174636873ull;  // "batchs"
constexpr uint64_t kImageStream = 0x696d61676573ull;  // "images"
}  // namespace

SyntheticData::SyntheticData(const DataSection& data, int32_t vocabSize, int32_t seqLen,
                             uint64_t seed)
    : m_batchSize(data.batchSize),
      m_seqLen(seqLen),
      m_vocabSize(vocabSize),
      m_noise(data.noise),
      m_seed(seed),
      m_grid{data.imageChannels, data.imageSize, data.patchSize},
      m_imageNoise(data.imageNoise) {
  const int32_t topics = std::max(1, data.numTopics);
  double total = 0;
  for (int32_t i = 0; i < topics; ++i) {
    m_topicProbability.push_back(std::pow(double(i + 1), -data.skew));
    total += m_topicProbability.back();
  }
  double cumulative = 0;
  for (double& p : m_topicProbability) {
    p /= total;
    cumulative += p;
    m_topicCdf.push_back(cumulative);
  }
  m_topicCdf.back() = 1.0;
  const int32_t stride = std::max(1, vocabSize / topics);
  const int32_t window = std::min(vocabSize, 2 * stride);
  Rng rng(mixSeed(seed, kTableStream));
  m_cycle.resize(size_t(topics));
  for (int32_t i = 0; i < topics; ++i) {
    std::vector<int32_t>& cycle = m_cycle[size_t(i)];
    for (int32_t j = 0; j < window; ++j)
      cycle.push_back(int32_t((int64_t(i) * stride + j) % vocabSize));
    // Sattolo's algorithm: a uniformly random permutation with a single cycle, used as the visit
    // order of the window's tokens.
    for (int32_t j = window - 1; j > 0; --j)
      std::swap(cycle[size_t(j)], cycle[size_t(rng.uniformInt(j))]);
  }
  if (m_grid.imageSize > 0) {
    Rng imageRng(mixSeed(seed, kImageStream));
    const int64_t pixels = m_grid.channels * m_grid.imageSize * m_grid.imageSize;
    m_prototype.assign(size_t(topics), std::vector<float>(size_t(pixels)));
    for (auto& image : m_prototype) {
      for (float& value : image) value = float(imageRng.normal());
    }
  }
}

void SyntheticData::fillImages(Batch& batch, Rng& rng) const {
  const int64_t p = m_grid.numPatches(), t = m_seqLen;
  batch.imagePatches = p;
  batch.patches = Tensor<float>({int64_t(m_batchSize) * p, m_grid.patchDim()});
  for (int32_t b = 0; b < m_batchSize; ++b) {
    const std::vector<float>& prototype = m_prototype[size_t(batch.topics[size_t(b)])];
    std::vector<float> image(prototype.size());  // [C, S, S]
    for (size_t i = 0; i < image.size(); ++i) image[i] = prototype[i] + float(m_imageNoise * rng.normal());
    patchify(m_grid, image.data(), batch.patches.row(int64_t(b) * p));
    for (int64_t i = 0; i < p; ++i) {
      batch.inputs[b * t + i] = kImagePosition;
      if (i + 1 < p) batch.targets[b * t + i] = kIgnoreTarget;
    }
  }
}

Batch SyntheticData::batch(int64_t step) const {
  Batch out;
  out.batchSize = m_batchSize;
  out.seqLen = m_seqLen;
  out.inputs = Tensor<int32_t>({int64_t(m_batchSize) * m_seqLen});
  out.targets = Tensor<int32_t>({int64_t(m_batchSize) * m_seqLen});
  Rng rng(mixSeed(m_seed ^ kBatchStream, uint64_t(step)));
  std::vector<int32_t> tokens(size_t(m_seqLen) + 1);
  for (int32_t b = 0; b < m_batchSize; ++b) {
    const double u = rng.uniform();
    const int32_t topic =
        int32_t(std::upper_bound(m_topicCdf.begin(), m_topicCdf.end(), u) - m_topicCdf.begin());
    out.topics.push_back(std::min(topic, int32_t(m_topicCdf.size()) - 1));
    const std::vector<int32_t>& cycle = m_cycle[size_t(out.topics.back())];
    int64_t position = rng.uniformInt(int64_t(cycle.size()));
    for (int32_t t = 0; t <= m_seqLen; ++t) {
      const bool noisy = rng.uniform() < m_noise;
      tokens[size_t(t)] = noisy ? int32_t(rng.uniformInt(m_vocabSize)) : cycle[size_t(position)];
      position = (position + 1) % int64_t(cycle.size());
    }
    for (int32_t t = 0; t < m_seqLen; ++t) {
      out.inputs[int64_t(b) * m_seqLen + t] = tokens[size_t(t)];
      out.targets[int64_t(b) * m_seqLen + t] = tokens[size_t(t) + 1];
    }
  }
  if (m_grid.imageSize > 0) {
    // Images come after all text so that text-only configs keep their exact token streams.
    Rng imageRng(mixSeed(m_seed ^ kImageStream, uint64_t(step)));
    fillImages(out, imageRng);
  }
  return out;
}

void refreshDataOnPatch(std::unique_ptr<SyntheticData>& data, const RunConfig& before,
                        const RunConfig& after) {
  if (after.data == before.data) return;
  data = std::make_unique<SyntheticData>(after.data, after.model.vocabSize, after.model.seqLen,
                                         after.run.seed);
}

}  // namespace moewb::engine
