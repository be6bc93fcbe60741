// Model<T>: parameter layout, seeded init, and the explicit forward / backward of the decoder
// stack (see model.h). Phase scopes here define what each traced phase covers.
#include "model/model.h"

#include <cmath>
#include <utility>

#include "ops/cross_entropy/cross_entropy.h"
#include "ops/embedding/embedding.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "tensor/rng.h"

namespace moewb::engine {
namespace {

constexpr uint64_t kWeightStream = 0x77656967687473ull;  // "weights"

// a[i] += b[i]
template <typename T>
void addInPlace(ThreadPool& pool, Tensor<T>& a, const Tensor<T>& b) {
  MOEWB_CHECK(a.numel() == b.numel());
  pool.parallelForRange(a.numel(), 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += b[i];
  });
}

}  // namespace

ModelDims ModelDims::fromConfig(const RunConfig& config) {
  ModelDims dims;
  dims.vocabSize = config.model.vocabSize;
  dims.dModel = config.model.dModel;
  dims.numLayers = config.model.numLayers;
  dims.numHeads = config.model.numHeads;
  dims.seqLen = config.model.seqLen;
  dims.batchSize = config.data.batchSize;
  dims.numExperts = config.moe.numExperts;
  dims.topK = config.moe.topK;
  dims.dFf = config.moe.dFf;
  dims.normEps = config.model.normEps;
  dims.initStd = config.model.initStd;
  dims.auxLossCoef = config.moe.auxLossCoef;
  return dims;
}

template <typename T>
Model<T>::Model(const ModelDims& dims, ThreadPool& pool) : m_dims(dims), m_pool(pool) {
  const int64_t v = dims.vocabSize, d = dims.dModel, e = dims.numExperts, f = dims.dFf;
  m_params.reserve(size_t(3 + 10 * dims.numLayers));
  m_embedding = addParam("embedding", {v, d}, true);
  for (int64_t l = 0; l < dims.numLayers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    LayerParams p{};
    p.attnNorm = addParam(prefix + "attn_norm", {d}, false);
    p.wq = addParam(prefix + "attn.wq", {d, d}, true);
    p.wk = addParam(prefix + "attn.wk", {d, d}, true);
    p.wv = addParam(prefix + "attn.wv", {d, d}, true);
    p.wo = addParam(prefix + "attn.wo", {d, d}, true);
    p.moeNorm = addParam(prefix + "moe_norm", {d}, false);
    p.router = addParam(prefix + "moe.router", {e, d}, true);
    p.gate = addParam(prefix + "moe.gate", {e, f, d}, true);
    p.up = addParam(prefix + "moe.up", {e, f, d}, true);
    p.down = addParam(prefix + "moe.down", {e, d, f}, true);
    m_layers.push_back(p);
  }
  m_finalNorm = addParam("final_norm", {d}, false);
  m_lmHead = addParam("lm_head", {v, d}, true);
}

template <typename T>
int Model<T>::addParam(const std::string& name, std::initializer_list<int64_t> shape, bool decay) {
  Parameter<T> param;
  param.name = name;
  param.value = Tensor<T>(shape);
  param.grad = Tensor<T>(shape);
  param.adamM = Tensor<T>(shape);
  param.adamV = Tensor<T>(shape);
  param.decay = decay;
  m_params.push_back(std::move(param));
  return int(m_params.size()) - 1;
}

template <typename T>
void Model<T>::initialize(uint64_t seed) {
  Rng rng(mixSeed(seed, kWeightStream));
  const double outputStd = m_dims.initStd / std::sqrt(2.0 * double(m_dims.numLayers));
  for (auto& param : m_params) {
    if (!param.decay) {  // RMSNorm gains
      param.value.fill(T(1));
      continue;
    }
    const bool isOutput = param.name.ends_with("attn.wo") || param.name.ends_with("moe.down");
    const double stddev = isOutput ? outputStd : m_dims.initStd;
    for (int64_t i = 0; i < param.value.numel(); ++i) param.value[i] = T(rng.normal() * stddev);
  }
}

template <typename T>
int64_t Model<T>::parameterCount() const {
  int64_t count = 0;
  for (const auto& param : m_params) count += param.value.numel();
  return count;
}

template <typename T>
void Model<T>::zeroGrads() {
  m_pool.parallelFor(int64_t(m_params.size()), [&](int64_t i) { m_params[size_t(i)].grad.zero(); });
}

template <typename T>
AttentionDims Model<T>::attentionDims() const {
  return {m_dims.batchSize, m_dims.seqLen, m_dims.numHeads, m_dims.dModel / m_dims.numHeads};
}

template <typename T>
AttentionWeights<T> Model<T>::attentionWeights(const LayerParams& p) const {
  return {m_params[size_t(p.wq)].value, m_params[size_t(p.wk)].value, m_params[size_t(p.wv)].value,
          m_params[size_t(p.wo)].value};
}

template <typename T>
AttentionGrads<T> Model<T>::attentionGrads(const LayerParams& p) {
  return {m_params[size_t(p.wq)].grad, m_params[size_t(p.wk)].grad, m_params[size_t(p.wv)].grad,
          m_params[size_t(p.wo)].grad};
}

template <typename T>
MoeWeights<T> Model<T>::moeWeights(const LayerParams& p) const {
  return {m_params[size_t(p.router)].value, m_params[size_t(p.gate)].value,
          m_params[size_t(p.up)].value, m_params[size_t(p.down)].value};
}

template <typename T>
MoeGrads<T> Model<T>::moeGrads(const LayerParams& p) {
  return {m_params[size_t(p.router)].grad, m_params[size_t(p.gate)].grad,
          m_params[size_t(p.up)].grad, m_params[size_t(p.down)].grad};
}

template <typename T>
MoeOptions Model<T>::moeOptions() const {
  return {m_dims.topK, m_dims.auxLossCoef};
}

template <typename T>
ForwardResult Model<T>::forward(const Batch& batch, PhaseRecorder* recorder) {
  MOEWB_CHECK(batch.batchSize == m_dims.batchSize && batch.seqLen == m_dims.seqLen);
  m_inputs = batch.inputs.clone();
  m_targets = batch.targets.clone();
  m_acts.clear();
  m_acts.resize(size_t(m_dims.numLayers));
  Tensor<T> h;  // [N, D] residual stream
  {
    ScopedPhase phase(recorder, Phase::kEmbedding, Pass::kForward, -1);
    h = embeddingForward(m_pool, m_inputs, m_params[size_t(m_embedding)].value);
  }
  ForwardResult result;
  for (int32_t l = 0; l < int32_t(m_dims.numLayers); ++l) {
    h = layerForward(l, std::move(h), recorder);
    const MoeSaved<T>& moe = m_acts[size_t(l)].moe;
    result.auxLoss += moe.aux.loss;
    result.expertCounts.push_back(moe.aux.counts);
  }
  result.loss = lossForward(h, recorder);
  m_finalInput = std::move(h);
  m_hasActivations = true;
  return result;
}

template <typename T>
Tensor<T> Model<T>::layerForward(int32_t layer, Tensor<T> input, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  a.input = std::move(input);
  const MoeWeights<T> moeW = moeWeights(p);
  {
    ScopedPhase phase(recorder, Phase::kAttention, Pass::kForward, layer);
    a.norm1 = rmsNormForward(m_pool, a.input, m_params[size_t(p.attnNorm)].value, m_dims.normEps,
                             a.rstd1);
    a.mid = attentionForward(m_pool, attentionDims(), a.norm1, attentionWeights(p), a.attn);
    addInPlace(m_pool, a.mid, a.input);
  }
  {
    ScopedPhase phase(recorder, Phase::kRouter, Pass::kForward, layer);
    a.norm2 =
        rmsNormForward(m_pool, a.mid, m_params[size_t(p.moeNorm)].value, m_dims.normEps, a.rstd2);
    moeRouterForward(m_pool, a.norm2, moeW, moeOptions(), a.moe);
  }
  {
    ScopedPhase phase(recorder, Phase::kPermute, Pass::kForward, layer);
    moePermuteForward(m_pool, a.norm2, a.moe);
  }
  {
    ScopedPhase phase(recorder, Phase::kExperts, Pass::kForward, layer);
    moeExpertsForward(m_pool, moeW, a.moe);
  }
  ScopedPhase phase(recorder, Phase::kCombine, Pass::kForward, layer);
  Tensor<T> out = moeCombineForward(m_pool, a.moe);  // [N, D]
  addInPlace(m_pool, out, a.mid);
  return out;
}

template <typename T>
double Model<T>::lossForward(const Tensor<T>& h, PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kLoss, Pass::kForward, -1);
  const int64_t n = m_dims.tokens(), d = m_dims.dModel, v = m_dims.vocabSize;
  m_finalNormOut =
      rmsNormForward(m_pool, h, m_params[size_t(m_finalNorm)].value, m_dims.normEps, m_finalRstd);
  m_logits = Tensor<T>({n, v});
  linearForward(m_pool, m_finalNormOut.data(), m_params[size_t(m_lmHead)].value.data(),
                m_logits.data(), n, d, v);
  return crossEntropyForward(m_pool, m_logits, m_targets, m_lse);
}

template <typename T>
void Model<T>::backward(PhaseRecorder* recorder) {
  MOEWB_CHECK(m_hasActivations);
  Tensor<T> dh = lossBackward(recorder);  // [N, D]
  for (int32_t l = int32_t(m_dims.numLayers) - 1; l >= 0; --l) {
    dh = layerBackward(l, dh, recorder);
    m_acts[size_t(l)] = LayerActs();
  }
  {
    ScopedPhase phase(recorder, Phase::kEmbedding, Pass::kBackward, -1);
    embeddingBackward(m_inputs, dh, m_params[size_t(m_embedding)].grad);
  }
  m_acts.clear();
  m_hasActivations = false;
}

template <typename T>
Tensor<T> Model<T>::lossBackward(PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kLoss, Pass::kBackward, -1);
  const int64_t n = m_dims.tokens(), d = m_dims.dModel, v = m_dims.vocabSize;
  Tensor<T> dLogits = crossEntropyBackward(m_pool, m_logits, m_targets, m_lse, 1.0);  // [N, V]
  m_logits = Tensor<T>();
  Parameter<T>& head = m_params[size_t(m_lmHead)];
  Tensor<T> dNorm({n, d});  // [N, D]
  linearBackwardData(m_pool, dLogits.data(), head.value.data(), dNorm.data(), n, d, v);
  linearBackwardWeight(m_pool, dLogits.data(), m_finalNormOut.data(), head.grad.data(), n, d, v);
  Parameter<T>& norm = m_params[size_t(m_finalNorm)];
  Tensor<T> dh = rmsNormBackward(m_pool, dNorm, m_finalInput, norm.value, m_finalRstd, norm.grad);
  m_finalInput = Tensor<T>();
  m_finalNormOut = Tensor<T>();
  return dh;
}

template <typename T>
Tensor<T> Model<T>::layerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  const MoeWeights<T> moeW = moeWeights(p);
  const MoeGrads<T> moeG = moeGrads(p);
  MoeBackwardState<T> state;
  {
    ScopedPhase phase(recorder, Phase::kCombine, Pass::kBackward, layer);
    moeCombineBackward(m_pool, dOut, a.moe, state);
  }
  {
    ScopedPhase phase(recorder, Phase::kExperts, Pass::kBackward, layer);
    moeExpertsBackward(m_pool, moeW, a.moe, moeG, state);
  }
  Tensor<T> dNorm2;  // [N, D]
  {
    ScopedPhase phase(recorder, Phase::kPermute, Pass::kBackward, layer);
    dNorm2 = moePermuteBackward(m_pool, a.moe, state);
  }
  Tensor<T> dMid;  // [N, D]
  {
    ScopedPhase phase(recorder, Phase::kRouter, Pass::kBackward, layer);
    moeRouterBackward(m_pool, a.norm2, moeW, moeOptions(), a.moe, moeG, state, dNorm2);
    Parameter<T>& gain = m_params[size_t(p.moeNorm)];
    dMid = rmsNormBackward(m_pool, dNorm2, a.mid, gain.value, a.rstd2, gain.grad);
    addInPlace(m_pool, dMid, dOut);
  }
  ScopedPhase phase(recorder, Phase::kAttention, Pass::kBackward, layer);
  Tensor<T> dNorm1 = attentionBackward(m_pool, attentionDims(), dMid, a.norm1, attentionWeights(p),
                                       a.attn, attentionGrads(p));
  Parameter<T>& gain = m_params[size_t(p.attnNorm)];
  Tensor<T> dIn = rmsNormBackward(m_pool, dNorm1, a.input, gain.value, a.rstd1, gain.grad);
  addInPlace(m_pool, dIn, dMid);
  return dIn;
}

template class Model<float>;
template class Model<double>;

}  // namespace moewb::engine
