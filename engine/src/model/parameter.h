// Parameter<T>: one trainable tensor with its gradient and AdamW moments, plus ModelDims, the
// model sizes taken from a RunConfig. Weight decay applies to matrices only (decay = true for
// rank >= 2 tensors, false for RMSNorm gains).
#pragma once

#include <cstdint>
#include <string>

#include "moewb/engine/config.h"
#include "tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct Parameter {
  std::string name;  // "layers.0.attn.wq"
  Tensor<T> value;
  Tensor<T> grad;   // same shape, accumulated by backward, zeroed per step
  Tensor<T> adamM;  // same shape, AdamW first moment
  Tensor<T> adamV;  // same shape, AdamW second moment
  bool decay = true;
};

struct ModelDims {
  int64_t vocabSize = 0;   // V
  int64_t dModel = 0;      // D
  int64_t numLayers = 0;   // L
  int64_t numHeads = 0;    // H
  int64_t seqLen = 0;      // T
  int64_t batchSize = 0;   // B
  int64_t numExperts = 0;  // E
  int32_t topK = 0;        // k
  int64_t dFf = 0;         // F
  double normEps = 1e-5;
  double initStd = 0.02;
  double auxLossCoef = 0;

  int64_t tokens() const { return batchSize * seqLen; }
  static ModelDims fromConfig(const RunConfig& config);
};

}  // namespace moewb::engine
