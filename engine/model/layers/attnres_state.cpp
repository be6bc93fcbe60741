// Block AttnRes bookkeeping (see attnres_state.h).
#include "model/layers/attnres_state.h"

#include <utility>

namespace moewb::engine {
namespace {

constexpr int64_t kAddGrain = 4096;

// dst += src, elementwise.
template <typename T>
void addInto(ThreadPool& pool, Tensor<T>& dst, const Tensor<T>& src) {
  MOEWB_CHECK(dst.sameShape(src));
  pool.parallelForRange(dst.numel(), kAddGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
  });
}

template <typename T>
Tensor<T> zerosLike(const Tensor<T>& like) {
  return Tensor<T>({like.dim(0), like.dim(1)});
}

}  // namespace

template <typename T>
AttnResState<T>::AttnResState(int64_t blockSize, const AttnResOptions& options)
    : m_blockSize(blockSize), m_options(options) {
  MOEWB_CHECK(blockSize >= 1);
}

template <typename T>
void AttnResState<T>::expectStage(Stage stage) const {
  MOEWB_CHECK_MSG(m_stage == stage, "AttnResState: call out of order (stage "
                                        << int(m_stage) << ", expected " << int(stage) << ")");
}

template <typename T>
std::vector<const Tensor<T>*> AttnResState<T>::sourcesOf(size_t call) const {
  const Call& c = m_calls[call];
  std::vector<const Tensor<T>*> sources;
  for (int64_t b = 0; b < c.blocksBefore; ++b) sources.push_back(&m_blocks[size_t(b)]);
  sources.push_back(c.boundary ? &m_blocks[size_t(c.blocksBefore)] : &m_snapshots[call]);
  return sources;
}

template <typename T>
void AttnResState<T>::begin(Tensor<T> embedding) {
  MOEWB_CHECK(embedding.rank() == 2);
  m_calls.clear();
  m_blocks.clear();
  m_snapshots.clear();
  m_finalPrefix = Tensor<T>();
  m_dBlocks.clear();
  m_dPrefix = Tensor<T>();
  m_prefix = std::move(embedding);
  m_stage = Stage::kMix;
}

template <typename T>
Tensor<T> AttnResState<T>::mixBeforeSublayer(ThreadPool& pool, const Tensor<T>& query,
                                             const Tensor<T>& keyGain) {
  expectStage(Stage::kMix);
  const int64_t sublayer = int64_t(m_calls.size());
  Call call;
  call.blocksBefore = int64_t(m_blocks.size());
  call.boundary = isBoundary(sublayer, m_blockSize);
  m_calls.push_back(call);
  if (call.boundary) {
    m_blocks.push_back(std::move(m_prefix));
    m_snapshots.emplace_back();
  } else {
    m_snapshots.push_back(std::move(m_prefix));
  }
  m_prefix = Tensor<T>();
  m_stage = Stage::kOutput;
  return attnResForward(pool, sourcesOf(m_calls.size() - 1), query, keyGain, m_options);
}

template <typename T>
void AttnResState<T>::addSublayerOutput(ThreadPool& pool, Tensor<T> output) {
  expectStage(Stage::kOutput);
  const Call& call = m_calls.back();
  const Tensor<T>& source = call.boundary ? m_blocks.back() : m_snapshots.back();
  MOEWB_CHECK(output.sameShape(source));
  m_prefix = std::move(output);
  if (!call.boundary) addInto(pool, m_prefix, m_snapshots.back());
  m_stage = Stage::kMix;
}

template <typename T>
Tensor<T> AttnResState<T>::mixFinal(ThreadPool& pool, const Tensor<T>& query,
                                    const Tensor<T>& keyGain) {
  expectStage(Stage::kMix);
  m_finalPrefix = std::move(m_prefix);
  m_prefix = Tensor<T>();
  std::vector<const Tensor<T>*> sources;
  for (const Tensor<T>& block : m_blocks) sources.push_back(&block);
  sources.push_back(&m_finalPrefix);
  m_stage = Stage::kForwardDone;
  return attnResForward(pool, sources, query, keyGain, m_options);
}

template <typename T>
void AttnResState<T>::backwardFinal(ThreadPool& pool, const Tensor<T>& dMixed,
                                    const Tensor<T>& query, const Tensor<T>& keyGain,
                                    Tensor<T>& dQuery, Tensor<T>& dKeyGain) {
  expectStage(Stage::kForwardDone);
  std::vector<const Tensor<T>*> sources;
  std::vector<Tensor<T>*> dSources;
  m_dBlocks.clear();
  for (const Tensor<T>& block : m_blocks) m_dBlocks.push_back(zerosLike(block));
  m_dPrefix = zerosLike(m_finalPrefix);
  for (size_t b = 0; b < m_blocks.size(); ++b) {
    sources.push_back(&m_blocks[b]);
    dSources.push_back(&m_dBlocks[b]);
  }
  sources.push_back(&m_finalPrefix);
  dSources.push_back(&m_dPrefix);
  attnResBackward(pool, sources, query, keyGain, m_options, dMixed, dSources, dQuery, dKeyGain);
  m_finalPrefix = Tensor<T>();
  m_stage = m_calls.empty() ? Stage::kBackDone : Stage::kBackOutput;
}

template <typename T>
Tensor<T> AttnResState<T>::backwardSublayerOutput() {
  expectStage(Stage::kBackOutput);
  const Call& call = m_calls.back();
  Tensor<T> dOutput;  // [N, D]
  if (call.boundary) {
    // The output started a new prefix; the block the previous prefix became continues it.
    MOEWB_CHECK_EQ(int64_t(m_dBlocks.size()), call.blocksBefore + 1);
    dOutput = std::move(m_dPrefix);
    m_dPrefix = std::move(m_dBlocks.back());
    m_dBlocks.pop_back();
  } else {
    // prefix_{s+1} = prefix_s + out_s: both receive its gradient.
    MOEWB_CHECK_EQ(int64_t(m_dBlocks.size()), call.blocksBefore);
    dOutput = m_dPrefix.clone();
  }
  m_stage = Stage::kBackMix;
  return dOutput;
}

template <typename T>
void AttnResState<T>::backwardMixBeforeSublayer(ThreadPool& pool, const Tensor<T>& dMixed,
                                                const Tensor<T>& query, const Tensor<T>& keyGain,
                                                Tensor<T>& dQuery, Tensor<T>& dKeyGain) {
  expectStage(Stage::kBackMix);
  const size_t index = m_calls.size() - 1;
  const Call call = m_calls.back();
  std::vector<Tensor<T>*> dSources;
  for (int64_t b = 0; b < call.blocksBefore; ++b) dSources.push_back(&m_dBlocks[size_t(b)]);
  dSources.push_back(&m_dPrefix);
  attnResBackward(pool, sourcesOf(index), query, keyGain, m_options, dMixed, dSources, dQuery,
                  dKeyGain);
  if (call.boundary) {
    MOEWB_CHECK_EQ(int64_t(m_blocks.size()), call.blocksBefore + 1);
    m_blocks.pop_back();
  }
  m_snapshots.pop_back();
  m_calls.pop_back();
  m_stage = m_calls.empty() ? Stage::kBackDone : Stage::kBackOutput;
}

template <typename T>
Tensor<T> AttnResState<T>::takeEmbeddingGrad() {
  expectStage(Stage::kBackDone);
  m_blocks.clear();
  m_dBlocks.clear();
  m_stage = Stage::kIdle;
  return std::move(m_dPrefix);
}

template <typename T>
int64_t AttnResState<T>::heldBytes() const {
  int64_t bytes = m_prefix.bytes() + m_finalPrefix.bytes() + m_dPrefix.bytes();
  for (const Tensor<T>& t : m_blocks) bytes += t.bytes();
  for (const Tensor<T>& t : m_snapshots) bytes += t.bytes();
  for (const Tensor<T>& t : m_dBlocks) bytes += t.bytes();
  return bytes;
}

template class AttnResState<float>;
template class AttnResState<double>;

}  // namespace moewb::engine
