// gui_swap_whatif_bench: how long the Swap dock's what-if takes to re-plan a 64-layer profile
// (448 candidates) with engine::planSwap through SwapWhatIf::setBudget, over a sweep of HBM
// budgets from the peak without swap down to half of it, at prefetch 1 and 2. The profile is
// H200-shaped: T = 16384 tokens, D = 2048, top-8 routing, F = 1024, bf16 (the [N, D] tensors
// 67 MB, expert_fc1 537 MB, moe_act 2 x 268 MB, expert_fc2 268 MB), 3 ms forward and 6 ms
// backward per layer. Prints the median and the worst re-plan; the dock's target is 200 ms for
// the whole redraw. With `recompute`, the plan also allows recomputing moe_act and expert_fc2
// at 1.9 ms a layer (the planner then weighs two actions per expert tensor).
// Usage: gui_swap_whatif_bench [layers] [recompute] (default 64, swap only).
#include <QCoreApplication>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "moewb/gui/swap_what_if.h"

namespace {

moewb::storage::SwapPlanRow h200Plan(int layers) {
  moewb::storage::SwapPlanRow plan;
  plan.mode = "auto";
  plan.pinnedBudgetBytes = 400'000'000'000;
  plan.prefetchLayers = 1;
  plan.d2hGbps = 55;
  plan.h2dGbps = 55;
  plan.bidirGbps = 36;
  plan.fixedBytes = 30'000'000'000;
  plan.turnMs = 2.0;
  plan.layerForwardMs.assign(size_t(layers), 3.0);
  plan.layerBackwardMs.assign(size_t(layers), 6.0);
  plan.layerOtherBytes.assign(size_t(layers), 200'000'000);
  const int64_t nd = 16384LL * 2048 * 2, nkd = 8 * nd, nkf = 16384LL * 8 * 1024 * 2;
  const std::vector<std::pair<const char*, int64_t>> ops = {
      {"attn_norm", nd},     {"mixer_input", nd}, {"moe_norm", nd},       {"moe_input", nd},
      {"expert_fc1", nkd},   {"moe_act", 2 * nkf}, {"expert_fc2", nkf}};
  for (int l = 0; l < layers; ++l) {
    for (const auto& [op, bytes] : ops) plan.tensors.push_back({l, op, bytes, false, "kept"});
  }
  return plan;
}

}  // namespace

int main(int argc, char** argv) {
  QCoreApplication app(argc, argv);
  const int layers = argc > 1 ? std::max(1, std::atoi(argv[1])) : 64;
  moewb::gui::SwapWhatIf whatIf;
  moewb::storage::SwapPlanRow plan = h200Plan(layers);
  const bool recompute = argc > 2 && std::strcmp(argv[2], "recompute") == 0;
  if (recompute) {
    plan.recomputeOps = "moe_act,expert_fc2";
    plan.layerRecomputeMs.assign(size_t(layers), 1.9);
    plan.recomputeMsSource = "estimate";
  }
  plan.hbmTargetBytes = 1;  // replaced by the sweep
  if (const auto status = whatIf.setPlan(plan); !status.isOk()) {
    std::fprintf(stderr, "setPlan: %s\n", status.toString().c_str());
    return 1;
  }
  const int64_t peak = whatIf.prediction().peakNoSwapBytes;
  std::vector<double> times;
  int64_t maxSwapped = 0;
  for (int prefetch = 1; prefetch <= 2; ++prefetch) {
    for (int i = 0; i <= 50; ++i) {
      const int64_t budget = peak - int64_t(double(peak) * 0.5 * i / 50.0);
      if (const auto status = whatIf.setBudget(budget, prefetch); !status.isOk()) {
        std::fprintf(stderr, "setBudget: %s\n", status.toString().c_str());
        return 1;
      }
      times.push_back(whatIf.lastPlanMs());
      maxSwapped = std::max(maxSwapped, whatIf.prediction().swappedBytes);
    }
  }
  std::sort(times.begin(), times.end());
  std::printf("layers %d, candidates %zu%s, peak without swap %.1f GB, up to %.1f GB swapped\n",
              layers, plan.tensors.size(), recompute ? " (recompute allowed)" : "",
              double(peak) / 1e9, double(maxSwapped) / 1e9);
  std::printf("re-plan (planSwap via SwapWhatIf::setBudget), %zu budgets: median %.2f ms, "
              "worst %.2f ms\n",
              times.size(), times[times.size() / 2], times.back());
  return 0;
}
