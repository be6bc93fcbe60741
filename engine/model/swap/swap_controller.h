// SwapController: one rank's swap settings and plan across steps, shared by both backends. It
// knows the step's candidates (swapProfileFor), is told each step's measured layer times, plans
// at step boundaries (planSwap of moewb/engine/swap.h) and answers "does this step swap (layer,
// op)". The backend does the moving: the CUDA tier (model/cuda/swap_tier_cuda.h) copies for real,
// the CPU backend's simulated tier (swap_sim_tier.h) turns the plan's moves into events.
//
// When it plans: mode manual at the first step (sizes suffice); mode auto once one step has been
// measured (the first step runs without swap: "measuring"), again after setSettings, and when the
// measured times (or the resident bytes) change what the plan is worth: its decisions, simulated
// again on the latest step's times, expose more than 5% of their copy time beyond what the plan
// predicted, or (auto) miss the target the plan reached. Times that only jitter (a busy CPU) do
// not re-plan, except once every kSwapReplanEverySteps steps when a layer's time moved by more
// than a fifth since the plan (to take a cheaper plan the new times allow). Never within a step.
// Not thread-safe: one per rank, used from the thread that steps the rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/cpu/model.h"
#include "moewb/engine/event_sink.h"
#include "moewb/engine/swap.h"

namespace moewb::engine {

// Index of a swap op in swapOpNames() order (stable; the tiers key their tensors by it).
enum class SwapOp : uint8_t {
  kAttnNorm, kMixerInput, kMoeNorm, kMoeInput, kExpertFc1, kMoeAct, kExpertFc2, kCount
};
const char* swapOpName(SwapOp op);

// The least number of steps between two plans caused only by layer times that moved.
inline constexpr int64_t kSwapReplanEverySteps = 50;

// The recompute cost of one layer before any recompute was measured: the experts' gate and up
// GEMM's FLOPs, 2 (N k) Dx 2F, at half the H200's measured bf16 GEMM rate (the grouped expert
// kernels' rate on h200.toml, bench/RESULTS.md), ms. Replaced by the measured time after the
// first step that recomputes (every layer's experts have the same shape).
double estimatedLayerRecomputeMs(const ModelDims& dims);

// The candidates of one step of `dims` (every swap op's tensor per layer, with the bytes the CUDA
// backend keeps: bf16 layouts, N = batch * seq tokens, N k routed rows upper bound) and each
// layer's other saved bytes (an estimate of the mixer's and router's saved state). Times zero.
SwapProfile swapProfileFor(const ModelDims& dims);

// One step's measured layer times, from its phase events (PhaseEvent with layer >= 0 and pass
// kForward / kBackward). Layer l's forward runs from the start of its first phase to the start
// of layer l + 1's first phase (the last layer: to the end of its last phase); backward likewise
// in reverse order; the turn from the last layer's forward end to its backward start. Gaps
// between phases (residual adds, embedding) are charged to the layer before them.
struct StepLayerTimes {
  std::vector<double> forwardMs;   // [L]
  std::vector<double> backwardMs;  // [L]
  double turnMs = 0;
  int64_t forwardStartNs = 0;      // steady clock: start of layer 0's forward (the model's 0 ms)
};
// Errors: kInvalidArgument when a layer in [0, numLayers) has no forward or no backward phase.
// Events of other steps must be filtered out by the caller. Thread-safe (pure).
Result<StepLayerTimes> layerTimesFromPhases(const std::vector<PhaseEvent>& events,
                                            int32_t numLayers);

class SwapController {
 public:
  SwapController(const SwapSettings& settings, SwapProfile sizes, int32_t rank);

  // Live change (a [swap] patch): takes effect at the next beginStep, which plans again.
  void setSettings(const SwapSettings& settings);
  const SwapSettings& settings() const { return m_settings; }

  // At the start of `step`: plans when due (see above) with `fixedBytes` (device bytes resident
  // for the whole step: weights, grads, optimizer state) and returns the plan to emit; nullopt
  // when the current plan stands (or swap is off and was off).
  std::optional<SwapPlanEvent> beginStep(int64_t step, int64_t fixedBytes);
  // Whether this step swaps (layer, op). False while measuring or with mode off.
  bool swaps(int32_t layer, SwapOp op) const;
  // Whether this step drops (layer, op) after the forward and recomputes it in the backward.
  bool recomputes(int32_t layer, SwapOp op) const;
  // The current plan (moves, predicted watermarks), or null before the first plan.
  const SwapPrediction* plan() const { return m_plan ? &*m_plan : nullptr; }
  const SwapProfile& profile() const { return m_profile; }

  // After a step: its measured per-layer forward and backward times and the turn, ms, and
  // (CUDA) each layer's measured recompute time ([L], 0 where none; empty: none measured). A
  // layer's recompute is taken out of its backward time (the plan adds it back where it
  // recomputes); the mean over the layers that recomputed becomes every layer's recompute cost
  // (plans made from then on carry it with recomputeMsMeasured set; before, the estimate).
  void recordStepTimes(const std::vector<double>& layerForwardMs,
                       const std::vector<double>& layerBackwardMs, double turnMs,
                       const std::vector<double>& layerRecomputeMs = {});

 private:
  // This step's action for (layer, op): kKeep while measuring, with mode off or out of range.
  SwapAction actionAt(int32_t layer, SwapOp op) const;
  // Whether the latest times and resident bytes make the current plan due again (see above).
  bool timesDue(int64_t step) const;

  SwapSettings m_settings;
  SwapProfile m_profile;   // sizes from the dims, times from the last recorded step
  int32_t m_rank = 0;
  bool m_measured = false;
  bool m_settingsChanged = true;
  std::vector<double> m_plannedForwardMs;  // the times the current plan was made from
  std::vector<double> m_plannedBackwardMs;
  double m_plannedTurnMs = 0;
  std::vector<double> m_plannedRecomputeMs;
  int64_t m_plannedFixedBytes = 0;
  int64_t m_plannedStep = 0;
  bool m_plannedWithTimes = false;        // the current plan was made from measured times
  bool m_recomputeMeasured = false;       // m_profile.layerRecomputeMs is a measured mean
  std::optional<SwapPrediction> m_plan;
  std::vector<uint8_t> m_actions;          // [layers * SwapOp::kCount] SwapAction of this step
};

}  // namespace moewb::engine
