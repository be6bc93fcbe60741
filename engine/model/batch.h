// Batch: the inputs of one optimizer step, B sequences of T positions laid out sequence-major
// (position n = b*T + t). targets are the inputs shifted by one position within each sequence.
// Multimodal batches start every sequence with `imagePatches` image positions: their input id is
// kImagePosition and their features are rows of `patches`; a target of kIgnoreTarget (the
// image positions whose next position is also an image patch) is excluded from the loss, so the
// loss covers text positions only.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace moewb::engine {

inline constexpr int32_t kImagePosition = -1;  // inputs[n] of an image patch position
inline constexpr int32_t kIgnoreTarget = -1;   // targets[n] that the loss skips

struct Batch {
  int64_t batchSize = 0;        // B
  int64_t seqLen = 0;           // T
  Tensor<int32_t> inputs;       // [B*T] token ids
  Tensor<int32_t> targets;      // [B*T] next-token ids
  std::vector<int32_t> topics;  // [B] hidden topic of each sequence (for tests and analysis)
  int64_t imagePatches = 0;     // P image positions at the start of each sequence
  Tensor<float> patches;        // [B*P, patch_dim] image patch features (empty when P = 0)
  int64_t tokens() const { return batchSize * seqLen; }
};

}  // namespace moewb::engine
