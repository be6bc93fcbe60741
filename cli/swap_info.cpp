// The swap part of `moewb info` (see swap_info.h). Reads swapPlans, swapSteps and
// swapLayerSummary once each. Exposed time is every compute wait swap caused: reload stalls plus
// offload waits (compute waiting at the free-lag point for an offload to free its memory); late
// counts reloads only, and the offload waits are printed on their own line. The sums saturate
// at int64 bounds (rows come from untrusted files).
#include "swap_info.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "moewb/base/units.h"

namespace moewb::cli {
namespace {

int64_t addSaturating(int64_t a, int64_t b) {
  int64_t out = 0;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

// Totals of the swap_step rows of one step range, over every rank.
struct RangeTotals {
  int64_t firstStep = 0, lastStep = 0;
  int64_t rows = 0;  // (step, rank) rows
  int64_t offloads = 0, reloads = 0, lateReloads = 0;
  int64_t swappedBytes = 0;
  double copyMs = 0, exposedMs = 0;
  int64_t hbmPeakBytes = 0, hbmPeakNoSwapBytes = 0;
  int64_t pinnedPeakBytes = 0, pinnedCapacityBytes = 0;
  bool simulated = false;
};

RangeTotals totalsOf(const std::vector<storage::SwapStepRow>& steps, int64_t fromStep,
                     int64_t toStep) {
  RangeTotals t;
  t.firstStep = fromStep;
  t.lastStep = toStep;
  for (const storage::SwapStepRow& s : steps) {
    if (s.step < fromStep || s.step > toStep) continue;
    ++t.rows;
    t.offloads = addSaturating(t.offloads, s.offloads);
    t.reloads = addSaturating(t.reloads, s.reloads);
    t.lateReloads = addSaturating(t.lateReloads, s.lateReloads);
    t.swappedBytes = addSaturating(t.swappedBytes, s.swappedBytes);
    t.copyMs += s.copyMs;
    t.exposedMs += s.exposedMs;
    t.hbmPeakBytes = std::max(t.hbmPeakBytes, s.hbmPeakBytes);
    t.hbmPeakNoSwapBytes = std::max(t.hbmPeakNoSwapBytes, s.hbmPeakNoSwapBytes);
    t.pinnedPeakBytes = std::max(t.pinnedPeakBytes, s.pinnedPeakBytes);
    t.pinnedCapacityBytes = std::max(t.pinnedCapacityBytes, s.pinnedCapacityBytes);
    t.simulated = t.simulated || s.simulated;
  }
  return t;
}

double percent(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

void printRange(const RangeTotals& t, const char* label) {
  if (t.rows == 0) return;
  const double n = double(t.rows);
  const std::string steps = t.firstStep == t.lastStep
                                ? std::to_string(t.firstStep)
                                : std::to_string(t.firstStep) + ".." + std::to_string(t.lastStep);
  std::printf("  %-12s %-7s %7.1f %7.1f %8.3f %9.2f %9.2f (%5.1f%%) %6lld (%5.1f%%)  %9s %9s  "
              "%9s / %s\n",
              steps.c_str(), label, double(t.offloads) / n, double(t.reloads) / n,
              double(t.swappedBytes) / n / 1e9, t.copyMs / n, t.exposedMs / n,
              percent(t.exposedMs, t.copyMs), (long long)t.lateReloads,
              percent(double(t.lateReloads), double(t.reloads)),
              formatBytes(t.hbmPeakBytes).c_str(), formatBytes(t.hbmPeakNoSwapBytes).c_str(),
              formatBytes(t.pinnedPeakBytes).c_str(), formatBytes(t.pinnedCapacityBytes).c_str());
}

// The plan's recompute: the ops, the layers that re-run their experts' gate + up, and what that
// costs a step (one re-run per layer at the plan's per-layer time, measured or estimated). Says
// nothing when the plan recomputes nothing.
void printRecompute(const storage::SwapPlanRow& plan) {
  std::set<int32_t> layers;
  int64_t bytes = 0;
  for (const auto& t : plan.tensors) {
    if (!t.recomputed) continue;
    layers.insert(t.layer);
    bytes += t.bytes;
  }
  if (layers.empty()) return;
  double ms = 0;
  for (int32_t layer : layers) {
    if (layer >= 0 && size_t(layer) < plan.layerRecomputeMs.size()) {
      ms += plan.layerRecomputeMs[size_t(layer)];
    }
  }
  const std::string ops = plan.recomputeOps.empty() ? "?" : plan.recomputeOps;
  if (plan.layerRecomputeMs.empty()) {
    std::printf("  recompute %s: %zu layers, %s dropped after the forward (recompute time not "
                "stored in this trace)\n",
                ops.c_str(), layers.size(), formatBytes(bytes).c_str());
    return;
  }
  std::printf("  recompute %s: %zu layers, %s dropped after the forward, %.2f ms a step (%s)\n",
              ops.c_str(), layers.size(), formatBytes(bytes).c_str(), ms,
              plan.recomputeMsSource == "measured" ? "measured" : "estimated from FLOPs");
}

void printPlan(const std::vector<storage::SwapPlanRow>& plans) {
  if (plans.empty()) {
    std::printf("\nswap     no plan recorded\n");
    return;
  }
  const storage::SwapPlanRow& last = plans.back();
  int64_t swapped = 0, recomputed = 0;
  for (const auto& t : last.tensors) {
    swapped += t.swapped ? 1 : 0;
    recomputed += t.recomputed ? 1 : 0;
  }
  std::printf("\nswap     mode %s, %zu plan%s; last from step %lld (rank %d): %lld of %zu "
              "tensors swapped%s\n",
              last.mode.c_str(), plans.size(), plans.size() == 1 ? "" : "s",
              (long long)last.step, last.rank, (long long)swapped, last.tensors.size(),
              recomputed > 0 ? (", " + std::to_string(recomputed) + " recomputed").c_str() : "");
  if (!last.summary.empty()) std::printf("  plan     %s\n", last.summary.c_str());
  printRecompute(last);
}

void printSteps(const std::vector<storage::SwapStepRow>& steps) {
  if (steps.empty()) return;
  std::set<int32_t> ranks;
  int64_t first = steps.front().step, last = steps.front().step;
  for (const auto& s : steps) {
    ranks.insert(s.rank);
    first = std::min(first, s.step);
    last = std::max(last, s.step);
  }
  const RangeTotals warmUp = totalsOf(steps, first, first);
  std::printf("  per step%s (means over %s; exposed = reload stalls + offload waits; late = "
              "reloads whose consumer waited)%s\n",
              ranks.size() > 1 ? " and rank" : "", ranks.size() > 1 ? "rank-steps" : "steps",
              warmUp.simulated ? "; simulated on the CPU backend" : "");
  std::printf("  %-12s %-7s %7s %7s %8s %9s %20s %15s  %9s %9s  %s\n", "steps", "", "offload",
              "reload", "GB", "copy ms", "exposed ms (% copy)", "late (% reload)", "hbm peak",
              "no swap", "pinned peak / capacity");
  printRange(warmUp, "first");
  if (last > first) printRange(totalsOf(steps, first + 1, last), "after");
}

// The offload waits of every step and rank: how often compute waited for an offload to free its
// memory, and for how long in all.
void printOffloadWaits(const std::vector<storage::SwapLayerSummary>& layers) {
  if (layers.empty()) return;
  int64_t waits = 0;
  double waitMs = 0;
  for (const auto& l : layers) {
    waits = addSaturating(waits, l.offloadWaits);
    waitMs += l.offloadWaitMs;
  }
  std::printf("  offload waits %lld, %.2f ms (all steps; compute waited for offloads to free "
              "their memory; part of exposed)\n",
              (long long)waits, waitMs);
}

void printTopLayers(std::vector<storage::SwapLayerSummary> layers) {
  if (layers.empty()) return;
  std::stable_sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) {
    if (a.exposedMs != b.exposedMs) return a.exposedMs > b.exposedMs;
    return a.copyMs > b.copyMs;
  });
  std::printf("  layers with the most exposed copy time (all steps)\n");
  std::printf("  %-6s %-5s %8s %8s %10s %10s %12s %6s %6s %12s\n", "layer", "rank",
              "offloads", "reloads", "offloaded", "copy ms", "exposed ms", "late", "waits",
              "worst stall");
  for (size_t i = 0; i < layers.size() && i < 5; ++i) {
    const auto& l = layers[i];
    std::printf("  %-6d %-5d %8d %8d %10s %10.2f %12.2f %6d %6d %9.3f ms\n", l.layer, l.rank,
                l.offloads, l.reloads, formatBytes(l.offloadedBytes).c_str(), l.copyMs,
                l.exposedMs, l.lateReloads, l.offloadWaits, l.worstStallMs);
  }
}

}  // namespace

void printSwapSummary(storage::TraceReader& reader) {
  auto plans = reader.swapPlans();
  auto steps = reader.swapSteps();
  auto layers = reader.swapLayerSummary();
  for (const Status* status : {&plans.status(), &steps.status(), &layers.status()}) {
    if (!status->isOk()) {
      std::printf("\nswap     cannot be read: %s\n", status->message().c_str());
      return;
    }
  }
  if (plans->empty() && steps->empty() && layers->empty()) return;
  printPlan(*plans);
  printSteps(*steps);
  printOffloadWaits(*layers);
  printTopLayers(*layers);
}

}  // namespace moewb::cli
