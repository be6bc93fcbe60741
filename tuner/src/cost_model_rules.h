// The work estimates the cost model scales its calibration by (the rules of cost_model.h): per
// rank, from the config alone. Only ratios of these between two configs are used, so the units
// are "work" (FLOPs, moved elements, held parameters), not seconds or bytes, except where noted.
// Pure functions, O(num_layers) (engine::modelFlopsPerStep), thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "moewb/engine/config.h"

namespace moewb::tuner::detail {

struct Work {
  double tokensPerRank = 0;                 // N = batch_size * seq_len / world_size
  std::map<std::string, double> phaseWork;  // phase base name ("experts") -> work per step
  double otherPhaseWork = 0;                // a phase without a rule: N * num_layers
  double denseParams = 0;                   // whole model, not sharded
  double expertParams = 0;                  // routed experts, whole model
  double paramsPerRank = 0;                 // dense / fsdp + experts / ep
  double activationElems = 0;               // saved elements per rank at the peak
  double a2aElems = 0;                      // elements one rank sends in a step's EP all-to-alls
  int32_t a2aCount = 0;                     // EP all-to-all collectives per step
  double collectiveElems = 0;               // elements one rank sends in FSDP/replicate/EDP
  int32_t collectiveCount = 0;              // those collectives per step
  double idleUnits = 0;                     // phases per step: 10 * num_layers + 5
  double rankSkew = 1;                      // busiest EP rank's expert rows / the mean
};

// The work of one step of `config` with routing skew `skew` (max/mean tokens per expert).
Work workOf(const engine::RunConfig& config, double skew);

// "experts.fwd" -> "experts"; "optimizer" -> "optimizer".
std::string phaseBase(const std::string& phaseName);

}  // namespace moewb::tuner::detail
