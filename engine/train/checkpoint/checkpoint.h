// Training checkpoints: every parameter, its AdamW moments and the step counter in one
// safetensors file, so a run resumed from it continues bit-exactly (the synthetic data is a pure
// function of the step index, so no data state is needed).
//
// Tensor names: "<param>" (weights), "optimizer.<param>.exp_avg", "optimizer.<param>.exp_avg_sq"
// (only for trainable parameters: frozen ones, the base under LoRA, have no moments);
// metadata: format = "moewb-checkpoint", format_version = "1", step (the next step to run) and
// config (the run's TOML). Costs: one copy of the parameters and moments (3x the weights) in memory
// while writing or reading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/cpu/parameter.h"
#include "moewb/base/status.h"

namespace moewb::engine {

inline constexpr const char* kCheckpointFormat = "moewb-checkpoint";
// Weights only (a merged LoRA export): "<param>" tensors and "state.<name>", no moments, no step.
inline constexpr const char* kWeightsFormat = "moewb-weights";

// Model state that is not a trained parameter but must survive a resume (e.g. the aux-loss-free
// expert bias): saved as "state.<name>" F32 [size].
struct CheckpointState {
  std::string name;           // "layers.0.moe.expert_bias"
  std::vector<float>* values; // read on save, overwritten on load (size must match)
};

// Writes `params` (values and moments), `state`, `nextStep` and `configToml` to `path` atomically.
Status saveCheckpoint(const std::string& path, const std::vector<Parameter<float>>& params,
                      const std::vector<CheckpointState>& state, int64_t nextStep,
                      const std::string& configToml);

// Loads a checkpoint into `params` (names and shapes must match exactly; nothing is changed on
// error) and returns the step to continue at. Errors name the file and the first mismatching
// tensor: kNotFound, kDataLoss (not a checkpoint, truncated), kInvalidArgument (another model).
Result<int64_t> loadCheckpoint(const std::string& path, std::vector<Parameter<float>>& params,
                               const std::vector<CheckpointState>& state);

// A tensor to write under `name` (the weights export).
struct NamedWeight {
  std::string name;              // "layers.0.moe.gate"
  const Tensor<float>* tensor;
};

// Writes `weights`, `state` and `configToml` to `path` atomically with format = "moewb-weights".
Status saveWeights(const std::string& path, const std::vector<NamedWeight>& weights,
                   const std::vector<CheckpointState>& state, const std::string& configToml);

// Loads the values of `params` by name from a checkpoint or a weights file, ignoring every other
// tensor (moments, adapters the model does not have) and the step. `state` entries are loaded
// when the file has them, else left unchanged. Nothing changes on error. Errors name the file and
// the tensor: kNotFound, kDataLoss (not a checkpoint or weights file), kInvalidArgument (a
// missing tensor or a shape mismatch).
Status loadWeights(const std::string& path, const std::vector<Parameter<float>*>& params,
                   const std::vector<CheckpointState>& state);

}  // namespace moewb::engine
