// What device memory is for. The caching allocator counts bytes in use per category; the trainer
// reports them as the memory.<category>_bytes counters and the GUI draws them per step.
#pragma once

#include <array>
#include <cstdint>

namespace moewb::engine::cuda {

enum class MemoryCategory : uint8_t {
  kWeights,      // fp32 master weights and their bf16 compute copies
  kGrads,        // fp32 weight gradients
  kOptimizer,    // AdamW moments
  kActivations,  // activations saved for the backward and their gradients
  kWorkspace,    // scratch that lives for one op (GEMM workspace, scans, staging)
};
inline constexpr int kMemoryCategoryCount = 5;

// "weights", "grads", "optimizer", "activations", "workspace" (stable: stored in traces).
constexpr const char* memoryCategoryName(MemoryCategory category) {
  constexpr std::array<const char*, kMemoryCategoryCount> kNames = {
      "weights", "grads", "optimizer", "activations", "workspace"};
  return kNames[size_t(category)];
}

}  // namespace moewb::engine::cuda
