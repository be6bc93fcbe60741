// modelParameterLayout: the model's parameter list from its dimensions (parameter_layout.h), and
// modelParameterShapes, the public listing of it (moewb/engine/model_parameters.h).
#include "model/cpu/parameter_layout.h"

#include <utility>

#include "ops/lora/lora.h"
#include "model/cpu/mixer.h"
#include "moewb/engine/model_parameters.h"

namespace moewb::engine {
namespace {

// Appends one parameter; the local name is the name below "layers.<l>." for layer parameters.
void declare(std::vector<ParameterDecl>& out, ParameterDecl decl) {
  if (decl.localName.empty()) decl.localName = decl.name;
  out.push_back(std::move(decl));
}

ParamInit moeInit(MoeParamInit init) {
  return init == MoeParamInit::kOnes     ? ParamInit::kOnes
         : init == MoeParamInit::kOutput ? ParamInit::kOutput
                                         : ParamInit::kNormal;
}

void declareLayer(const ModelDims& dims, int32_t layer, std::vector<ParameterDecl>& out) {
  const int64_t d = dims.dModel;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  const char mixer = dims.mixerOf(layer);
  // A parameter of this layer with local name `local`.
  auto add = [&](const std::string& local, std::vector<int64_t> shape, bool decay,
                 ParamInit init, ParamRole role) {
    ParameterDecl decl;
    decl.name = prefix + local;
    decl.localName = local;
    decl.shape = std::move(shape);
    decl.decay = decay;
    decl.init = init;
    decl.role = role;
    decl.layer = layer;
    declare(out, std::move(decl));
  };
  if (dims.attnRes) {
    add("attn_res.query", {d}, false, ParamInit::kZeros, ParamRole::kMixerResQuery);
    add("attn_res.key_norm", {d}, false, ParamInit::kOnes, ParamRole::kMixerResGain);
  }
  add("attn_norm", {d}, false, ParamInit::kOnes, ParamRole::kMixerNorm);
  for (const MixerParamSpec& spec : mixerParameterSpecs(mixer, dims)) {
    add(spec.name, spec.shape, spec.decay, ParamInit::kMixer, ParamRole::kMixer);
    out.back().mixer = mixer;
  }
  if (dims.attnRes) {
    add("moe_res.query", {d}, false, ParamInit::kZeros, ParamRole::kMoeResQuery);
    add("moe_res.key_norm", {d}, false, ParamInit::kOnes, ParamRole::kMoeResGain);
  }
  add("moe_norm", {d}, false, ParamInit::kOnes, ParamRole::kMoeNorm);
  MoeOptions options = dims.moe;  // as Model<T>::moeOptions(): dims' top-k and aux weight
  options.topK = dims.topK;
  options.auxLossCoef = dims.auxLossCoef;
  options.seqLen = dims.seqLen;
  for (const MoeParamSpec& spec : moeParameterSpecs(options, d, dims.numExperts, dims.dFf)) {
    const bool routed = spec.name == "moe.gate" || spec.name == "moe.up" || spec.name == "moe.down";
    std::vector<int64_t> shape = spec.shape;
    if (routed) shape[0] = dims.localExperts();
    add(spec.name, std::move(shape), spec.decay, moeInit(spec.init), ParamRole::kMoe);
    out.back().expertSharded = routed && dims.expertShards > 1;
  }
}

// Freezes every base parameter and appends the adapters of the weights lora.targets names.
void declareLoraAdapters(const ModelDims& dims, std::vector<ParameterDecl>& out) {
  const size_t numBase = out.size();
  for (ParameterDecl& base : out) base.trainable = false;
  for (size_t i = 0; i < numBase; ++i) {
    if (!loraTargets(out[i].localName, dims.lora.targets)) continue;
    for (const bool isA : {true, false}) {
      const ParameterDecl& base = out[i];
      ParameterDecl adapter;
      adapter.name = base.name + (isA ? ".lora_a" : ".lora_b");
      adapter.localName = base.localName + (isA ? ".lora_a" : ".lora_b");
      adapter.shape = isA ? loraAShape(base.shape, dims.lora.rank)
                          : loraBShape(base.shape, dims.lora.rank);
      adapter.decay = false;
      adapter.init = isA ? ParamInit::kLoraA : ParamInit::kZeros;
      adapter.role = isA ? ParamRole::kLoraA : ParamRole::kLoraB;
      adapter.layer = base.layer;
      adapter.expertSharded = base.expertSharded;
      adapter.loraBase = int32_t(i);
      out.push_back(std::move(adapter));
    }
  }
}

}  // namespace

int64_t ParameterDecl::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

std::vector<ParameterDecl> modelParameterLayout(const ModelDims& dims) {
  const int64_t v = dims.vocabSize, d = dims.dModel;
  std::vector<ParameterDecl> out;
  auto add = [&](const char* name, std::vector<int64_t> shape, bool decay, ParamInit init,
                 ParamRole role) {
    ParameterDecl decl;
    decl.name = name;
    decl.shape = std::move(shape);
    decl.decay = decay;
    decl.init = init;
    decl.role = role;
    declare(out, std::move(decl));
  };
  add("embedding", {v, d}, true, ParamInit::kNormal, ParamRole::kEmbedding);
  if (dims.imagePatches > 0) {
    add("patch_embed.weight", {d, dims.patchDim}, true, ParamInit::kNormal,
        ParamRole::kPatchWeight);
    add("patch_embed.bias", {d}, false, ParamInit::kZeros, ParamRole::kPatchBias);
  }
  for (int64_t l = 0; l < dims.numLayers; ++l) declareLayer(dims, int32_t(l), out);
  if (dims.attnRes) {
    add("final_res.query", {d}, false, ParamInit::kZeros, ParamRole::kFinalResQuery);
    add("final_res.key_norm", {d}, false, ParamInit::kOnes, ParamRole::kFinalResGain);
  }
  add("final_norm", {d}, false, ParamInit::kOnes, ParamRole::kFinalNorm);
  add("lm_head", {v, d}, true, ParamInit::kNormal, ParamRole::kLmHead);
  if (dims.lora.enabled) declareLoraAdapters(dims, out);
  return out;
}

std::vector<ParameterShape> modelParameterShapes(const RunConfig& config) {
  std::vector<ParameterShape> shapes;
  for (ParameterDecl& decl : modelParameterLayout(ModelDims::fromConfig(config))) {
    shapes.push_back({std::move(decl.name), std::move(decl.shape), decl.trainable});
  }
  return shapes;
}

int64_t ParameterShape::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

}  // namespace moewb::engine
