// describeTopology: one line saying where the ranks of a run train and how they split the model,
// for the CLI's start line and the GUI's status (the run decides the topology; front ends print it).
#pragma once

#include <cstdint>
#include <string>

#include "moewb/engine/config.h"

namespace moewb::run {

// Where this process's ranks run, as the run will build them:
//   world_size 1                      -> "" (nothing to say)
//   launcherRank >= 0 (NCCL process)  -> "rank R of N processes (NCCL, GPU L): ep = .., fsdp = .., replicate = .."
//   run.backend = cuda                -> "N virtual ranks sharing GPU 0: ep = ..., ..."
//   otherwise                         -> "N in-process ranks: ep = ..., ..."
// `config` must be validated (the degrees are read as they are). Pure; any thread.
std::string describeTopology(const engine::RunConfig& config, int32_t launcherRank = -1,
                             int32_t launcherLocalRank = -1);

}  // namespace moewb::run
