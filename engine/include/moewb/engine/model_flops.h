// ModelFlops: the model FLOPs of one training step, counted from the config alone; the numerator
// of MFU (model FLOPs utilisation = model FLOPs per step / step time / the hardware's peak).
//
// The convention is PaLM's (appendix B) and Megatron-LM's: count the matrix-multiply work the
// model as configured needs, not what an implementation executes. One multiply-add is 2 FLOPs.
// The backward of a product x W^T costs twice its forward (one product for the input gradient,
// one for the weight gradient), so a step is 3x the forward, except where the model needs only
// one of the two gradients (the patch embedding, whose input is data, and the lightning indexer,
// whose input is detached and whose scores reach the loss only through the selected keys).
// Counted, per part (formulas with the config keys in docs/MFU.md):
//   every projection with a weight (mixers, router, routed / shared experts, latent down/up, LM
//   head, patch embedding); causal softmax attention's QK^T and PV over the causal half (t + 1
//   keys for query t); the KDA core's chunked WY/UT form exactly as ENGINE-MATH §2.3 and
//   ops/kda/kda.h state it (triangles counted as triangles, the unit-triangular inverse by
//   forward substitution); gated sparse attention in its sparse stage: QK^T and PV over
//   min(top_k, t + 1) keys, the lightning indexer's qI . kI over every causal key (forward) and
//   over the selected keys (backward); the routed experts at top_k per token (capacity drops not
//   subtracted).
// Not counted: the embedding lookup, norms, activations, gates, softmax and top-k, the KDA short
//   convs and L2 norms, the router's score function and balancing losses, permute / combine
//   (including the routing-weight products), AttnRes mixes, the optimizer, LoRA merges,
//   recomputation (CCE's second logits pass, the KDA backward's recomputed states) and padding;
//   the dense warm-up stage of sparse attention (its first sparse.warmup_steps steps cost more).
// The count is for the global step: tokens = data.batch_size * model.seq_len over all ranks.
// Costs: O(model.num_layers) arithmetic; pure functions, thread-safe. Values are doubles that hold
// exact integers up to 2^53 (about 9e15 FLOPs per step).
#pragma once

#include <vector>

#include "moewb/engine/config.h"

namespace moewb::engine {

// The dense bf16 tensor-core peak of one NVIDIA H200 (SXM), NVIDIA's datasheet figure, and the
// bf16 GEMM rate measured on the lent H200 (8192^3, ../shared/H200.md). FLOP/s.
inline constexpr double kH200Bf16PeakFlopsPerSecond = 989.4e12;
inline constexpr double kH200MeasuredGemmFlopsPerSecond = 774e12;

// FLOPs of one part of the model in one training step.
struct FlopCount {
  double forward = 0;   // FLOPs of the forward pass
  double backward = 0;  // FLOPs of the backward pass (input and weight gradients)

  double total() const { return forward + backward; }
  FlopCount& operator+=(const FlopCount& other) {
    forward += other.forward;
    backward += other.backward;
    return *this;
  }
};

// One step's model FLOPs by part, each summed over the layers that have it (0 when absent).
struct ModelFlops {
  FlopCount attention;          // 'A' layers: q/k/v/o projections, causal QK^T and PV
  FlopCount kdaProjections;     // 'K' layers: q/k/v/o, beta, decay and output-gate bottlenecks
  FlopCount kdaCore;            // 'K' layers: the chunked core (intra-chunk and state terms)
  FlopCount sparseProjections;  // 'S' layers: q, k, v, output gate and o projections
  FlopCount sparseAttention;    // 'S' layers: QK^T and PV over the selected keys
  FlopCount sparseIndexer;      // 'S' layers: indexer projections and scores
  FlopCount router;             // router logits x Wr^T
  FlopCount experts;            // routed experts: top_k per token, gate / up / down each
  FlopCount latent;             // latent MoE down and up projections
  FlopCount sharedExperts;      // shared experts' gate / up / down
  FlopCount lmHead;             // final hidden x LM head (the same for every loss.kind)
  FlopCount patchEmbed;         // image patches x patch embedding (multimodal data)
  double tokens = 0;            // tokens per step, data.batch_size * model.seq_len

  struct Part {
    const char* name;  // "attention", "kda.core", ... (docs/MFU.md's names)
    FlopCount flops;
  };
  // Every part above in field order, with its name.
  std::vector<Part> parts() const;
  // The sum of all parts.
  FlopCount sum() const;
  // Forward + backward of the whole step.
  double total() const { return sum().total(); }
};

// The model FLOPs of one training step of `config` (see the file comment for what counts).
// `config` should have passed validateConfig; sizes it does not use (a mixer kind absent from
// model.mixer_pattern, moe.latent_dim = 0) give zero parts. No errors.
ModelFlops modelFlopsPerStep(const RunConfig& config);

}  // namespace moewb::engine
