// The [parallel] section's cross-key rules (world_size = fsdp * replicate, ep | world_size,
// ep | num_experts, world_size | batch_size) and the settings that ranks do not support yet.
// validateConfig calls this after the single-key range checks. Pure; no threads.
#pragma once

#include "moewb/base/status.h"
#include "moewb/engine/config.h"

namespace moewb::engine {

// Ok, or kInvalidArgument naming the first offending key, its value and what is accepted.
Status validateParallelConfig(const RunConfig& config);

}  // namespace moewb::engine
