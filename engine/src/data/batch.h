// Batch: the token ids of one optimizer step, B sequences of T tokens laid out sequence-major
// (token n = b*T + t). targets are the inputs shifted by one position within each sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace moewb::engine {

struct Batch {
  int64_t batchSize = 0;        // B
  int64_t seqLen = 0;           // T
  Tensor<int32_t> inputs;       // [B*T] token ids
  Tensor<int32_t> targets;      // [B*T] next-token ids
  std::vector<int32_t> topics;  // [B] hidden topic of each sequence (for tests and analysis)
  int64_t tokens() const { return batchSize * seqLen; }
};

}  // namespace moewb::engine
