// The model's parameter layout: every parameter's name, shape and role, in model order, computed
// from ModelDims alone (no tensors). Model<T>'s constructor allocates exactly this list, and
// modelParameterShapes (moewb/engine/model_parameters.h, `moewb config --params`) lists it, so
// the listing and a built model cannot differ. Order: embedding, the patch embedding (image
// inputs), per layer [AttnRes mixer query and gain], mixer norm, the mixer's parameters
// (mixerParameterSpecs), [AttnRes MoE query and gain], MoE norm, the MoE's (moeParameterSpecs);
// then [final AttnRes query and gain], final norm, LM head; with lora.enabled the adapters
// "<name>.lora_a", "<name>.lora_b" of each targeted weight, in the order of their weights.
// Cost: O(parameters) small vectors and strings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/cpu/parameter.h"

namespace moewb::engine {

// How Model<T>::initialize() draws a parameter (model.h opening comment).
enum class ParamInit : uint8_t { kNormal, kOutput, kOnes, kZeros, kMixer, kLoraA };

// The model field a parameter fills (kMixer: the layer's next mixer parameter; kMoe: the MoE
// weight named by its local name).
enum class ParamRole : uint8_t {
  kEmbedding, kPatchWeight, kPatchBias, kFinalResQuery, kFinalResGain, kFinalNorm, kLmHead,
  kMixerResQuery, kMixerResGain, kMixerNorm, kMixer, kMoeResQuery, kMoeResGain, kMoeNorm, kMoe,
  kLoraA, kLoraB
};

struct ParameterDecl {
  std::string name;            // "layers.3.kda.wq": as in checkpoints and dumps
  std::string localName;       // below the layer prefix ("kda.wq"); the whole name outside layers
  std::vector<int64_t> shape;  // row-major extents
  bool decay = true;           // AdamW weight decay
  ParamInit init = ParamInit::kNormal;
  ParamRole role = ParamRole::kEmbedding;
  int32_t layer = -1;          // decoder layer (the FSDP unit), -1 outside the layers
  char mixer = 0;              // the layer's mixer kind ('A', 'K', 'S') for kMixer parameters
  bool expertSharded = false;  // routed expert weight (or its adapter) split over EP ranks
  bool trainable = true;       // false: a base weight frozen by lora.enabled (no AdamW moments)
  int32_t loraBase = -1;       // adapters: the index of the adapted weight in this list
  int64_t numel() const;
};

// The parameters of the model `dims` describes, in model order (above). With
// dims.expertShards > 1 the routed experts' tensors hold dims.localExperts() experts. `dims`
// must come from a valid config (ModelDims::fromConfig after validateConfig). Allocates no
// tensors; thread-safe.
std::vector<ParameterDecl> modelParameterLayout(const ModelDims& dims);

}  // namespace moewb::engine
