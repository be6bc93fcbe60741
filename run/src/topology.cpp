// describeTopology (topology.h).
#include "moewb/run/topology.h"

namespace moewb::run {

std::string describeTopology(const engine::RunConfig& config, int32_t launcherRank,
                             int32_t launcherLocalRank) {
  const engine::ParallelSection& p = config.parallel;
  if (p.worldSize <= 1) return "";
  const std::string world = std::to_string(p.worldSize);
  const std::string where =
      launcherRank >= 0 ? "rank " + std::to_string(launcherRank) + " of " + world +
                              " processes (NCCL, GPU " + std::to_string(launcherLocalRank) + ")"
      : config.run.backend == "cuda" ? world + " virtual ranks sharing GPU 0"
                                     : world + " in-process ranks";
  return where + ": ep = " + std::to_string(p.ep) + ", fsdp = " + std::to_string(p.fsdpDegree()) +
         ", replicate = " + std::to_string(p.replicateDegree());
}

}  // namespace moewb::run
