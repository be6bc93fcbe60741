// Mixer dispatch: parameter lists, init and forward/backward of the three token mixers
// (see mixer.h). Each kind maps the model's tensor list onto its op's Weights/Grads structs.
#include "model/cpu/mixer.h"

#include <cmath>

#include "moewb/base/check.h"

namespace moewb::engine {
namespace {

AttentionDims attentionDims(const ModelDims& d) {
  return {d.batchSize, d.seqLen, d.numHeads, d.dModel / d.numHeads};
}

template <typename T>
const Tensor<T>& at(const std::vector<const Tensor<T>*>& v, size_t i) {
  MOEWB_CHECK(i < v.size());
  return *v[i];
}

template <typename T>
Tensor<T>& at(const std::vector<Tensor<T>*>& v, size_t i) {
  MOEWB_CHECK(i < v.size());
  return *v[i];
}

// The ops' weight structs hold references, so they are built in place from the span.
template <typename T, typename Span>
AttentionWeights<T> attentionView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2), at(v, 3)};
}
template <typename T, typename Span>
AttentionGrads<T> attentionGradView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2), at(v, 3)};
}
template <typename T, typename Span>
KdaWeights<T> kdaView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2),  at(v, 3),  at(v, 4),  at(v, 5),  at(v, 6),  at(v, 7),
          at(v, 8), at(v, 9), at(v, 10), at(v, 11), at(v, 12), at(v, 13), at(v, 14), at(v, 15)};
}
template <typename T, typename Span>
KdaGrads<T> kdaGradView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2),  at(v, 3),  at(v, 4),  at(v, 5),  at(v, 6),  at(v, 7),
          at(v, 8), at(v, 9), at(v, 10), at(v, 11), at(v, 12), at(v, 13), at(v, 14), at(v, 15)};
}
template <typename T, typename Span>
SparseAttentionWeights<T> sparseView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2), at(v, 3), at(v, 4),  at(v, 5),
          at(v, 6), at(v, 7), at(v, 8), at(v, 9), at(v, 10)};
}
template <typename T, typename Span>
SparseAttentionGrads<T> sparseGradView(const Span& v) {
  return {at(v, 0), at(v, 1), at(v, 2), at(v, 3), at(v, 4),  at(v, 5),
          at(v, 6), at(v, 7), at(v, 8), at(v, 9), at(v, 10)};
}

}  // namespace

KdaDims mixerKdaDims(const ModelDims& d) {
  KdaDims k;
  k.batch = d.batchSize;
  k.seqLen = d.seqLen;
  k.dModel = d.dModel;
  k.numHeads = d.kda.numHeads > 0 ? d.kda.numHeads : d.numHeads;
  k.headDim = d.kda.headDim > 0 ? d.kda.headDim : d.dModel / k.numHeads;
  k.chunk = d.kda.chunkSize;
  k.gateRank = d.kda.gateRank;
  k.gate = d.kda.gate == "default" ? KdaGateKind::kDefault : KdaGateKind::kLowerBound;
  k.lowerBound = d.kda.lowerBound;
  k.normEps = d.normEps;
  return k;
}

OpProblem opProblemOf(const ModelDims& d) {
  const KdaDims k = mixerKdaDims(d);
  return {.mixerPattern = d.mixerPattern,
          .kdaHeadDim = k.headDim,
          .kdaChunk = k.chunk,
          .lossKind = d.loss.kind,
          .lora = d.lora.enabled,
          .attnRes = d.attnRes,
          .images = d.imagePatches > 0};
}

SparseAttentionDims mixerSparseDims(const ModelDims& d, int64_t step) {
  SparseAttentionDims s;
  s.batch = d.batchSize;
  s.seqLen = d.seqLen;
  s.dModel = d.dModel;
  s.numHeads = d.numHeads;
  s.kvHeads = d.sparse.kvHeads;
  s.headDim = d.sparse.headDim > 0 ? d.sparse.headDim : d.dModel / d.numHeads;
  s.indexerHeads = d.sparse.indexerHeads;
  s.indexerDim = d.sparse.indexerDim;
  s.topK = d.sparse.topK;
  s.stage = step < d.sparse.warmupSteps ? SparseStage::kDenseWarmup : SparseStage::kSparse;
  s.indexerLossCoef = d.sparse.indexerLossCoef;
  return s;
}


std::vector<MixerParamSpec> mixerParameterSpecs(char kind, const ModelDims& dims) {
  std::vector<MixerParamSpec> specs;
  const int64_t d = dims.dModel;
  switch (kind) {
    case 'A':
      for (const char* name : {"attn.wq", "attn.wk", "attn.wv", "attn.wo"}) {
        specs.push_back({name, {d, d}, true});
      }
      break;
    case 'K':
      for (const auto& s : kdaParameterShapes(mixerKdaDims(dims))) {
        specs.push_back({"kda." + s.name, s.shape, s.decay});
      }
      break;
    case 'S':
      for (const auto& s : sparseAttentionParameterShapes(mixerSparseDims(dims, 0))) {
        specs.push_back({"sparse." + s.name, s.shape, s.decay});
      }
      break;
    default:
      MOEWB_CHECK_MSG(false, "unknown mixer kind " << kind);
  }
  return specs;
}

template <typename T>
void mixerInitializeParameter(char kind, const ModelDims& dims, const std::string& localName,
                              Tensor<T>& value, Rng& rng) {
  const std::string name = localName.substr(localName.find('.') + 1);
  if (kind == 'K') {
    kdaInitializeParameter(mixerKdaDims(dims), name, rng, dims.initStd, dims.numLayers, value);
  } else if (kind == 'S') {
    initSparseAttentionParameter(name, value, dims.initStd, dims.numLayers, rng);
  } else {
    const double stddev =
        name == "wo" ? dims.initStd / std::sqrt(2.0 * double(dims.numLayers)) : dims.initStd;
    for (int64_t i = 0; i < value.numel(); ++i) value[i] = T(rng.normal() * stddev);
  }
}

template <typename T>
Tensor<T> mixerForward(ThreadPool& pool, char kind, const ModelDims& dims, int64_t step,
                       const Tensor<T>& x, const std::vector<const Tensor<T>*>& values,
                       MixerSaved<T>& saved) {
  saved.auxLoss = 0;
  if (kind == 'A') {
    auto& s = saved.state.template emplace<AttentionSaved<T>>();
    return attentionForward(pool, attentionDims(dims), x, attentionView<T>(values), s);
  }
  if (kind == 'K') {
    auto& s = saved.state.template emplace<KdaSaved<T>>();
    return kdaForward(pool, mixerKdaDims(dims), x, kdaView<T>(values), s);
  }
  auto& s = saved.state.template emplace<SparseAttentionSaved<T>>();
  Tensor<T> y = sparseAttentionForward(pool, mixerSparseDims(dims, step), x, sparseView<T>(values), s);
  saved.auxLoss = s.indexerLoss;
  return y;
}

template <typename T>
Tensor<T> mixerBackward(ThreadPool& pool, char kind, const ModelDims& dims, int64_t step,
                        const Tensor<T>& dy, const Tensor<T>& x,
                        const std::vector<const Tensor<T>*>& values,
                        const std::vector<Tensor<T>*>& grads, const MixerSaved<T>& saved) {
  if (kind == 'A') {
    return attentionBackward(pool, attentionDims(dims), dy, x, attentionView<T>(values),
                             std::get<AttentionSaved<T>>(saved.state), attentionGradView<T>(grads));
  }
  if (kind == 'K') {
    return kdaBackward(pool, mixerKdaDims(dims), dy, x, kdaView<T>(values),
                       std::get<KdaSaved<T>>(saved.state), kdaGradView<T>(grads));
  }
  return sparseAttentionBackward(pool, mixerSparseDims(dims, step), dy, x, sparseView<T>(values),
                                 std::get<SparseAttentionSaved<T>>(saved.state),
                                 sparseGradView<T>(grads));
}

#define MOEWB_INSTANTIATE_MIXER(T)                                                               \
  template void mixerInitializeParameter<T>(char, const ModelDims&, const std::string&,          \
                                            Tensor<T>&, Rng&);                                   \
  template Tensor<T> mixerForward<T>(ThreadPool&, char, const ModelDims&, int64_t,               \
                                     const Tensor<T>&, const std::vector<const Tensor<T>*>&,     \
                                     MixerSaved<T>&);                                            \
  template Tensor<T> mixerBackward<T>(ThreadPool&, char, const ModelDims&, int64_t,              \
                                      const Tensor<T>&, const Tensor<T>&,                        \
                                      const std::vector<const Tensor<T>*>&,                      \
                                      const std::vector<Tensor<T>*>&, const MixerSaved<T>&);
MOEWB_INSTANTIATE_MIXER(float)
MOEWB_INSTANTIATE_MIXER(double)
#undef MOEWB_INSTANTIATE_MIXER

}  // namespace moewb::engine
