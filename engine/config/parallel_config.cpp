// Cross-key validation of the [parallel] section (see parallel_config.h).
#include "config/parallel_config.h"

#include <string>

namespace moewb::engine {
namespace {

Status error(const std::string& key, const std::string& what) {
  return invalidArgument(key + ": " + what);
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

Status validateParallelConfig(const RunConfig& config) {
  const ParallelSection& p = config.parallel;
  const int64_t world = p.worldSize;
  if (p.fsdp == 0 && p.replicate > 0 && world % p.replicate != 0) {
    return error("parallel.replicate", "replicate = " + str(p.replicate) +
                                           " does not divide parallel.world_size = " + str(world) +
                                           "; accepted: a divisor of world_size");
  }
  if (p.fsdp > 0 && p.replicate == 0 && world % p.fsdp != 0) {
    return error("parallel.fsdp", "fsdp = " + str(p.fsdp) +
                                      " does not divide parallel.world_size = " + str(world) +
                                      "; accepted: a divisor of world_size");
  }
  if (int64_t(p.fsdpDegree()) * p.replicateDegree() != world) {
    return error("parallel.fsdp", "fsdp * replicate = " + str(p.fsdpDegree()) + " * " +
                                      str(p.replicateDegree()) +
                                      " must equal parallel.world_size = " + str(world) +
                                      "; accepted: fsdp = world_size / replicate = " +
                                      str(world / p.replicateDegree()) + " (or 0)");
  }
  if (world % p.ep != 0) {
    return error("parallel.ep", "ep = " + str(p.ep) + " does not divide parallel.world_size = " +
                                    str(world) + "; accepted: a divisor of world_size");
  }
  if (config.moe.numExperts % p.ep != 0) {
    return error("parallel.ep", "ep = " + str(p.ep) + " does not divide moe.num_experts = " +
                                    str(config.moe.numExperts) +
                                    "; accepted: a common divisor of world_size and num_experts");
  }
  if (p.a2aChunks > config.moe.numExperts / p.ep) {
    return error("parallel.a2a_chunks", "a2a_chunks = " + str(p.a2aChunks) + " exceeds the " +
                                            str(config.moe.numExperts / p.ep) +
                                            " experts each EP rank holds; accepted: 1.." +
                                            str(config.moe.numExperts / p.ep));
  }
  if (config.data.batchSize % world != 0) {
    return error("data.batch_size", "batch_size = " + str(config.data.batchSize) +
                                        " is not a multiple of parallel.world_size = " +
                                        str(world) + "; accepted: a multiple of world_size");
  }
  if (p.ep > 1 && (config.fusion.permuteIntoExperts || config.fusion.combineIntoExperts)) {
    return error(config.fusion.permuteIntoExperts ? "fusion.permute_into_experts"
                                                  : "fusion.combine_into_experts",
                 "true is not accepted with parallel.ep = " + str(p.ep) +
                     " (rows travel by all-to-all); accepted: false");
  }
  if (world > 1 && config.lora.enabled) {
    return error("lora.enabled", "true is not accepted with parallel.world_size = " + str(world) +
                                     "; accepted: false (LoRA runs on one rank)");
  }
  return Status::ok();
}

}  // namespace moewb::engine
