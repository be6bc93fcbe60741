// Training checkpoints: every parameter, its AdamW moments and the step counter in one
// safetensors file, so a run resumed from it continues bit-exactly (the synthetic data is a pure
// function of the step index, so no data state is needed).
//
// Tensor names: "<param>" (weights), "optimizer.<param>.exp_avg", "optimizer.<param>.exp_avg_sq";
// metadata: format = "moewb-checkpoint", format_version = "1", step (the next step to run) and
// config (the run's TOML). Costs: one copy of the parameters and moments (3x the weights) in memory
// while writing or reading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/parameter.h"
#include "moewb/base/status.h"

namespace moewb::engine {

inline constexpr const char* kCheckpointFormat = "moewb-checkpoint";

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

}  // namespace moewb::engine
