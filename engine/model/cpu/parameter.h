// Parameter<T>: one tensor with its gradient and AdamW moments, plus ModelDims, the model sizes
// taken from a RunConfig, and LossWeights, one forward's share of its step's objective. Weight
// decay applies to matrices only (decay = true for rank >= 2 tensors, false for RMSNorm gains and
// LoRA adapters). A frozen parameter (trainable = false, the base weights under lora.enabled) has
// empty moments; the optimizer skips it and its grad is scratch space of the backward.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/engine/config.h"
#include "model/moe/moe_options.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct Parameter {
  std::string name;  // "layers.0.attn.wq"
  Tensor<T> value;
  Tensor<T> grad;   // same shape, accumulated by backward, zeroed per step
  Tensor<T> adamM;  // same shape, AdamW first moment; empty when frozen
  Tensor<T> adamV;  // same shape, AdamW second moment; empty when frozen
  bool decay = true;
  bool trainable = true;  // false: frozen (no update, no moments, not in the gradient norm)
};

struct ModelDims {
  int64_t vocabSize = 0;   // V
  int64_t dModel = 0;      // D
  int64_t numLayers = 0;   // L
  int64_t numHeads = 0;    // H
  int64_t seqLen = 0;      // T
  int64_t batchSize = 0;   // B: sequences per forward (forwardFromConfig) or per step
  int64_t numExperts = 0;  // E
  int32_t topK = 0;        // k
  int64_t dFf = 0;         // F
  double normEps = 1e-5;
  double initStd = 0.02;
  double auxLossCoef = 0;
  // The hybrid architecture (defaults = the plain softmax-attention MoE transformer).
  std::string mixerPattern = "A";  // per layer, cycled: A attention, K KDA, S gated sparse
  bool attnRes = false;            // block attention residuals instead of plain residuals
  int64_t attnResBlockSize = 2;    // in sublayers
  MoeOptions moe;                  // MoE variants; topK and auxLossCoef above take precedence
  KdaSection kda;
  SparseSection sparse;
  LossSection loss;
  LoraSection lora;                // LoRA adapters (lora.enabled = false: none)
  KernelsSection kernels;          // CUDA kernel choices (the CPU model ignores them)
  int64_t imagePatches = 0;        // image positions at the start of each sequence
  int64_t patchDim = 0;            // features per image patch
  // Expert parallelism: this model holds experts [expertShard * E / expertShards, ...) of the
  // E routed experts in its gate / up / down tensors ([E / expertShards, ...]).
  int64_t expertShards = 1;
  int64_t expertShard = 0;

  int64_t localExperts() const { return numExperts / expertShards; }

  int64_t tokens() const { return batchSize * seqLen; }
  // The mixer of layer l: 'A', 'K' or 'S'.
  char mixerOf(int64_t layer) const { return mixerPattern[size_t(layer) % mixerPattern.size()]; }
  // The sizes of `config` with batchSize = data.batch_size, the whole step of all ranks (what
  // FLOP counts and the parameter layout read).
  static ModelDims fromConfig(const RunConfig& config);
  // As fromConfig with batchSize = the sequences of one forward on one rank
  // (RunConfig::microBatchSize()): what a model trains on and its activations are sized by.
  static ModelDims forwardFromConfig(const RunConfig& config);
  // Copies from `d` the settings a live patch may change (Trainer::liveKeys): the forward's batch
  // size (data.micro_batch_size), top-k, balancing coefficients, route scale, capacity and drop
  // policy, fusion flags, the loss head, sparse top-k and indexer weight, KDA chunk size.
  // Parameter shapes stay as they are.
  void applyLiveSettings(const ModelDims& d);
  // A copy whose aux-loss coefficients (auxLossCoef and moe.auxLossCoef, moe.seqAuxLossCoef,
  // moe.zLossCoef, sparse.indexerLossCoef) are multiplied by `weight` (LossWeights::aux; 1 leaves
  // them exact). The aux losses are linear in them, so their values and gradients scale alike.
  ModelDims withAuxWeight(double weight) const;
};

// One forward's share of its optimizer step's objective when the step is cut into micro-batches
// (engine/train/micro_batches.h). The backward scales the LM loss's gradient by `lm` (the
// micro-batch's valid targets over the step's, so the accumulated gradient is that of the step's
// mean) and every aux loss, value and gradient, by `aux` (1 / micro-batches: their mean). The
// defaults are the whole step in one forward.
struct LossWeights {
  double lm = 1;   // scale of the LM loss gradient
  double aux = 1;  // weight of the aux losses (their coefficients times this)
};

}  // namespace moewb::engine
