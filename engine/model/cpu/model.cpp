// Model<T>: parameter layout, seeded init, and the forward / backward of the decoder stack
// (see model.h). Phase scopes here define what each traced phase covers.
#include "model/cpu/model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "ops/lora/lora.h"
#include "model/parallel/collective_error.h"
#include "model/parallel/global_router_stats.h"
#include "ops/embedding/embedding.h"
#include "ops/linear/linear.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {

void ForwardResult::noteAuxTerm(int32_t layer, const char* name, double value) {
  if (!nonFiniteAuxTerm.empty() || std::isfinite(value)) return;
  nonFiniteAuxTerm = "layer " + std::to_string(layer) + " " + name + " = " +
                     std::to_string(value);
}
namespace {

constexpr uint64_t kWeightStream = 0x77656967687473ull;  // "weights"

// FNV-1a of a parameter's name: the key of its init stream.
uint64_t nameKey(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// a[i] += b[i]
template <typename T>
void addInPlace(ThreadPool& pool, Tensor<T>& a, const Tensor<T>& b) {
  MOEWB_CHECK(a.numel() == b.numel());
  pool.parallelForRange(a.numel(), 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += b[i];
  });
}

MoeOptions moeOptionsFromConfig(const RunConfig& config) {
  const MoeSection& m = config.moe;
  MoeOptions o;
  o.topK = m.topK;
  o.auxLossCoef = m.auxLossCoef;
  o.routerScore = m.router == "sigmoid" ? RouterScore::kSigmoid : RouterScore::kSoftmax;
  o.routeScale = m.routeScale;
  o.numGroups = m.numGroups;
  o.topKGroups = m.topkGroups;
  o.seqAuxLossCoef = m.seqAuxLossCoef;
  o.seqLen = config.model.seqLen;
  o.zLossCoef = m.zLossCoef;
  o.biasUpdateRate = m.biasUpdateRate;
  o.capacityFactor = m.capacityFactor;
  o.dropPolicy = m.dropPolicy == "position" ? DropPolicy::kPosition : DropPolicy::kProbs;
  o.activation = m.activation == "situ" ? GluKind::kSitu : GluKind::kSwiGlu;
  o.situBeta1 = m.situBeta1;
  o.situBeta2 = m.situBeta2;
  o.numSharedExperts = m.numSharedExperts;
  o.sharedDFf = m.sharedDFf > 0 ? m.sharedDFf : m.dFf;
  o.latentDim = m.latentDim;
  o.latentNormEps = config.model.normEps;
  o.permuteIntoExperts = config.fusion.permuteIntoExperts;
  o.combineIntoExperts = config.fusion.combineIntoExperts;
  return o;
}

Phase mixerPhase(char kind) {
  return kind == 'K' ? Phase::kKda : kind == 'S' ? Phase::kSparseAttention : Phase::kAttention;
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
  dims.mixerPattern = config.model.mixerPattern;
  dims.attnRes = config.model.residual == "attnres";
  dims.attnResBlockSize = config.model.attnresBlockSize;
  dims.moe = moeOptionsFromConfig(config);
  dims.kda = config.kda;
  dims.sparse = config.sparse;
  dims.loss = config.loss;
  dims.lora = config.lora;
  dims.kernels = config.kernels;
  dims.imagePatches = config.data.imagePatches();
  dims.patchDim = dims.imagePatches > 0 ? config.data.patchDim() : 0;
  return dims;
}

ModelDims ModelDims::forwardFromConfig(const RunConfig& config) {
  ModelDims dims = fromConfig(config);
  dims.batchSize = config.microBatchSize();
  return dims;
}

ModelDims ModelDims::withAuxWeight(double weight) const {
  ModelDims dims = *this;
  dims.auxLossCoef *= weight;
  dims.moe.auxLossCoef *= weight;
  dims.moe.seqAuxLossCoef *= weight;
  dims.moe.zLossCoef *= weight;
  dims.sparse.indexerLossCoef *= weight;
  return dims;
}

void ModelDims::applyLiveSettings(const ModelDims& d) {
  batchSize = d.batchSize;
  topK = d.topK;
  auxLossCoef = d.auxLossCoef;
  moe.seqAuxLossCoef = d.moe.seqAuxLossCoef;
  moe.zLossCoef = d.moe.zLossCoef;
  moe.routeScale = d.moe.routeScale;
  moe.capacityFactor = d.moe.capacityFactor;
  moe.dropPolicy = d.moe.dropPolicy;
  moe.permuteIntoExperts = d.moe.permuteIntoExperts;
  moe.combineIntoExperts = d.moe.combineIntoExperts;
  loss = d.loss;
  sparse.topK = d.sparse.topK;
  sparse.indexerLossCoef = d.sparse.indexerLossCoef;
  kda.chunkSize = d.kda.chunkSize;
  kernels = d.kernels;
}

template <typename T>
Model<T>::Model(const ModelDims& dims, ThreadPool& pool)
    : m_baseDims(dims), m_dims(dims), m_pool(pool) {
  m_layers.resize(size_t(dims.numLayers));
  for (int64_t l = 0; l < dims.numLayers; ++l) m_layers[size_t(l)].mixer = dims.mixerOf(l);
  if (dims.lora.enabled) {
    MOEWB_CHECK(dims.lora.rank >= 1);
    m_loraScale = dims.lora.alpha / double(dims.lora.rank);
  }
  for (const ParameterDecl& decl : modelParameterLayout(dims)) bindParam(decl, addParam(decl));
  if (dims.moe.biasUpdateRate > 0) {
    m_bias.assign(size_t(dims.numLayers), makeExpertBias(dims.numExperts));
  }
  m_effective.resize(m_params.size());
}

template <typename T>
void Model<T>::materializeLora() {
  for (const auto& adapter : m_lora) {
    loraMerge(m_pool, m_params[size_t(adapter.base)].value, m_params[size_t(adapter.a)].value,
              m_params[size_t(adapter.b)].value, m_loraScale, m_effective[size_t(adapter.base)]);
  }
}

template <typename T>
void Model<T>::convertLoraGrads() {
  for (const auto& adapter : m_lora) {
    Parameter<T>& a = m_params[size_t(adapter.a)];
    Parameter<T>& b = m_params[size_t(adapter.b)];
    Tensor<T>& dW = grad(adapter.base);
    loraBackward(m_pool, dW, a.value, b.value, m_loraScale, a.grad, b.grad);
    dW.zero();
  }
}

template <typename T>
Tensor<T> Model<T>::mergedValue(size_t index) const {
  for (const auto& adapter : m_lora) {
    if (size_t(adapter.base) != index) continue;
    Tensor<T> merged;
    loraMerge(m_pool, m_params[index].value, m_params[size_t(adapter.a)].value,
              m_params[size_t(adapter.b)].value, m_loraScale, merged);
    return merged;
  }
  return m_params[index].value.clone();
}

template <typename T>
int Model<T>::addParam(const ParameterDecl& decl) {
  Parameter<T> param;
  param.name = decl.name;
  // Untouched zero pages: on the CUDA backend the host never writes the gradients or moments.
  param.value = Tensor<T>(decl.shape, LazyZeroPages{});
  param.grad = Tensor<T>(decl.shape, LazyZeroPages{});
  if (decl.trainable) {
    param.adamM = Tensor<T>(decl.shape, LazyZeroPages{});
    param.adamV = Tensor<T>(decl.shape, LazyZeroPages{});
  }
  param.decay = decl.decay;
  param.trainable = decl.trainable;
  m_params.push_back(std::move(param));
  m_init.push_back(decl.init);
  m_initMixer.push_back(decl.mixer);
  m_isAdapter.push_back(decl.role == ParamRole::kLoraA || decl.role == ParamRole::kLoraB);
  m_expertSharded.push_back(decl.expertSharded);
  m_unit.push_back(decl.layer);
  m_localName.push_back(decl.localName);
  return int(m_params.size()) - 1;
}

template <typename T>
void Model<T>::bindParam(const ParameterDecl& decl, int index) {
  LayerParams* p = decl.layer >= 0 ? &m_layers[size_t(decl.layer)] : nullptr;
  switch (decl.role) {
    case ParamRole::kEmbedding: m_embedding = index; break;
    case ParamRole::kPatchWeight: m_patchWeight = index; break;
    case ParamRole::kPatchBias: m_patchBias = index; break;
    case ParamRole::kFinalResQuery: m_finalResQuery = index; break;
    case ParamRole::kFinalResGain: m_finalResGain = index; break;
    case ParamRole::kFinalNorm: m_finalNorm = index; break;
    case ParamRole::kLmHead: m_lmHead = index; break;
    case ParamRole::kMixerResQuery: p->mixerResQuery = index; break;
    case ParamRole::kMixerResGain: p->mixerResGain = index; break;
    case ParamRole::kMixerNorm: p->mixerNorm = index; break;
    case ParamRole::kMixer: p->mixerParams.push_back(index); break;
    case ParamRole::kMoeResQuery: p->moeResQuery = index; break;
    case ParamRole::kMoeResGain: p->moeResGain = index; break;
    case ParamRole::kMoeNorm: p->moeNorm = index; break;
    case ParamRole::kMoe: {
      const std::string& n = decl.localName;
      int* slot = n == "moe.router"        ? &p->router
                  : n == "moe.gate"        ? &p->gate
                  : n == "moe.up"          ? &p->up
                  : n == "moe.down"        ? &p->down
                  : n == "moe.shared.gate" ? &p->sharedGate
                  : n == "moe.shared.up"   ? &p->sharedUp
                  : n == "moe.shared.down" ? &p->sharedDown
                  : n == "moe.latent.down" ? &p->latentDown
                  : n == "moe.latent.up"   ? &p->latentUp
                  : n == "moe.latent.norm" ? &p->latentNorm
                                           : nullptr;
      MOEWB_CHECK(slot != nullptr);
      *slot = index;
      break;
    }
    case ParamRole::kLoraA: m_lora.push_back({decl.loraBase, index, -1}); break;
    case ParamRole::kLoraB:
      MOEWB_CHECK(!m_lora.empty() && m_lora.back().base == decl.loraBase);
      m_lora.back().b = index;
      break;
  }
}

template <typename T>
double Model<T>::initStddev(size_t i) const {
  if (m_init[i] == Init::kOutput) return m_dims.initStd / std::sqrt(2.0 * double(m_dims.numLayers));
  if (m_init[i] == Init::kLoraA) {
    const Tensor<T>& value = m_params[i].value;
    return 1.0 / std::sqrt(double(value.dim(value.rank() - 1)));
  }
  return m_dims.initStd;
}

template <typename T>
void Model<T>::initializeTask(const InitTask& task, uint64_t seed) {
  // Streams keyed by the parameter's name (and the chunk's index): the values do not depend on
  // the order or number of threads, and a parameter keeps its values when others are added or
  // removed (LoRA adapters, more layers).
  const size_t i = task.param;
  const uint64_t paramSeed = mixSeed(mixSeed(seed, kWeightStream), nameKey(m_params[i].name));
  Tensor<T>& value = m_params[i].value;
  if (task.chunk < 0) {  // whole-tensor rules
    Rng rng(paramSeed);
    switch (m_init[i]) {
      case Init::kOnes: value.fill(T(1)); break;
      case Init::kZeros: value.zero(); break;
      case Init::kMixer:
        mixerInitializeParameter(m_initMixer[i], m_dims, m_localName[i], value, rng);
        break;
      default: MOEWB_CHECK_MSG(false, "parameter " << m_params[i].name << " is drawn by chunks");
    }
    return;
  }
  // N(0, stddev) over the chunk's elements of the whole (all-expert) tensor; an expert shard keeps
  // the part inside its slice [first, first + numel), as the one-rank model holds it.
  Rng rng(mixSeed(paramSeed, uint64_t(task.chunk)));
  const double stddev = initStddev(i);
  const int64_t numel = value.numel();
  const int64_t first = m_expertSharded[i] ? m_dims.expertShard * numel : 0;
  const int64_t begin = task.chunk * kInitChunkElements;
  const int64_t end = std::min(begin + kInitChunkElements, first + numel);
  for (int64_t j = begin; j < end; ++j) {
    const double draw = rng.normal() * stddev;
    if (j >= first) value[j - first] = T(draw);
  }
}

template <typename T>
void Model<T>::initialize(uint64_t seed) {
  std::vector<InitTask> tasks;
  for (size_t i = 0; i < m_params.size(); ++i) {
    const bool drawn = m_init[i] == Init::kNormal || m_init[i] == Init::kOutput ||
                       m_init[i] == Init::kLoraA;
    if (!drawn) {
      tasks.push_back({i, -1});
      continue;
    }
    const int64_t numel = m_params[i].value.numel();
    const int64_t first = m_expertSharded[i] ? m_dims.expertShard * numel : 0;
    for (int64_t c = first / kInitChunkElements; c * kInitChunkElements < first + numel; ++c) {
      tasks.push_back({i, c});
    }
  }
  m_pool.parallelFor(int64_t(tasks.size()),
                     [&](int64_t t) { initializeTask(tasks[size_t(t)], seed); });
  for (auto& bias : m_bias) bias = makeExpertBias(m_dims.numExperts);
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
std::vector<const Tensor<T>*> Model<T>::mixerValues(const LayerParams& p) const {
  std::vector<const Tensor<T>*> values;
  for (int index : p.mixerParams) values.push_back(&value(index));
  return values;
}

template <typename T>
std::vector<Tensor<T>*> Model<T>::mixerGrads(const LayerParams& p) {
  std::vector<Tensor<T>*> grads;
  for (int index : p.mixerParams) grads.push_back(&grad(index));
  return grads;
}

template <typename T>
MoeOptions Model<T>::moeOptions() const {
  MoeOptions options = m_dims.moe;
  options.topK = m_dims.topK;
  options.auxLossCoef = m_dims.auxLossCoef;
  options.seqLen = m_dims.seqLen;
  return options;
}

template <typename T>
MoeWeights<T> Model<T>::moeWeights(int32_t layer) const {
  const LayerParams& p = m_layers[size_t(layer)];
  MoeWeights<T> w{value(p.router), value(p.gate), value(p.up), value(p.down)};
  auto optional = [&](int index) { return index >= 0 ? &value(index) : nullptr; };
  w.sharedGate = optional(p.sharedGate);
  w.sharedUp = optional(p.sharedUp);
  w.sharedDown = optional(p.sharedDown);
  w.latentDown = optional(p.latentDown);
  w.latentUp = optional(p.latentUp);
  w.latentNorm = optional(p.latentNorm);
  w.bias = m_bias.empty() ? nullptr : &m_bias[size_t(layer)];
  return w;
}

template <typename T>
MoeGrads<T> Model<T>::moeGrads(int32_t layer) {
  const LayerParams& p = m_layers[size_t(layer)];
  MoeGrads<T> g{grad(p.router), grad(p.gate), grad(p.up), grad(p.down)};
  auto optional = [&](int index) { return index >= 0 ? &grad(index) : nullptr; };
  g.sharedGate = optional(p.sharedGate);
  g.sharedUp = optional(p.sharedUp);
  g.sharedDown = optional(p.sharedDown);
  g.latentDown = optional(p.latentDown);
  g.latentUp = optional(p.latentUp);
  g.latentNorm = optional(p.latentNorm);
  return g;
}

template <typename T>
void Model<T>::applyLiveDims(const ModelDims& d) {
  m_baseDims.applyLiveSettings(d);
  m_dims = m_baseDims.withAuxWeight(m_lossWeights.aux);
}

template <typename T>
void Model<T>::setLossWeights(const LossWeights& weights) {
  m_lossWeights = weights;
  m_dims = m_baseDims.withAuxWeight(weights.aux);
}

template <typename T>
void Model<T>::afterOptimizerStep() {
  for (auto& bias : m_bias) updateExpertBias(bias, m_dims.moe.biasUpdateRate);
}


template <typename T>
void Model<T>::setParallel(const ModelParallel& parallel) {
  if constexpr (!std::is_same_v<T, float>) {
    MOEWB_CHECK_MSG(parallel.ep == nullptr && parallel.world == nullptr,
                    "expert parallelism and global router statistics need Model<float>");
  }
  MOEWB_CHECK(parallel.ep == nullptr || parallel.ep->worldSize() == m_dims.expertShards);
  m_parallel = parallel;
}

template <typename T>
void Model<T>::enterUnit(int32_t unit, bool forward) {
  if (m_parallel.tag != nullptr) m_parallel.tag->layer = unit;
  if (m_parallel.hooks == nullptr) return;
  if (forward) {
    m_parallel.hooks->beforeForward(unit);
  } else {
    m_parallel.hooks->afterBackward(unit);
  }
}

template <typename T>
Tensor<T> Model<T>::embedForward(const Batch& batch, PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kEmbedding, Pass::kForward, -1);
  Tensor<T> h = embeddingForward(m_pool, m_inputs, value(m_embedding));  // [N, D]
  if (m_patchWeight < 0) return h;
  MOEWB_CHECK(batch.imagePatches == m_dims.imagePatches);
  const int64_t b = m_dims.batchSize, p = m_dims.imagePatches, d = m_dims.dModel;
  m_patches = Tensor<T>({b * p, m_dims.patchDim});  // kept in T for the weight gradient
  for (int64_t i = 0; i < m_patches.numel(); ++i) m_patches[i] = T(batch.patches[i]);
  Tensor<T> projected({b * p, d});  // [B*P, D]
  linearForward(m_pool, m_patches.data(), value(m_patchWeight).data(), projected.data(), b * p,
                m_dims.patchDim, d);
  const Tensor<T>& bias = value(m_patchBias);
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t i = 0; i < p; ++i) {
      T* dst = h.row(s * m_dims.seqLen + i);
      const T* src = projected.row(s * p + i);
      for (int64_t j = 0; j < d; ++j) dst[j] += src[j] + bias[j];
    }
  }
  return h;
}

template <typename T>
void Model<T>::embedBackward(const Tensor<T>& dh, PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kEmbedding, Pass::kBackward, -1);
  embeddingBackward(m_inputs, dh, grad(m_embedding));
  if (m_patchWeight < 0) return;
  const int64_t b = m_dims.batchSize, p = m_dims.imagePatches, d = m_dims.dModel;
  Tensor<T> dProjected({b * p, d});  // [B*P, D]
  Tensor<T>& dBias = grad(m_patchBias);
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t i = 0; i < p; ++i) {
      const T* src = dh.row(s * m_dims.seqLen + i);
      std::copy_n(src, d, dProjected.row(s * p + i));
      for (int64_t j = 0; j < d; ++j) dBias[j] += src[j];
    }
  }
  linearBackwardWeight(m_pool, dProjected.data(), m_patches.data(), grad(m_patchWeight).data(), b * p,
                       m_dims.patchDim, d);
}

template <typename T>
ForwardResult Model<T>::forward(const Batch& batch, PhaseRecorder* recorder) {
  MOEWB_CHECK(batch.batchSize == m_dims.batchSize && batch.seqLen == m_dims.seqLen);
  materializeLora();
  m_inputs = batch.inputs.clone();
  m_targets = batch.targets.clone();
  m_acts.clear();
  m_acts.resize(size_t(m_dims.numLayers));
  enterUnit(-1, true);
  Tensor<T> h = embedForward(batch, recorder);  // [N, D] residual stream
  if (m_dims.attnRes) {
    m_attnRes = std::make_unique<AttnResState<T>>(m_dims.attnResBlockSize,
                                                  AttnResOptions{m_dims.normEps, 1.0});
    m_attnRes->begin(std::move(h));
  }
  ForwardResult result;
  for (int32_t l = 0; l < int32_t(m_dims.numLayers); ++l) {
    enterUnit(l, true);
    layerForward(l, h, recorder);
    const LayerActs& a = m_acts[size_t(l)];
    result.auxLoss += a.moe.aux.loss + a.mixer.auxLoss;
    result.noteAuxTerm(l, "MoE balancing losses", a.moe.aux.loss);
    result.noteAuxTerm(l, "mixer aux loss (sparse attention: indexer KL)", a.mixer.auxLoss);
    result.expertCounts.push_back(a.moe.aux.counts);
    result.expertDropped.push_back(a.moe.aux.dropped);
    std::vector<double> bias(size_t(m_dims.numExperts), 0.0);
    if (!m_bias.empty()) {
      for (size_t e = 0; e < bias.size(); ++e) bias[e] = m_bias[size_t(l)].bias[e];
      accumulateExpertCounts(m_bias[size_t(l)], a.moe.aux.counts);
    }
    result.expertBias.push_back(std::move(bias));
  }
  if (m_parallel.tag != nullptr) m_parallel.tag->layer = -1;
  if (m_dims.attnRes) {
    m_finalInput = m_attnRes->mixFinal(m_pool, value(m_finalResQuery), value(m_finalResGain));
  } else {
    m_finalInput = std::move(h);
  }
  result.loss = lossForward(recorder);
  m_hasActivations = true;
  return result;
}

// One decoder layer. Plain residuals: h -> h + mixer(norm(h)) -> ... + moe(norm(.)), updated in
// place. AttnRes: the inputs of both sublayers come from the AttnRes state and `h` is unused.
template <typename T>
void Model<T>::layerForward(int32_t layer, Tensor<T>& h, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  if (m_dims.attnRes) {
    a.input = m_attnRes->mixBeforeSublayer(m_pool, value(p.mixerResQuery), value(p.mixerResGain));
    m_attnRes->addSublayerOutput(m_pool, mixerSublayerForward(layer, recorder));
    a.mid = m_attnRes->mixBeforeSublayer(m_pool, value(p.moeResQuery), value(p.moeResGain));
    m_attnRes->addSublayerOutput(m_pool, moeSublayerForward(layer, recorder));
    return;
  }
  a.input = std::move(h);
  a.mid = mixerSublayerForward(layer, recorder);
  addInPlace(m_pool, a.mid, a.input);
  h = moeSublayerForward(layer, recorder);
  addInPlace(m_pool, h, a.mid);
}

template <typename T>
Tensor<T> Model<T>::mixerSublayerForward(int32_t layer, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  ScopedPhase phase(recorder, mixerPhase(p.mixer), Pass::kForward, layer);
  a.norm1 = rmsNormForward(m_pool, a.input, value(p.mixerNorm), m_dims.normEps, a.rstd1);
  return mixerForward(m_pool, p.mixer, m_dims, m_step, a.norm1, mixerValues(p), a.mixer);
}

template <typename T>
Tensor<T> Model<T>::moeSublayerForward(int32_t layer, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  const MoeWeights<T> moeW = moeWeights(layer);
  {
    ScopedPhase phase(recorder, Phase::kRouter, Pass::kForward, layer);
    a.norm2 = rmsNormForward(m_pool, a.mid, value(p.moeNorm), m_dims.normEps, a.rstd2);
    moeRouterForward(m_pool, a.norm2, moeW, moeOptions(), a.moe);
    if constexpr (std::is_same_v<T, float>) {
      if (m_parallel.world != nullptr && m_dims.auxLossCoef != 0) {
        globalizeSwitchLoss(*m_parallel.world, m_dims.auxLossCoef, a.moe);
      }
    }
  }
  {
    ScopedPhase phase(recorder, Phase::kPermute, Pass::kForward, layer);
    moePermuteForward(m_pool, a.norm2, moeW, a.moe);
  }
  {
    ScopedPhase phase(recorder, Phase::kExperts, Pass::kForward, layer);
    expertsStageForward(layer, moeW);
  }
  ScopedPhase phase(recorder, Phase::kCombine, Pass::kForward, layer);
  Tensor<T> out = moeCombineForward(m_pool, moeW, a.moe);  // [N, D]
  if (moeW.sharedGate) moeSharedForward(m_pool, a.norm2, moeW, a.moe, out);
  return out;
}

// The experts stage: local grouped experts, or with expert parallelism the all-to-all round trip
// to the experts' owners (parallel/ep_dispatch.h).
template <typename T>
void Model<T>::expertsStageForward(int32_t layer, const MoeWeights<T>& w) {
  LayerActs& a = m_acts[size_t(layer)];
  if constexpr (std::is_same_v<T, float>) {
    if (m_parallel.ep != nullptr) {
      a.moe.yPerm = epExpertsForward(m_pool, *m_parallel.ep, a.moe.xPerm, a.moe.plan.offsets,
                                     ExpertWeights<float>{w.gate, w.up, w.down},
                                     a.moe.options.glu(), a.ep, m_parallel.tag);
      return;
    }
  }
  moeExpertsForward(m_pool, a.norm2, w, a.moe);
}

template <typename T>
void Model<T>::expertsStageBackward(int32_t layer, const MoeWeights<T>& w, const MoeGrads<T>& g,
                                    MoeBackwardState<T>& state) {
  LayerActs& a = m_acts[size_t(layer)];
  if constexpr (std::is_same_v<T, float>) {
    if (m_parallel.ep != nullptr) {
      state.dXPerm = epExpertsBackward(m_pool, *m_parallel.ep, state.dYPerm,
                                       ExpertWeights<float>{w.gate, w.up, w.down},
                                       ExpertGrads<float>{g.gate, g.up, g.down},
                                       a.moe.options.glu(), a.ep, m_parallel.tag);
      return;
    }
  }
  moeExpertsBackward(m_pool, a.norm2, w, a.moe, g, state);
}

template <typename T>
double Model<T>::lossForward(PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kLoss, Pass::kForward, -1);
  m_finalNormOut =
      rmsNormForward(m_pool, m_finalInput, value(m_finalNorm), m_dims.normEps, m_finalRstd);
  return lmLossForward(m_pool, m_dims, m_finalNormOut, value(m_lmHead), m_targets, m_lossSaved);
}

template <typename T>
void Model<T>::backward(PhaseRecorder* recorder) {
  MOEWB_CHECK(m_hasActivations);
  Tensor<T> dh = lossBackward(recorder);  // [N, D]
  if (m_dims.attnRes) {
    m_attnRes->backwardFinal(m_pool, dh, value(m_finalResQuery), value(m_finalResGain),
                             grad(m_finalResQuery), grad(m_finalResGain));
  }
  for (int32_t l = int32_t(m_dims.numLayers) - 1; l >= 0; --l) {
    if (m_parallel.tag != nullptr) m_parallel.tag->layer = l;
    dh = layerBackward(l, dh, recorder);
    m_acts[size_t(l)] = LayerActs();
    enterUnit(l, false);
  }
  if (m_dims.attnRes) {
    dh = m_attnRes->takeEmbeddingGrad();
    m_attnRes.reset();
  }
  embedBackward(dh, recorder);
  convertLoraGrads();
  enterUnit(-1, false);
  m_acts.clear();
  m_hasActivations = false;
}

template <typename T>
Tensor<T> Model<T>::lossBackward(PhaseRecorder* recorder) {
  ScopedPhase phase(recorder, Phase::kLoss, Pass::kBackward, -1);
  Tensor<T> dNorm = lmLossBackward(m_pool, m_dims, m_finalNormOut, value(m_lmHead), m_targets,
                                   m_lossSaved, m_lossWeights.lm, grad(m_lmHead));  // [N, D]
  Parameter<T>& norm = m_params[size_t(m_finalNorm)];
  Tensor<T> dh = rmsNormBackward(m_pool, dNorm, m_finalInput, norm.value, m_finalRstd, norm.grad);
  m_finalInput = Tensor<T>();
  m_finalNormOut = Tensor<T>();
  return dh;
}

// Plain residuals: returns dL/d(layer input) from dL/d(layer output). AttnRes: `dOut` is unused;
// the gradients flow through the AttnRes state and the result is empty.
template <typename T>
Tensor<T> Model<T>::layerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  if (m_dims.attnRes) {
    Tensor<T> dMid = moeSublayerBackward(layer, m_attnRes->backwardSublayerOutput(), recorder);
    m_attnRes->backwardMixBeforeSublayer(m_pool, dMid, value(p.moeResQuery), value(p.moeResGain),
                                         grad(p.moeResQuery), grad(p.moeResGain));
    Tensor<T> dIn = mixerSublayerBackward(layer, m_attnRes->backwardSublayerOutput(), recorder);
    m_attnRes->backwardMixBeforeSublayer(m_pool, dIn, value(p.mixerResQuery),
                                         value(p.mixerResGain), grad(p.mixerResQuery),
                                         grad(p.mixerResGain));
    return Tensor<T>();
  }
  Tensor<T> dMid = moeSublayerBackward(layer, dOut, recorder);
  addInPlace(m_pool, dMid, dOut);
  Tensor<T> dIn = mixerSublayerBackward(layer, dMid, recorder);
  addInPlace(m_pool, dIn, dMid);
  return dIn;
}

// dL/d(MoE sublayer input, before its norm) from dL/d(MoE output).
template <typename T>
Tensor<T> Model<T>::moeSublayerBackward(int32_t layer, const Tensor<T>& dOut,
                                        PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  const MoeWeights<T> moeW = moeWeights(layer);
  const MoeGrads<T> moeG = moeGrads(layer);
  MoeBackwardState<T> state;
  {
    ScopedPhase phase(recorder, Phase::kCombine, Pass::kBackward, layer);
    moeCombineBackward(m_pool, dOut, moeW, a.moe, moeG, state);
  }
  {
    ScopedPhase phase(recorder, Phase::kExperts, Pass::kBackward, layer);
    expertsStageBackward(layer, moeW, moeG, state);
  }
  Tensor<T> dNorm2;  // [N, D]
  {
    ScopedPhase phase(recorder, Phase::kPermute, Pass::kBackward, layer);
    dNorm2 = moePermuteBackward(m_pool, a.norm2, moeW, a.moe, moeG, state);
  }
  ScopedPhase phase(recorder, Phase::kRouter, Pass::kBackward, layer);
  moeRouterBackward(m_pool, a.norm2, moeW, moeOptions(), a.moe, moeG, state, dNorm2);
  if (moeW.sharedGate) moeSharedBackward(m_pool, dOut, a.norm2, moeW, a.moe, moeG, dNorm2);
  return rmsNormBackward(m_pool, dNorm2, a.mid, value(p.moeNorm), a.rstd2, grad(p.moeNorm));
}

// dL/d(mixer sublayer input, before its norm) from dL/d(mixer output).
template <typename T>
Tensor<T> Model<T>::mixerSublayerBackward(int32_t layer, const Tensor<T>& dOut,
                                          PhaseRecorder* recorder) {
  const LayerParams& p = m_layers[size_t(layer)];
  LayerActs& a = m_acts[size_t(layer)];
  ScopedPhase phase(recorder, mixerPhase(p.mixer), Pass::kBackward, layer);
  Tensor<T> dNorm1 = mixerBackward(m_pool, p.mixer, m_dims, m_step, dOut, a.norm1, mixerValues(p),
                                   mixerGrads(p), a.mixer);
  return rmsNormBackward(m_pool, dNorm1, a.input, value(p.mixerNorm), a.rstd1, grad(p.mixerNorm));
}

template class Model<float>;
template class Model<double>;

}  // namespace moewb::engine
