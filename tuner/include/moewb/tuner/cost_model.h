// CostModel: predicts a candidate config's step time (with its parts) and peak memory from a
// calibration read out of one of our own traces, so a study can rank thousands of candidates
// without running them and predict layouts larger than the lent machine.
//
// Calibration (calibrate(), from a trace of `moewb run` or a study trial; CPU or CUDA backend):
// the traced run's config; per step (the median over steps but the first, rank mean) the time of
// every phase slice ("experts.fwd", "optimizer", ...) with the collectives inside it taken out
// (on CUDA traces with kernel rows: the GPU kernel time attributed to each phase instead), the
// collectives' time, bytes and bandwidth per kind (EP all-to-all; FSDP / replicate / expert-DP /
// world), the idle rest (step time - compute - collectives), the memory counters per category
// (weights, grads, optimizer, activations: peak = their sum on both backends; runs of several
// ranks report no activations counter, so activations = peak - the other three), the routing skew
// (expert_load: mean over layers of max/mean tokens per expert) and, when swap ran, the measured
// copy rate. A trace without the rows the model needs (no run, no completed step, no phase
// slices, no memory counters, no expert load) is refused with a message naming what is missing.
//
// Prediction (predict(), pure arithmetic, O(num_layers), no I/O): each part is the calibrated
// value times the ratio of a work estimate of the candidate to that of the calibrated config
// (W(candidate) / W(calibrated)), per rank, with these rules (F = engine::modelFlopsPerStep, W
// ranks, N = data.batch_size * model.seq_len / W tokens per rank, k = moe.top_k, D = d_model):
//   mixer phases (attention, kda, sparse_attention): their FLOP parts / W;
//   router: router FLOPs / W;  embedding: N * D (+ patch embedding FLOPs / W);
//   permute: N * k * Dx moved rows (Dx = moe.latent_dim, else D); fusion.permute_into_experts
//     makes the forward N * k (the index only) but not the backward (it still scatters dXPerm);
//   experts: (routed expert + latent FLOPs) / W * rank skew (below);
//   combine: N * k * D (fusion.combine_into_experts: N * D) + shared-expert FLOPs / W;
//   kda.bwd: kda.keep_intermediates on/off removes/adds the recompute of the KDA core's forward
//     (its time in the trace: kda.bwd - 2 kda.fwd, over 2 when the traced run recomputed;
//     scaled by the core's forward FLOPs);
//   loss: the calibrated time per LM-head product (the phase less its memory traffic, over its
//     products: dense 1 + 2, cce 1 + 3, chunk 3 + 0) x the candidate's products x LM-head FLOPs
//     ratio, plus the candidate's traffic (materialised [N, V] logits; the chunk loss's fp32 dW
//     per chunk) at the HBM rate of the trace's optimizer phase (34 bytes per parameter; CUDA);
//   optimizer: parameters held by the rank (dense / fsdp + routed experts / ep);
//   any other phase: N * num_layers;
//   CPU backend: ranks run in one process and share the cores: compute x W / W_calibrated, and
//     / min(run.threads or all, hardware threads) * that of the calibrated run;
//   rank skew: the busiest EP rank holds the hottest expert (max/mean s from the trace, capped at
//     moe.capacity_factor when > 0) plus E/ep - 1 average experts: (s + (E/ep - 1) * (E - s) /
//     (E - 1)) / (E/ep) of the mean (1 with ep = 1);
//   EP all-to-all: 4 per layer (dispatch, combine, their backwards), each N * k * D * bytes per
//     element * (ep - 1) / ep, over the measured bandwidth when the EP group fits in the traced
//     world size and the trace measured all-to-alls, else the interconnect's (below); plus one
//     latency per collective. Exposed: all of it, but with parallel.a2a_chunks = c > 1 on CUDA
//     t/c + max(0, t - experts)(c - 1)/c (chunks pipeline against the experts);
//   FSDP / replicate / expert-DP collectives: all-gather forward and backward plus
//     reduce-scatter of the dense parameters over fsdp ((f - 1) / f each), all-reduce of the
//     shard's gradients over replicate (2 (r - 1) / r), all-reduce of the expert gradients over
//     W / ep (2 (d - 1) / d); exposed entirely (the engine issues them on the step's thread);
//   idle: the calibrated idle time x (phases per step) ratio (M (10 L + 4) + 1, M the
//     micro-batches of data.micro_batch_size: each forward + backward pass repeats its phases);
//   micro-batches: compute per step unchanged (the same tokens, M passes; smaller kernels'
//     lower efficiency is not modelled), the optimizer and FSDP collectives once a step, the
//     EP all-to-alls' latencies M times, activations those of one micro-batch of N / M tokens;
//   memory (per rank): weights, grads and optimizer x parameters held by the rank; activations
//     (of one micro-batch, N / M tokens) on CUDA x the ratio of the activation peak counted tensor
//     by tensor in allocator blocks (detail::deviceActivations: every saved tensor at the turn plus
//     the largest backward transient on the stack still held; docs/TUNER.md lists the tensors), on
//     the CPU x N * (L * (8 D + H T ['A' layers] + k s (2 D + 3 F)) + loss buffer) (D instead of
//     2 D with fusion.permute_into_experts; s the rank skew) where the loss buffer is N * V (dense),
//     chunk_tokens * V (chunk), N * cce_vocab_block (cce); peak = their sum; with swap on, the
//     engine's swap planner (engine::planSwap) on the predicted per-layer times and the saved
//     tensors gives the exposed swap time and the peak, and host memory is the pinned bytes.
// The interconnect beyond the traced ranks is a named, overridable assumption (Interconnect).
// The assumptions a prediction used are listed with it (Prediction::assumptions).
// Thread-safety: a CostModel is immutable after construction; predict() may run concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"

namespace moewb::tuner {
namespace detail {
struct Work;
}

// Links between ranks beyond those the trace measured. Defaults: an H200 HGX node.
struct Interconnect {
  double intraNodeGbps = 450;  // per GPU, one direction, NVLink 4 (900 GB/s bidirectional)
  double interNodeGbps = 50;   // per GPU, one direction: one 400 Gb/s NIC per GPU
  int32_t gpusPerNode = 8;     // a group of at most this many ranks stays in one node
  double latencyUs = 15;       // fixed cost of one collective, microseconds
};

// Parses "intra_node_gbps=450,inter_node_gbps=50,gpus_per_node=8,latency_us=15" (any subset, in
// any order) over `base`; kInvalidArgument naming the item and the accepted names and ranges.
Result<Interconnect> parseInterconnect(const std::string& text, Interconnect base = {});
// "intra_node_gbps=450 inter_node_gbps=50 gpus_per_node=8 latency_us=15".
std::string interconnectText(const Interconnect& interconnect);

// What one trace says about its run (see the file comment).
struct Calibration {
  std::string tracePath;
  engine::RunConfig config;  // the traced run's config (run.config_toml)
  std::string backend;       // "cpu" or "cuda"
  int32_t worldSize = 1;     // ranks of the traced run
  int64_t stepsUsed = 0;     // steps the medians are over
  double stepMs = 0;         // median step time (earliest start to latest end over ranks)
  std::map<std::string, double> phaseMs;  // per step and rank: compute ms of each phase name
  bool fromKernels = false;         // phaseMs is GPU kernel time (CUDA trace with kernel rows)
  double a2aMs = 0;                 // per step and rank: EP all-to-all time
  double a2aBytes = 0;              // per step and rank: bytes sent by EP all-to-alls
  double a2aBytesPerMs = 0;         // measured transfer rate (waits for peers left out); 0 = none
  double collectiveMs = 0;          // per step and rank: other collectives' time
  double collectiveBytes = 0;       // per step and rank: their bytes sent
  double collectiveBytesPerMs = 0;  // their measured rate; 0 = none
  double idleMs = 0;                // stepMs - compute - collectives, >= 0
  int64_t weightsBytes = 0;         // per rank, largest over steps and ranks
  int64_t gradsBytes = 0;
  int64_t optimizerBytes = 0;
  int64_t activationsBytes = 0;
  int64_t peakBytes = 0;        // step rows' peak_bytes, largest
  double routingSkew = 1;       // mean over layers of max/mean tokens per expert
  double swapBytesPerMs = 0;    // measured swap copy rate; 0 = no swap in the trace
  int32_t hardwareThreads = 1;  // of this machine (the CPU backend's cores)
  int32_t devices = 1;          // devices the traced ranks ran on: 1 (in-process ranks share
                                //   the CPU or one GPU); world size for a merged multi-GPU trace
};

// Reads a calibration from the trace at `path`. Errors: the reader's (kNotFound, kDataLoss, ...)
// and kFailedPrecondition naming the file and the rows it lacks. Cost: one pass over the slices
// plus one query per step for the collectives (milliseconds for a study trial's trace).
Result<Calibration> calibrate(const std::string& path);

// One predicted step of a candidate on one rank (the slowest).
struct Prediction {
  double stepMs = 0;                      // computeMs + exposed parts + idleMs
  std::map<std::string, double> phaseMs;  // predicted compute per phase name
  double computeMs = 0;                   // sum of phaseMs
  double exposedA2aMs = 0;                // EP all-to-all not hidden behind compute
  double exposedCollectiveMs = 0;         // FSDP / replicate / expert-DP collectives
  double exposedSwapMs = 0;               // swap stalls (reload waits + offload waits) and
                                          //   swap.recompute_ops' recompute time
  double idleMs = 0;                      // launch gaps and host work between phases
  int64_t weightsBytes = 0;               // per rank
  int64_t gradsBytes = 0;
  int64_t optimizerBytes = 0;
  int64_t activationsBytes = 0;          // at the step's peak, before swap
  int64_t peakHbmBytes = 0;              // device peak per rank (with swap when on)
  int64_t peakHostBytes = 0;             // pinned host bytes used by swap (0 without swap)
  std::vector<std::string> assumptions;  // what the numbers rest on, one line each
};

struct PredictOptions {
  int32_t devices = 0;           // devices the candidate's ranks spread over (one rank per GPU:
                                 //   the world size); 0 = as many as the calibrated run had
  bool withAssumptions = false;  // fill Prediction::assumptions (scoring many candidates skips)
};

class CostModel {
 public:
  // A model over `calibration`; ranks and groups larger than the traced run use `interconnect`.
  CostModel(Calibration calibration, Interconnect interconnect);

  const Calibration& calibration() const { return m_cal; }
  const Interconnect& interconnect() const { return m_net; }

  // Predicts one step of `config` (which should have passed engine::validateConfig) on
  // `options.devices` devices. Errors: kFailedPrecondition when the candidate needs a measurement
  // the calibration lacks (a mixer kind the traced run did not have), naming it; the swap
  // planner's errors for a candidate with swap on. Thread-safe; no I/O.
  Result<Prediction> predict(const engine::RunConfig& config,
                             const PredictOptions& options = {}) const;

 private:
  Calibration m_cal;
  Interconnect m_net;
  std::shared_ptr<const detail::Work> m_calWork;  // the calibrated config's work
};

// Multi-line text of a prediction: step time and its parts, memory, and the assumptions.
std::string describePrediction(const Prediction& prediction);

}  // namespace moewb::tuner
