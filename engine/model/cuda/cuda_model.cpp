// CudaModel: parameter lookup, forward / backward of the decoder stack and the per-step readback
// (see cuda_model.h). The CPU twin is model/model.cpp; phase scopes cover the same work.
#include "model/cuda/cuda_model.h"

#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/transfer.h"
#include "model/cuda/cuda_global_router.h"
#include "model/cpu/mixer.h"
#include "model/layers/attnres_state_cuda.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/experts/expert_kernel_choice.h"
#include "ops/lora/lora_cuda.h"
#include "ops/patchify/patch_embed_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "model/parallel/collective_error.h"

namespace moewb::engine::cuda {
namespace {

Phase mixerPhase(char kind) {
  return kind == 'K' ? Phase::kKda : kind == 'S' ? Phase::kSparseAttention : Phase::kAttention;
}

}  // namespace

Status CudaModel::checkSupported(const ModelDims& dims) {
  return checkOpsSupported(OpBackend::kCuda, opProblemOf(dims));
}

Result<std::unique_ptr<CudaModel>> CudaModel::create(CudaContext& context, Model<float>& host) {
  MOEWB_RETURN_IF_ERROR(checkSupported(host.dims()));
  MOEWB_ASSIGN_OR_RETURN(CudaParameters params, CudaParameters::upload(context, host.parameters()));
  std::unique_ptr<CudaModel> model(new CudaModel(context, host, std::move(params)));
  if (!host.expertBiases().empty()) {
    for (int64_t l = 0; l < model->m_dims.numLayers; ++l) {
      MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> bias,
                             context.newTensor<float>({model->m_dims.numExperts},
                                                      MemoryCategory::kWeights));
      model->m_bias.push_back(std::move(bias));
    }
  }
  MOEWB_RETURN_IF_ERROR(context.synchronize());
  return model;
}

CudaModel::CudaModel(CudaContext& context, Model<float>& host, CudaParameters params)
    : m_context(context),
      m_host(host),
      m_baseDims(host.dims()),
      m_dims(host.dims()),
      m_params(std::move(params)) {
  if (!m_dims.lora.enabled) return;
  m_loraScale = m_dims.lora.alpha / double(m_dims.lora.rank);
  const std::string suffix = ".lora_a";
  for (CudaParameter& p : m_params.all()) {
    if (!p.name.ends_with(suffix)) continue;
    const std::string base = p.name.substr(0, p.name.size() - suffix.size());
    m_lora.push_back({&m_params.at(base), &p, &m_params.at(base + ".lora_b")});
  }
}

// Sets the trace tag's layer and runs the parallel hook of `unit` (FSDP gather / reduce).
Status CudaModel::enterUnit(int32_t unit, bool forward) {
  if (m_parallel.tag != nullptr) m_parallel.tag->layer = unit;
  if (m_parallel.hooks == nullptr) return Status::ok();
  try {
    if (forward) {
      m_parallel.hooks->beforeForward(unit);
    } else {
      m_parallel.hooks->afterBackward(unit);
    }
  } catch (const CollectiveError& e) {
    return e.status();
  }
  return Status::ok();
}

void CudaModel::applyLiveDims(const ModelDims& d) {
  m_baseDims.applyLiveSettings(d);
  m_dims = m_baseDims.withAuxWeight(m_lossWeights.aux);
}

void CudaModel::setLossWeights(const LossWeights& weights) {
  m_lossWeights = weights;
  m_dims = m_baseDims.withAuxWeight(weights.aux);
}

Status CudaModel::setSwap(SwapTierCuda* tier, const SwapController* controller) {
  if (m_parallel.ep != nullptr || m_parallel.world != nullptr || m_dims.expertShards > 1) {
    return failedPrecondition(
        "swap (swap.mode other than \"off\") runs on a single GPU only; this model is one rank "
        "of a parallel run (parallel.ep / world size > 1): set swap.mode = \"off\"");
  }
  m_swapTier = controller != nullptr ? tier : nullptr;
  m_swapController = tier != nullptr ? controller : nullptr;
  return Status::ok();
}

// After layer `layer`'s forward: hands the tensors the controller swaps this step to the tier,
// then drops those it recomputes (moeSublayerBackward writes them again).
Status CudaModel::offloadLayer(int32_t layer) {
  if (m_swapTier == nullptr) return Status::ok();
  LayerActs& a = m_acts[size_t(layer)];
  std::vector<SwapSlots> slots, dropped;
  auto plan = [&](SwapOp op, DeviceTensor<bf16>* first, DeviceTensor<bf16>* second = nullptr) {
    if (m_swapController->swaps(layer, op)) slots.push_back({op, {first, second}});
    if (m_swapController->recomputes(layer, op)) dropped.push_back({op, {first, second}});
  };
  plan(SwapOp::kAttnNorm, &a.input);
  plan(SwapOp::kMixerInput, &a.norm1);
  plan(SwapOp::kMoeNorm, &a.mid);
  plan(SwapOp::kMoeInput, &a.norm2);
  plan(SwapOp::kExpertFc1, &a.moe.xPerm);  // empty with fusion.permute_into_experts: skipped
  plan(SwapOp::kMoeAct, &a.moe.experts.gatePre, &a.moe.experts.upPre);
  plan(SwapOp::kExpertFc2, &a.moe.experts.hidden);
  MOEWB_RETURN_IF_ERROR(m_swapTier->endLayerForward(layer, slots));
  return m_swapTier->dropForRecompute(layer, dropped);
}

std::string CudaModel::layerName(int64_t layer, const char* local) const {
  return "layers." + std::to_string(layer) + "." + local;
}

const bf16* CudaModel::weight(const std::string& name) const {
  const int index = m_params.find(name);
  return index < 0 ? nullptr : m_params.all()[size_t(index)].compute.data();
}

float* CudaModel::gradOf(const std::string& name) {
  const int index = m_params.find(name);
  return index < 0 ? nullptr : m_params.all()[size_t(index)].grad.data();
}

std::vector<CudaParameter*> CudaModel::mixerParams(int64_t layer) {
  std::vector<CudaParameter*> params;
  for (const MixerParamSpec& spec : mixerParameterSpecs(m_dims.mixerOf(layer), m_dims)) {
    params.push_back(&m_params.at(layerName(layer, spec.name.c_str())));
  }
  return params;
}

MoeOptions CudaModel::moeOptions() const {
  MoeOptions options = m_dims.moe;
  options.topK = m_dims.topK;
  options.auxLossCoef = m_dims.auxLossCoef;
  options.seqLen = m_dims.seqLen;
  return options;
}

MoeShapeCuda CudaModel::moeShape() const {
  return {m_dims.tokens(), m_dims.dModel, m_dims.numExperts, m_dims.dFf};
}

MoeWeightsCuda CudaModel::moeWeights(int64_t layer) const {
  auto w = [&](const char* local) { return weight(layerName(layer, local)); };
  MoeWeightsCuda weights;
  weights.router = w("moe.router");
  weights.gate = &m_params.at(layerName(layer, "moe.gate")).compute;
  weights.up = &m_params.at(layerName(layer, "moe.up")).compute;
  weights.down = &m_params.at(layerName(layer, "moe.down")).compute;
  weights.sharedGate = w("moe.shared.gate");
  weights.sharedUp = w("moe.shared.up");
  weights.sharedDown = w("moe.shared.down");
  weights.latentDown = w("moe.latent.down");
  weights.latentUp = w("moe.latent.up");
  weights.latentNorm = w("moe.latent.norm");
  weights.bias = m_bias.empty() ? nullptr : m_bias[size_t(layer)].data();
  return weights;
}

MoeGradsCuda CudaModel::moeGrads(int64_t layer) {
  auto g = [&](const char* local) { return gradOf(layerName(layer, local)); };
  MoeGradsCuda grads;
  grads.router = g("moe.router");
  grads.gate = &m_params.at(layerName(layer, "moe.gate")).grad;
  grads.up = &m_params.at(layerName(layer, "moe.up")).grad;
  grads.down = &m_params.at(layerName(layer, "moe.down")).grad;
  grads.sharedGate = g("moe.shared.gate");
  grads.sharedUp = g("moe.shared.up");
  grads.sharedDown = g("moe.shared.down");
  grads.latentDown = g("moe.latent.down");
  grads.latentUp = g("moe.latent.up");
  grads.latentNorm = g("moe.latent.norm");
  return grads;
}

Status CudaModel::uploadBias(int32_t layer) {
  if (m_bias.empty()) return Status::ok();
  const std::vector<float>& bias = m_host.expertBiases()[size_t(layer)].bias;
  Tensor<float> values({int64_t(bias.size())});
  for (size_t e = 0; e < bias.size(); ++e) values[int64_t(e)] = bias[e];
  return copyToDevice(m_context, values, m_bias[size_t(layer)]);
}

Result<ForwardResult> CudaModel::forward(const Batch& batch, DeviceTimeline* timeline) {
  MOEWB_CHECK(batch.batchSize == m_dims.batchSize && batch.seqLen == m_dims.seqLen);
  releaseActivations();
  if (m_dims.expertShards > 1 && (m_parallel.ep == nullptr ||
                                  m_parallel.ep->worldSize() != m_dims.expertShards)) {
    return failedPrecondition("CudaModel: " + std::to_string(m_dims.expertShards) +
                              " expert shards need an EP communicator of that size "
                              "(setParallel)");
  }
  // The run's [kernels] choice (live-patchable) on the process-wide expert switches: at the first
  // forward and whenever a live patch changed it.
  if (!(m_dims.kernels == m_appliedKernels)) {
    MOEWB_RETURN_IF_ERROR(applyExpertKernelChoice(m_dims.kernels.expertGlu,
                                                  m_dims.kernels.expertWgradWalk));
    m_appliedKernels = m_dims.kernels;
  }
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  DeviceTensor<bf16> h;  // [N, D] residual stream
  MOEWB_RETURN_IF_ERROR(enterUnit(-1, true));
  {
    DevicePhase phase(timeline, Phase::kEmbedding, Pass::kForward, -1);
    MOEWB_RETURN_IF_ERROR(mergeLora());
    MOEWB_ASSIGN_OR_RETURN(m_inputs, toDevice(m_context, batch.inputs, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_RETURN(m_targets,
                           toDevice(m_context, batch.targets, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_RETURN(h, m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(embeddingForwardCuda(m_context.stream(), m_inputs.data(), n,
                                               weight("embedding"), m_dims.vocabSize, d, h.data()));
    if (m_dims.imagePatches > 0) {
      MOEWB_CHECK(batch.imagePatches == m_dims.imagePatches);
      MOEWB_ASSIGN_OR_RETURN(m_patches, toDeviceBf16(m_context, batch.patches,
                                                     MemoryCategory::kActivations));
      MOEWB_RETURN_IF_ERROR(patchEmbedForwardCuda(
          m_context, m_patches.data(), weight("patch_embed.weight"), weight("patch_embed.bias"),
          m_dims.batchSize, m_dims.seqLen, m_dims.imagePatches, m_dims.patchDim, d, h.data()));
    }
  }
  if (m_dims.attnRes) {
    m_attnRes = std::make_unique<AttnResStateCuda>(m_dims.attnResBlockSize,
                                                   AttnResOptions{m_dims.normEps, 1.0});
    m_attnRes->begin(std::move(h));
  }
  m_acts.resize(size_t(m_dims.numLayers));  // not resized again: the swap tier points into it
  for (int32_t l = 0; l < int32_t(m_dims.numLayers); ++l) {
    MOEWB_RETURN_IF_ERROR(enterUnit(l, true));
    if (m_swapTier != nullptr) MOEWB_RETURN_IF_ERROR(m_swapTier->beginLayerForward(l));
    MOEWB_RETURN_IF_ERROR(layerForward(l, h, timeline));
    MOEWB_RETURN_IF_ERROR(offloadLayer(l));
  }
  if (m_swapTier != nullptr) MOEWB_RETURN_IF_ERROR(m_swapTier->endForward());
  if (m_dims.attnRes) {
    MOEWB_ASSIGN_OR_RETURN(m_finalInput,
                           m_attnRes->mixFinal(m_context, m_params.at("final_res.query").compute,
                                               m_params.at("final_res.key_norm").compute));
  } else {
    m_finalInput = std::move(h);
  }
  {
    DevicePhase phase(timeline, Phase::kLoss, Pass::kForward, -1);
    MOEWB_ASSIGN_OR_RETURN(m_finalNormOut,
                           m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_RETURN(m_finalRstd, m_context.newTensor<float>({n}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(rmsNormForwardCuda(m_context.stream(), m_finalInput.data(),
                                             weight("final_norm"), float(m_dims.normEps),
                                             m_finalNormOut.data(), m_finalRstd.data(), n, d));
    MOEWB_RETURN_IF_ERROR(lossForwardCuda(m_context, m_dims, m_finalNormOut, weight("lm_head"),
                                          m_targets, m_loss));
  }
  m_hasActivations = true;
  return readForwardResult();
}

// One decoder layer. Plain residuals: h -> h + mixer(norm(h)) -> ... + moe(norm(.)), the adds
// inside the sublayers' phases. AttnRes: both sublayer inputs come from the AttnRes state and `h`
// is unused.
Status CudaModel::layerForward(int32_t layer, DeviceTensor<bf16>& h, DeviceTimeline* timeline) {
  LayerActs& a = m_acts[size_t(layer)];
  if (m_dims.attnRes) {
    MOEWB_ASSIGN_OR_RETURN(a.input, m_attnRes->mixBeforeSublayer(
                                        m_context, m_params.at(layerName(layer, "attn_res.query")).compute,
                                        m_params.at(layerName(layer, "attn_res.key_norm")).compute));
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> mixed, mixerSublayerForward(layer, nullptr, timeline));
    MOEWB_RETURN_IF_ERROR(m_attnRes->addSublayerOutput(m_context, std::move(mixed)));
    MOEWB_ASSIGN_OR_RETURN(a.mid, m_attnRes->mixBeforeSublayer(
                                      m_context, m_params.at(layerName(layer, "moe_res.query")).compute,
                                      m_params.at(layerName(layer, "moe_res.key_norm")).compute));
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> moe, moeSublayerForward(layer, nullptr, timeline));
    return m_attnRes->addSublayerOutput(m_context, std::move(moe));
  }
  a.input = std::move(h);
  MOEWB_ASSIGN_OR_RETURN(a.mid, mixerSublayerForward(layer, &a.input, timeline));
  MOEWB_ASSIGN_OR_RETURN(h, moeSublayerForward(layer, &a.mid, timeline));
  return Status::ok();
}

// Mixer(RMSNorm(a.input)) (+ residual when given).
Result<DeviceTensor<bf16>> CudaModel::mixerSublayerForward(int32_t layer,
                                                           const DeviceTensor<bf16>* residual,
                                                           DeviceTimeline* timeline) {
  LayerActs& a = m_acts[size_t(layer)];
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  const char kind = m_dims.mixerOf(layer);
  DevicePhase phase(timeline, mixerPhase(kind), Pass::kForward, layer);
  MOEWB_ASSIGN_OR_RETURN(a.norm1, m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(a.rstd1, m_context.newTensor<float>({n}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(rmsNormForwardCuda(m_context.stream(), a.input.data(),
                                           weight(layerName(layer, "attn_norm")),
                                           float(m_dims.normEps), a.norm1.data(), a.rstd1.data(),
                                           n, d));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y, mixerForwardCuda(m_context, kind, m_dims, m_step,
                                                                a.norm1, mixerParams(layer), a.mixer));
  if (residual != nullptr) {
    MOEWB_RETURN_IF_ERROR(addBf16(m_context.stream(), y.data(), residual->data(), y.data(), n * d));
  }
  return y;
}

// MoE(RMSNorm(a.mid)) (+ residual when given), one phase per MoE stage.
Result<DeviceTensor<bf16>> CudaModel::moeSublayerForward(int32_t layer,
                                                         const DeviceTensor<bf16>* residual,
                                                         DeviceTimeline* timeline) {
  LayerActs& a = m_acts[size_t(layer)];
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  const MoeWeightsCuda w = moeWeights(layer);
  {
    DevicePhase phase(timeline, Phase::kRouter, Pass::kForward, layer);
    MOEWB_ASSIGN_OR_RETURN(a.norm2, m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_RETURN(a.rstd2, m_context.newTensor<float>({n}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(rmsNormForwardCuda(m_context.stream(), a.mid.data(),
                                             weight(layerName(layer, "moe_norm")),
                                             float(m_dims.normEps), a.norm2.data(), a.rstd2.data(),
                                             n, d));
    MOEWB_RETURN_IF_ERROR(uploadBias(layer));
    MOEWB_RETURN_IF_ERROR(moeRouterForwardCuda(m_context, a.norm2, w, moeShape(), moeOptions(), a.moe));
    if (m_parallel.world != nullptr && m_dims.auxLossCoef != 0) {
      MOEWB_RETURN_IF_ERROR(globalizeSwitchLossCuda(m_context, *m_parallel.world,
                                                    m_dims.auxLossCoef, a.moe.route,
                                                    a.moe.switchAux));
    }
  }
  {
    DevicePhase phase(timeline, Phase::kPermute, Pass::kForward, layer);
    MOEWB_RETURN_IF_ERROR(moePermuteForwardCuda(m_context, a.norm2, w, moeShape(), a.moe));
  }
  {
    DevicePhase phase(timeline, Phase::kExperts, Pass::kForward, layer);
    if (m_parallel.ep != nullptr) {
      MOEWB_ASSIGN_OR_RETURN(a.moe.yPerm,
                             epExpertsForwardCuda(m_context, *m_parallel.ep, a.moe.xPerm,
                                                  a.moe.plan.offsets,
                                                  DeviceExpertWeights{*w.gate, *w.up, *w.down},
                                                  a.moe.options.glu(), a.ep, m_parallel.tag,
                                                  m_parallel.a2aChunks));
    } else {
      MOEWB_RETURN_IF_ERROR(moeExpertsForwardCuda(m_context, a.norm2, w, a.moe));
    }
  }
  DevicePhase phase(timeline, Phase::kCombine, Pass::kForward, layer);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y,
                         moeCombineForwardCuda(m_context, a.norm2, w, moeShape(), a.moe));
  if (residual != nullptr) {
    MOEWB_RETURN_IF_ERROR(addBf16(m_context.stream(), y.data(), residual->data(), y.data(), n * d));
  }
  return y;
}

// Queues every scalar and count the forward result needs into m_readback, waits once, then
// reads them in the same order (indices kept per layer).
Result<ForwardResult> CudaModel::readForwardResult() {
  struct LayerReads {
    size_t counts = 0, switchLoss = 0, seqLoss = 0, zLoss = 0, mixerAux = 0, dropped = 0;
    bool hasSeq = false, hasZ = false, hasMixerAux = false, hasDropped = false;
  };
  const int64_t layers = m_dims.numLayers, e = m_dims.numExperts;
  m_readback.reset();
  MOEWB_ASSIGN_OR_RETURN(const size_t ceRead, m_readback.add(m_context, m_loss.loss));
  std::vector<LayerReads> reads(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const LayerActs& a = m_acts[size_t(l)];
    const MoeSavedCuda& moe = a.moe;
    LayerReads& r = reads[size_t(l)];
    MOEWB_ASSIGN_OR_RETURN(r.counts, m_readback.add(m_context, moe.switchAux.counts));
    MOEWB_ASSIGN_OR_RETURN(r.switchLoss, m_readback.add(m_context, moe.switchAux.loss));
    r.hasSeq = !moe.seqAux.loss.empty();
    if (r.hasSeq) {
      MOEWB_ASSIGN_OR_RETURN(r.seqLoss, m_readback.add(m_context, moe.seqAux.loss));
    }
    r.hasZ = !moe.zLoss.empty();
    if (r.hasZ) {
      MOEWB_ASSIGN_OR_RETURN(r.zLoss, m_readback.add(m_context, moe.zLoss));
    }
    if (const DeviceTensor<float>* mixerAux = mixerAuxLossCuda(a.mixer)) {
      r.hasMixerAux = true;
      MOEWB_ASSIGN_OR_RETURN(r.mixerAux, m_readback.add(m_context, *mixerAux));
    }
    r.hasDropped = moe.capacity >= 0;
    if (r.hasDropped) {
      MOEWB_ASSIGN_OR_RETURN(r.dropped, m_readback.add(m_context, moe.mask.dropped));
    }
  }
  MOEWB_RETURN_IF_ERROR(m_readback.wait(m_context));

  ForwardResult result;
  result.loss = double(m_readback.take<float>(ceRead)[0]);
  for (int64_t l = 0; l < layers; ++l) {
    const LayerReads& r = reads[size_t(l)];
    const int32_t layer = int32_t(l);
    const Tensor<int32_t> counts = m_readback.take<int32_t>(r.counts);
    double aux = 0;
    const float switchLoss = m_readback.take<float>(r.switchLoss)[0];
    aux += double(switchLoss);
    result.noteAuxTerm(layer, "MoE switch aux loss", switchLoss);
    if (r.hasSeq) {
      const float seqLoss = m_readback.take<float>(r.seqLoss)[0];
      aux += double(seqLoss);
      result.noteAuxTerm(layer, "MoE sequence aux loss", seqLoss);
    }
    if (r.hasZ) {
      const float zLoss = m_readback.take<float>(r.zLoss)[0];
      aux += double(zLoss);
      result.noteAuxTerm(layer, "router z-loss", zLoss);
    }
    if (r.hasMixerAux) {
      const float value = m_readback.take<float>(r.mixerAux)[0];
      aux += double(value);
      result.noteAuxTerm(layer, "mixer aux loss (sparse attention: indexer KL)", value);
    }
    result.auxLoss += aux;
    std::vector<int64_t> perExpert(size_t(e), 0);
    for (int64_t i = 0; i < e; ++i) perExpert[size_t(i)] = counts[i];
    std::vector<double> bias(size_t(e), 0.0);
    if (!m_bias.empty()) {
      ExpertBias& state = m_host.expertBiases()[size_t(l)];
      for (size_t i = 0; i < bias.size(); ++i) bias[i] = state.bias[i];
      accumulateExpertCounts(state, perExpert);
    }
    result.expertCounts.push_back(std::move(perExpert));
    std::vector<int64_t> dropped(size_t(e), 0);
    if (r.hasDropped) {
      const Tensor<int32_t> droppedHost = m_readback.take<int32_t>(r.dropped);
      for (int64_t i = 0; i < e; ++i) dropped[size_t(i)] = droppedHost[i];
    }
    result.expertDropped.push_back(std::move(dropped));
    result.expertBias.push_back(std::move(bias));
  }
  return result;
}

Status CudaModel::backward(DeviceTimeline* timeline) {
  MOEWB_CHECK(m_hasActivations);
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  DeviceTensor<bf16> dh;  // [N, D] gradient of the residual stream
  {
    DevicePhase phase(timeline, Phase::kLoss, Pass::kBackward, -1);
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dNorm,
                           lossBackwardCuda(m_context, m_dims, m_finalNormOut, weight("lm_head"),
                                            m_targets, m_loss, float(m_lossWeights.lm),
                                            gradOf("lm_head")));
    MOEWB_ASSIGN_OR_RETURN(dh, m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(rmsNormBackwardCuda(m_context, dNorm.data(), m_finalInput.data(),
                                              weight("final_norm"), m_finalRstd.data(), dh.data(),
                                              gradOf("final_norm"), n, d));
    m_finalInput = DeviceTensor<bf16>();
    m_finalNormOut = DeviceTensor<bf16>();
    if (m_dims.attnRes) {
      CudaParameter& query = m_params.at("final_res.query");
      CudaParameter& keyNorm = m_params.at("final_res.key_norm");
      MOEWB_RETURN_IF_ERROR(m_attnRes->backwardFinal(m_context, dh, query.compute, keyNorm.compute,
                                                     query.grad, keyNorm.grad));
    }
  }
  for (int32_t l = int32_t(m_dims.numLayers) - 1; l >= 0; --l) {
    if (m_parallel.tag != nullptr) m_parallel.tag->layer = l;
    if (m_swapTier != nullptr) MOEWB_RETURN_IF_ERROR(m_swapTier->beginLayerBackward(l));
    MOEWB_RETURN_IF_ERROR(layerBackward(l, dh, timeline));
    if (m_swapTier != nullptr) MOEWB_RETURN_IF_ERROR(m_swapTier->endLayerBackward(l));
    m_acts[size_t(l)] = LayerActs();
    MOEWB_RETURN_IF_ERROR(enterUnit(l, false));
  }
  {
    DevicePhase phase(timeline, Phase::kEmbedding, Pass::kBackward, -1);
    if (m_dims.attnRes) {
      MOEWB_ASSIGN_OR_RETURN(dh, m_attnRes->takeEmbeddingGrad(m_context));
      m_attnRes.reset();
    }
    MOEWB_RETURN_IF_ERROR(embeddingBackwardCuda(m_context, m_inputs.data(), n, dh.data(),
                                                m_dims.vocabSize, d, gradOf("embedding")));
    if (m_dims.imagePatches > 0) {
      MOEWB_RETURN_IF_ERROR(patchEmbedBackwardCuda(
          m_context, dh.data(), m_patches.data(), m_dims.batchSize, m_dims.seqLen,
          m_dims.imagePatches, m_dims.patchDim, d, gradOf("patch_embed.weight"),
          gradOf("patch_embed.bias")));
    }
    MOEWB_RETURN_IF_ERROR(convertLoraGrads());
  }
  dropActivations();  // (the swap tier's step stays open for finishStep)
  MOEWB_RETURN_IF_ERROR(enterUnit(-1, false));
  return Status::ok();
}

// Plain residuals: dh holds dL/d(layer output) on entry and dL/d(layer input) on return, updated
// in place (each sublayer's input gradient is added into the residual gradient). AttnRes: the
// gradients flow through the AttnRes state and dh is unused.
Status CudaModel::layerBackward(int32_t layer, DeviceTensor<bf16>& dh, DeviceTimeline* timeline) {
  if (!m_dims.attnRes) {
    MOEWB_RETURN_IF_ERROR(moeSublayerBackward(layer, dh, dh, /*accumulate=*/true, timeline));
    return mixerSublayerBackward(layer, dh, dh, /*accumulate=*/true, timeline);
  }
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  auto mixBackward = [&](const char* prefix, const DeviceTensor<bf16>& dInput) {
    CudaParameter& query = m_params.at(layerName(layer, (std::string(prefix) + ".query").c_str()));
    CudaParameter& keyNorm =
        m_params.at(layerName(layer, (std::string(prefix) + ".key_norm").c_str()));
    return m_attnRes->backwardMixBeforeSublayer(m_context, dInput, query.compute, keyNorm.compute,
                                                query.grad, keyNorm.grad);
  };
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dMoeOut, m_attnRes->backwardSublayerOutput(m_context));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dMid,
                         m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(moeSublayerBackward(layer, dMoeOut, dMid, /*accumulate=*/false, timeline));
  MOEWB_RETURN_IF_ERROR(mixBackward("moe_res", dMid));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dMixOut, m_attnRes->backwardSublayerOutput(m_context));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dIn,
                         m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(mixerSublayerBackward(layer, dMixOut, dIn, /*accumulate=*/false, timeline));
  return mixBackward("attn_res", dIn);
}

// dInput (=, or += when accumulate) dL/d(a.mid) through the MoE and its norm, from dOut. dOut is
// read before dInput is written, so they may be the same tensor.
Status CudaModel::moeSublayerBackward(int32_t layer, const DeviceTensor<bf16>& dOut,
                                      DeviceTensor<bf16>& dInput, bool accumulate,
                                      DeviceTimeline* timeline) {
  LayerActs& a = m_acts[size_t(layer)];
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  const MoeWeightsCuda w = moeWeights(layer);
  const MoeGradsCuda g = moeGrads(layer);
  MoeBackwardStateCuda state;
  {
    DevicePhase phase(timeline, Phase::kCombine, Pass::kBackward, layer);
    MOEWB_RETURN_IF_ERROR(moeCombineBackwardCuda(m_context, dOut, w, moeShape(), a.moe, g, state));
  }
  {
    DevicePhase phase(timeline, Phase::kExperts, Pass::kBackward, layer);
    if (m_parallel.ep != nullptr) {
      MOEWB_ASSIGN_OR_RETURN(state.dXPerm,
                             epExpertsBackwardCuda(m_context, *m_parallel.ep, state.dYPerm,
                                                   DeviceExpertWeights{*w.gate, *w.up, *w.down},
                                                   DeviceExpertGrads{*g.gate, *g.up, *g.down},
                                                   a.moe.options.glu(), a.ep, m_parallel.tag));
    } else {
      const DeviceExpertsSaved& kept = a.moe.experts;
      if (kept.gatePre.empty() || kept.upPre.empty() || kept.hidden.empty()) {  // swap recompute
        MOEWB_CHECK(m_swapTier != nullptr);
        MOEWB_RETURN_IF_ERROR(m_swapTier->beginRecompute(layer));
        MOEWB_RETURN_IF_ERROR(moeExpertsRecomputeCuda(m_context, a.norm2, w, a.moe));
        MOEWB_RETURN_IF_ERROR(m_swapTier->endRecompute(layer));
      }
      MOEWB_RETURN_IF_ERROR(moeExpertsBackwardCuda(m_context, a.norm2, w, a.moe, g, state));
    }
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dNorm2,
                         m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  {
    DevicePhase phase(timeline, Phase::kPermute, Pass::kBackward, layer);
    MOEWB_RETURN_IF_ERROR(fillBf16(m_context.stream(), dNorm2.data(), 0.0f, n * d));
    MOEWB_RETURN_IF_ERROR(
        moePermuteBackwardCuda(m_context, a.norm2, w, moeShape(), a.moe, g, state, dNorm2));
  }
  DevicePhase phase(timeline, Phase::kRouter, Pass::kBackward, layer);
  MOEWB_RETURN_IF_ERROR(
      moeRouterBackwardCuda(m_context, dOut, a.norm2, w, moeShape(), a.moe, g, state, dNorm2));
  return rmsNormBackwardCuda(m_context, dNorm2.data(), a.mid.data(),
                             weight(layerName(layer, "moe_norm")), a.rstd2.data(), dInput.data(),
                             gradOf(layerName(layer, "moe_norm")), n, d, accumulate);
}

// dInput (=, or += when accumulate) dL/d(a.input) through the mixer and its norm, from dOut.
Status CudaModel::mixerSublayerBackward(int32_t layer, const DeviceTensor<bf16>& dOut,
                                        DeviceTensor<bf16>& dInput, bool accumulate,
                                        DeviceTimeline* timeline) {
  LayerActs& a = m_acts[size_t(layer)];
  const int64_t n = m_dims.tokens(), d = m_dims.dModel;
  const char kind = m_dims.mixerOf(layer);
  DevicePhase phase(timeline, mixerPhase(kind), Pass::kBackward, layer);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dNorm1,
                         m_context.newTensor<bf16>({n, d}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(mixerBackwardCuda(m_context, kind, m_dims, m_step, dOut, a.norm1,
                                          mixerParams(layer), a.mixer, dNorm1));
  return rmsNormBackwardCuda(m_context, dNorm1.data(), a.input.data(),
                             weight(layerName(layer, "attn_norm")), a.rstd1.data(), dInput.data(),
                             gradOf(layerName(layer, "attn_norm")), n, d, accumulate);
}

// LoRA (lora.enabled): W' = W + s B A into each adapted weight's bf16 compute copy, before the
// forward (the base's master W is frozen; the ops read the compute copy).
Status CudaModel::mergeLora() {
  for (const LoraTriple& t : m_lora) {
    MOEWB_RETURN_IF_ERROR(loraMergeCuda(m_context, t.base->master, t.a->master, t.b->master,
                                        m_loraScale, t.base->compute));
  }
  return Status::ok();
}

// After the backward: the dW' left in each adapted weight's grad becomes dA and dB; W's grad is
// zeroed (frozen, outside the norm and the update).
Status CudaModel::convertLoraGrads() {
  for (const LoraTriple& t : m_lora) {
    MOEWB_RETURN_IF_ERROR(loraBackwardCuda(m_context, t.base->grad, t.a->master, t.b->master,
                                           m_loraScale, t.a->grad, t.b->grad));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t.base->grad.data(), 0,
                                               size_t(t.base->grad.bytes()), m_context.stream()));
  }
  return Status::ok();
}

void CudaModel::releaseActivations() {
  // Copies in flight into or out of the saved tensors finish before their blocks are released.
  if (m_swapTier != nullptr) m_swapTier->abortStep();
  dropActivations();
}

void CudaModel::dropActivations() {
  m_acts.clear();
  m_attnRes.reset();
  m_patches = DeviceTensor<bf16>();
  m_inputs = DeviceTensor<int32_t>();
  m_targets = DeviceTensor<int32_t>();
  m_finalInput = DeviceTensor<bf16>();
  m_finalNormOut = DeviceTensor<bf16>();
  m_finalRstd = DeviceTensor<float>();
  m_loss = LossStateCuda();
  m_hasActivations = false;
}

}  // namespace moewb::engine::cuda
