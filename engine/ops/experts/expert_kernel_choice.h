// A run's choice of grouped expert GEMM kernels (config [kernels], docs/GPU.md) applied to the
// process-wide switches of experts_wgmma_cuda.h, so a config (and a live patch) picks what the
// MOEWB_GROUPED_* environment variables pick for a whole process.
#pragma once

#include <string>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// Sets the switches for every later experts launch: `glu` "split" (round 9), "pingpong" (round 7)
// or "fused" (round 2) for gate+up and dh; `wgradWalk` "skew", "static" or "dynamic" for the
// weight gradients; "auto" for either restores the process's default (its environment variable
// as read at start, else the built-in default). Not meant to change while another thread issues
// experts launches (race-free, as the setters). Errors: kInvalidArgument naming the value and
// what is accepted (nothing is changed then).
Status applyExpertKernelChoice(const std::string& glu, const std::string& wgradWalk);

}  // namespace moewb::engine::cuda
