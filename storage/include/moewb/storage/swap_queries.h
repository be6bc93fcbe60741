// Result types of the swap queries of TraceReader (tables swap_plan, swap_plan_tensor,
// swap_plan_layer, swap_event, swap_step; see docs/TRACE-FORMAT.md): the plans with the profile
// they were made from, every copy with its stall, the per-step watermarks and a per-layer table.
// Plain values; the queries and their costs are documented on TraceReader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moewb::storage {

// One copy of one swapped tensor (moewb::engine::SwapEvent as stored). Times are trace times
// (ns, the same clock as slices).
struct SwapEventRow {
  int64_t id = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int32_t layer = 0;
  std::string op;
  int64_t bytes = 0;
  bool toHost = true;        // D2H offload, else H2D reload
  int64_t startNs = 0;
  int64_t endNs = 0;
  int64_t neededNs = 0;      // reload: consumer ready; offload: compute at its wait (or 0)
  int64_t stallNs = 0;       // reload: consumer wait; offload: compute wait to free its memory;
                             //   late (exposed) when > 0, either direction
  bool simulated = false;
};

// Per step and rank (moewb::engine::SwapStepEvent as stored).
struct SwapStepRow {
  int64_t step = 0;
  int32_t rank = 0;
  int64_t hbmPeakBytes = 0;
  int64_t hbmPeakNoSwapBytes = 0;
  int64_t pinnedPeakBytes = 0;
  int64_t pinnedCapacityBytes = 0;
  int32_t offloads = 0;
  int32_t reloads = 0;
  int32_t lateReloads = 0;
  int64_t swappedBytes = 0;
  double copyMs = 0;
  double exposedMs = 0;      // reload stalls + offload waits
  bool simulated = false;
};

// One candidate tensor of a plan and the decision on it.
struct SwapPlanTensorRow {
  int32_t layer = 0;
  std::string op;
  int64_t bytes = 0;
  bool swapped = false;
  std::string reason;
  bool recomputed = false;  // dropped after the forward, recomputed in backward (stored as
                            //   swapped = 2)
};

// A plan with its profile (moewb::engine::SwapPlanEvent as stored): enough to plan it again under
// other settings.
struct SwapPlanRow {
  int64_t id = 0;
  int64_t step = 0;
  int32_t rank = 0;
  std::string mode;
  int64_t hbmTargetBytes = 0;
  int64_t pinnedBudgetBytes = 0;
  int32_t prefetchLayers = 1;
  // swap.free_lag_layers, swap.ops ("" = all) and swap.min_bytes. Files from before these were
  // stored read 1, "" and 0: the three together at those values mean "unknown" (the decisions'
  // reasons then tell ops and min_bytes; see gui swapWhatIfInput).
  int32_t freeLagLayers = 1;
  std::string ops;
  int64_t minBytes = 0;
  // swap.recompute_ops as a comma list ("" = none; files from before it read "").
  std::string recomputeOps;
  double d2hGbps = 0, h2dGbps = 0, bidirGbps = 0;
  int64_t fixedBytes = 0;
  double turnMs = 0;
  std::vector<double> layerForwardMs;    // [L], layer order
  std::vector<double> layerBackwardMs;   // [L]
  std::vector<int64_t> layerOtherBytes;  // [L]
  // [L] the cost of recomputing each layer's recomputable tensors (one re-run per layer) the
  // plan was made with, and where it came from: "measured" (the mean of the layers' measured
  // recompute times, every layer the same) or "estimate" (from FLOPs, before any was measured).
  // Empty and "" when unknown: files from before these were stored, or a plan written without
  // them (the writer stores times only together with a source).
  std::vector<double> layerRecomputeMs;
  std::string recomputeMsSource;
  std::vector<SwapPlanTensorRow> tensors;  // forward order
  int64_t predictedPeakBytes = 0;
  int64_t predictedPeakNoSwapBytes = 0;
  double predictedExposedMs = 0;
  std::string summary;
};

// Per (rank, layer) over the selected steps: what moved and what it cost.
struct SwapLayerSummary {
  int32_t rank = 0;
  int32_t layer = 0;
  int64_t offloadedBytes = 0;
  int64_t reloadedBytes = 0;
  int32_t offloads = 0;
  int32_t reloads = 0;
  int32_t lateReloads = 0;  // reloads with a stall (offload waits not counted)
  int32_t offloadWaits = 0; // offloads compute waited for
  double copyMs = 0;
  double exposedMs = 0;      // sum of stalls: reload stalls + offload waits
  double offloadWaitMs = 0;  // the offload waits' part of exposedMs
  double worstStallMs = 0;   // the longest stall of either direction
};

}  // namespace moewb::storage
