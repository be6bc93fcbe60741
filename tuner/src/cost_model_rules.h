// The work estimates the cost model scales its calibration by (the rules of cost_model.h): per
// rank, from the config alone. Only ratios of these between two configs are used, so the units
// are "work" (FLOPs, moved elements, held parameters), not seconds or bytes, except where noted.
// Pure functions, O(num_layers) (engine::modelFlopsPerStep), thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "moewb/engine/config.h"

namespace moewb::tuner {
struct Calibration;
}

namespace moewb::tuner::detail {

struct Work {
  double tokensPerRank = 0;                 // N = batch_size * seq_len / world_size
  double microBatches = 1;                  // M forward + backward passes per step and rank
  double tokensPerMicroBatch = 0;           // N / M: the tokens whose activations are held
  std::map<std::string, double> phaseWork;  // phase base name ("experts") -> work per step
  double otherPhaseWork = 0;                // a phase without a rule: N * num_layers
  double denseParams = 0;                   // whole model, not sharded
  double expertParams = 0;                  // routed experts, whole model
  double paramsPerRank = 0;                 // dense / fsdp + experts / ep
  double activationElems = 0;               // saved elements per rank at the peak (CPU layout,
                                            //   one micro-batch's)
  double deviceActivationBytes = 0;         // CUDA backend: activation bytes at the peak (one
                                            //   micro-batch's)
  double kdaCoreForwardWork = 0;            // KDA core forward FLOPs per rank (the recompute)
  bool kdaRecomputes = false;               // the KDA backward recomputes the core's forward
  double a2aElems = 0;                      // elements one rank sends in a step's EP all-to-alls
  int32_t a2aCount = 0;                     // EP all-to-all collectives per step (per
                                            //   micro-batch, times M)
  double collectiveElems = 0;               // elements one rank sends in FSDP/replicate/EDP
  int32_t collectiveCount = 0;              // those collectives per step
  double idleUnits = 0;                     // phases per step: M (10 num_layers + 4) + 1
  double rankSkew = 1;                      // busiest EP rank's expert rows / the mean
};

// The work of one step of `config` with routing skew `skew` (max/mean tokens per expert).
Work workOf(const engine::RunConfig& config, double skew);

// The CUDA backend's activation memory of one rank's step (cost_model_memory.cpp): the saved
// tensors at the turn (the end of the forward) and the peak, the largest of the turn plus the loss
// head's backward and, walking the layers' backwards last to first, the stack still held plus
// that layer's MoE or mixer backward transient. Bytes of allocator blocks (see
// allocatorBlockBytes). `tokensPerRank` N; `rankSkew` scales the routed rows (EP).
struct DeviceActivations {
  double turnBytes = 0;                 // every saved tensor at the end of the forward
  double peakBytes = 0;                 // the step's activation peak (turn + a transient)
  std::string peakAt;                   // "layer 7 MoE backward", "loss backward", ...
  double moeBytesPerLayer = 0;          // saved by one layer's MoE block (and norms, residual)
  double kdaMixerBytesPerLayer = 0;     // saved by one KDA mixer (0 without 'K' layers)
  double sparseMixerBytesPerLayer = 0;  // saved by one sparse mixer (0 without 'S' layers)
};
DeviceActivations deviceActivations(const engine::RunConfig& config, double tokensPerRank,
                                    double rankSkew);

// The engine's caching-allocator block for a request of `bytes`: 512-byte granules below 1 MiB,
// 2 MiB granules from 1 MiB up.
double allocatorBlockBytes(double bytes);

// The KDA core's forward time in a calibration, ms per step: the kda phases hold the projections
// (and the gate, conv and norm kernels), whose backward costs twice their forward, and the chunked
// core, whose backward costs three times its forward (ops/kda/kda_cuda.h) plus one more forward
// when it recomputes the chunk intermediates. So core = (kda.bwd - 2 kda.fwd) / (1 or 2),
// clamped to [0, kda.fwd]; 0 without kda phases. The recompute that kda.keep_intermediates
// saves costs this (scaled by the core's forward FLOPs).
double kdaCoreForwardMs(const Calibration& calibration);

// The LM head's passes per loss.kind, in units of one [N, D] x [D, V] product (2 N V D FLOPs):
// dense 1 forward + 2 backward; cce 1 + 3 (its backward recomputes the logits); chunk 3 + 0 (its
// forward computes dh and dW chunk by chunk, the backward only scales them).
struct LossPasses {
  double forward = 1;
  double backward = 2;
};
LossPasses lossPasses(const std::string& kind);

// HBM bytes the loss head moves beyond its products, per rank and pass (forward or backward), on
// the CUDA backend: the materialised logits of dense and chunk (fp32 [N, V] written by the GEMM
// and read by the softmax kernels, bf16 gradient written and read by the two products: 8 bytes
// per logit in the forward and 10 in the backward for dense, all 18 in the chunk forward) and
// the chunk loss's fp32 [V, D] dW read and written once per chunk of loss.chunk_tokens tokens
// (chunks counted per micro-batch of data.micro_batch_size). cce: 0 (nothing of [N, V] size
// touches memory).
double lossTrafficBytes(const engine::RunConfig& config, double tokensPerRank, bool forward);

// The HBM rate of a CUDA calibration, bytes per ms: its optimizer phase streams AdamW's state
// (adamw_cuda.cu: fp32 value, gradient and two moments read, value and moments written, the bf16
// copy written, plus the gradient norm's read of the gradients: 34 bytes per parameter), the
// parameters being weights bytes / 6 (fp32 value + bf16 copy). 0 on the CPU or without an
// optimizer phase.
double hbmBytesPerMs(const Calibration& calibration);

// "experts.fwd" -> "experts"; "optimizer" -> "optimizer".
std::string phaseBase(const std::string& phaseName);

}  // namespace moewb::tuner::detail
