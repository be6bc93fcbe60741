// The parameters of a config's model, listed from the config alone without allocating them
// (`moewb config --params`): the same list the model allocates its tensors from
// (engine/model/cpu/parameter_layout.h), so it holds for models far larger than the machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/engine/config.h"

namespace moewb::engine {

struct ParameterShape {
  std::string name;            // as in checkpoints and dumps: "layers.0.attn.wq"
  std::vector<int64_t> shape;  // row-major extents
  bool trainable = true;       // false: a base weight frozen by lora.enabled
  // Elements: the product of the extents.
  int64_t numel() const;
};

// Every parameter of `config`'s model as one rank holds it (parallel.* ignored), in model
// order, names and shapes equal to a built model's (Trainer::parameterInfos of a one-rank run).
// `config` must pass validateConfig. Allocates no tensors (O(parameters) small vectors);
// thread-safe.
std::vector<ParameterShape> modelParameterShapes(const RunConfig& config);

}  // namespace moewb::engine
