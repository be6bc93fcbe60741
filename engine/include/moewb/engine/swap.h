// Swap policy: which saved activations of a step go to the pinned host tier between forward and
// backward, and what that costs. One model serves every user of it: the engine's auto policy
// (both backends), the CPU backend's simulated tier (its events are this model's moves placed on
// the step's measured phases), the tuner, and the workbench's what-if (a new HBM budget redraws
// the plan from a stored profile without running anything).
//
// The step model (times in ms from the start of the first layer's forward):
//   forward:  layer 0 .. L-1 back to back (layerForwardMs); then the turn (turnMs: final norm,
//             loss and its backward); backward: layer L-1 .. 0 (layerBackwardMs).
//   offload:  the swapped tensors of layer l are copied D2H, in forward order on one copy
//             stream, from the end of layer l's forward. At the end of the forward of layer
//             l + freeLagLayers (at the end of the last layer's forward, before the turn, when
//             that is past the last layer) compute waits until every offload of layer l (and so
//             every earlier one) has ended, and their device memory is freed when that wait ends,
//             not when the copy ends (the CUDA tier's host runs ahead of the GPU and can only
//             free behind a compute-stream wait). The wait is the offload's stall (charged to
//             the last offload waited for) and delays everything after it.
//   reload:   layer l's tensors are copied H2D on a second stream, issued at the start of the
//             backward of layer l + prefetchLayers (at the turn when that is past the last layer),
//             and never before every offload has finished (direction-aware: the two directions
//             do not share the link where it can be avoided; when they must, both run at
//             bidirGbps / 2). The backward of layer l waits for its reloads: the wait is the
//             reload's stall, and it delays everything after it.
//   memory:   fixedBytes for the whole step, plus the saved bytes of each layer from the end of
//             its forward to the end of its backward, minus the swapped ones between their free
//             point (the end of their offload wait) and the start of their reload.
// Pure functions, no I/O; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"

namespace moewb::engine {

enum class SwapMode : uint8_t { kOff, kManual, kAuto };

// The saved activations a policy may swap, per decoder layer, in forward order, named after what
// consumes them (Megatron-Core's offload module names where one matches):
//   attn_norm    [N, D] bf16  input of the mixer's RMSNorm (the layer input)
//   mixer_input  [N, D] bf16  the normed mixer input
//   moe_norm     [N, D] bf16  input of the MoE RMSNorm
//   moe_input    [N, D] bf16  the normed MoE input (router, permute and gathered experts read it)
//   expert_fc1   [N k, D] bf16 permuted expert input (absent with fusion.permute_into_experts)
//   moe_act      [N k, F] bf16 x 2  gate and up pre-activations
//   expert_fc2   [N k, F] bf16 the activated hidden rows (fc2 input)
const std::vector<std::string>& swapOpNames();

// The ops whose tensors the CUDA backend can drop after the forward and recompute in the
// backward (swap.recompute_ops): moe_act and expert_fc2, both rewritten by one re-run of the
// experts' gate and up GEMM (its epilogue writes g, u and h), bitwise as in the forward.
const std::vector<std::string>& swapRecomputeOpNames();

// The entries of a comma list of op names (swap.ops, swap.recompute_ops, as stored in traces),
// each with spaces and tabs trimmed, empty entries kept: "a, b" -> {"a", "b"}, "" -> {""}.
std::vector<std::string> splitSwapOpList(const std::string& list);

// The [swap] section in typed form; byte and bandwidth units spelled out.
struct SwapSettings {
  SwapMode mode = SwapMode::kOff;
  std::vector<std::string> ops;      // allowed ops (all of swapOpNames() when the key is "")
  std::vector<std::string> recomputeOps;  // ops that may be recomputed (swap.recompute_ops)
  int64_t minBytes = 1 << 20;
  int64_t hbmTargetBytes = 0;        // 0: no target (auto then declines)
  int64_t pinnedBudgetBytes = 0;
  int32_t prefetchLayers = 1;
  int32_t freeLagLayers = 1;         // layer l's offloads: waited for and freed at the end of
                                     //   layer l + this's forward (before the turn when past L-1)
  double d2hBytesPerMs = 55e6;       // 55 GB/s
  double h2dBytesPerMs = 55e6;
  double bidirBytesPerMs = 36e6;     // total of both directions at once
};

// The settings of a validated config's [swap] section. `deviceBytes` (total device memory, or 0
// when unknown: CPU backend) stands in for hbm_target_gb = 0.
SwapSettings swapSettingsFrom(const SwapSection& section, int64_t deviceBytes);

// One candidate: a saved activation of one layer.
struct SwapTensor {
  int32_t layer = 0;
  std::string op;        // one of swapOpNames()
  int64_t bytes = 0;

  bool operator==(const SwapTensor&) const = default;
};

// What the policy plans from: the step's candidates and the measured times of an earlier step.
struct SwapProfile {
  std::vector<SwapTensor> tensors;        // every candidate, forward order (layer, then op order)
  std::vector<double> layerForwardMs;     // [L]
  std::vector<double> layerBackwardMs;    // [L]
  double turnMs = 0;                      // last layer's forward end to its backward start
  std::vector<int64_t> layerOtherBytes;   // [L] saved bytes of each layer that are no candidate
  int64_t fixedBytes = 0;                 // resident for the whole step (weights, grads, ...)
  std::vector<double> layerRecomputeMs;   // [L] cost of recomputing the layer's recomputable
                                          //   tensors (one re-run for all of them), or empty: 0

  // Whether `other` lists the same candidates with the same bytes (a change of them, after a live
  // patch of the batch, top-k or fusion, needs a new controller that measures again).
  bool sameCandidatesAs(const SwapProfile& other) const {
    return tensors == other.tensors && layerOtherBytes == other.layerOtherBytes;
  }
};

// kRecompute: freed at the end of its layer's forward, recomputed at the start of the layer's
// backward (layerRecomputeMs added once per layer to that backward), no copy.
enum class SwapAction : uint8_t { kKeep, kSwap, kRecompute };

struct SwapDecision {
  SwapAction action = SwapAction::kKeep;
  std::string reason;    // "below swap.min_bytes", "op not in swap.ops", "pinned budget full",
                         // "not needed: target reached", "would stall 2.1 ms", "picked", ...
};

// One predicted copy, ms from the start of the forward.
struct SwapMove {
  int32_t tensor = 0;    // index into SwapProfile::tensors
  bool toHost = true;    // D2H offload, else H2D reload
  double startMs = 0;
  double endMs = 0;
  double neededMs = 0;   // reload: when its consumer was ready (before any stall); offload: when
                         //   compute reached the wait point (on the last offload waited for
                         //   there, else 0)
  double stallMs = 0;    // reload: consumer wait; offload: compute wait at its free point
};

struct SwapPrediction {
  std::vector<SwapDecision> decisions;    // [tensors], same order as the profile
  std::vector<SwapMove> moves;            // offloads then reloads, each in issue order
  int64_t peakBytes = 0;                  // with the decisions
  int64_t peakNoSwapBytes = 0;            // every tensor kept
  int64_t swappedBytes = 0;               // = pinned host bytes used
  int64_t recomputedBytes = 0;            // dropped after the forward, recomputed in backward
  double recomputeMs = 0;                 // compute added by recomputing (in stepMs)
  double copyMs = 0;                      // sum of copy durations
  double exposedMs = 0;                   // every compute wait caused by swap: reload stalls +
                                          //   offload waits (stallMs of all moves)
  double stepMs = 0;                      // forward + turn + backward + recomputeMs +
                                          //   exposedMs
  int32_t lateReloads = 0;                // reloads with a stall (offload waits not counted)
  bool declined = false;                  // auto: nothing planned because the run fits
  std::string summary;                    // one line for logs, `moewb info` and the GUI
};

// The moves, stalls and watermarks of `actions` ([tensors]) under `settings`' bandwidths,
// prefetch distance and free lag. Errors: kInvalidArgument when the sizes of `actions`, the
// layer vectors and the tensors' layers disagree, or a bandwidth is <= 0 or a distance < 0.
Result<SwapPrediction> simulateSwap(const SwapSettings& settings, const SwapProfile& profile,
                                    const std::vector<SwapAction>& actions);

// The policy. off: keep all. manual: recompute every tensor of settings.recomputeOps >=
// minBytes, swap every other tensor of settings.ops >= minBytes while the pinned budget lasts.
// auto: declines (keeps all, `declined`) when peakNoSwap <= hbmTargetBytes; else frees, in order
// of benefit (bytes freed at the peak per ms of predicted cost: exposed copy time for a swap,
// reload stalls and offload waits alike; the layer's recompute time for a recompute, nothing
// when the layer already recomputes; earliest layers first on ties), the allowed tensors by the
// cheaper of the two actions allowed for them, until the predicted peak reaches the target,
// never past the pinned budget, skipping a tensor whose addition costs time when other choices
// reach the target. Errors: those of simulateSwap.
Result<SwapPrediction> planSwap(const SwapSettings& settings, const SwapProfile& profile);

}  // namespace moewb::engine
