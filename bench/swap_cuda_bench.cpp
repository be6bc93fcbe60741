// Swap on the CUDA backend (issue 16): one config trained a few steps three ways in one process:
// swap off; swap auto at an HBM target that forces a choice (the fixed bytes plus
// --target-fraction of the no-swap run's activation peak); swap manual on a heavy op set
// (--manual-ops). Prints a table and one JSON line per mode: tokens/s, step ms, real and
// counterfactual peak GB, swapped GB per step, copy ms, exposed ms (reload stalls + offload
// waits) and exposed / copy, late reloads / reloads after the first step that swapped, the effective D2H
// GB/s, and the compute-stream waits for offloads to free their memory (offw_ms: a layer's
// copies outlasting the next layer's forward; the offload events' stallNs). Medians of the timed
// steps after --warmup steps (auto mode measures one step before it plans; its warm-up starts
// after that).
// Usage: swap_cuda_bench CONFIG.toml [--steps N] [--warmup N] [--target-fraction F]
//        [--target-gb G] [--modes off,auto,manual] [--manual-ops LIST] [--pinned-gb G]
//        [--set key=value ...]
// --modes runs a subset (each mode builds the model again: on h200.toml the three modes may not
// fit one 10-minute device call); auto without off needs --target-gb.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"

namespace {

using moewb::engine::RunConfig;

// What one mode's run reports: the swap events and the device memory account.
class BenchSink : public moewb::engine::EventSink {
 public:
  void onRunStart(const moewb::engine::RunStartEvent&) override {}
  void onPhase(const moewb::engine::PhaseEvent&) override {}
  void onExpertLoad(const moewb::engine::ExpertLoadEvent&) override {}
  void onCounter(const moewb::engine::CounterEvent&) override {}
  void onStep(const moewb::engine::StepEvent&) override {}
  void onRunEnd(const moewb::engine::RunEndEvent&) override {}
  void onMemory(const moewb::engine::MemoryEvent& e) override {
    if (e.category == "weights" || e.category == "grads" || e.category == "optimizer") {
      (e.category == "weights" ? weights : e.category == "grads" ? grads : optimizer) =
          e.categoryInUseBytes;
    }
  }
  void onSwapPlan(const moewb::engine::SwapPlanEvent& e) override { plan = e; ++plans; }
  void onSwap(const moewb::engine::SwapEvent& e) override { copies.push_back(e); }
  void onSwapStep(const moewb::engine::SwapStepEvent& e) override { steps.push_back(e); }

  int64_t weights = 0, grads = 0, optimizer = 0;
  int plans = 0;
  moewb::engine::SwapPlanEvent plan;
  std::vector<moewb::engine::SwapEvent> copies;
  std::vector<moewb::engine::SwapStepEvent> steps;
};

struct ModeResult {
  std::string mode;
  double stepMs = 0;
  double tokensPerS = 0;
  int64_t peakBytes = 0;          // real device peak, max over the timed steps
  int64_t peakNoSwapBytes = 0;    // counterfactual, max over the timed steps (0: no swap)
  int64_t fixedBytes = 0;         // weights + grads + optimizer
  double swappedGbPerStep = 0;
  double copyMs = 0, exposedMs = 0;
  double offloadWaitMs = 0;       // compute-stream waits for offloads to free memory, per step
  int64_t late = 0, reloads = 0;
  double d2hGbps = 0;
  std::string summary;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

ModeResult runMode(const std::string& mode, const RunConfig& config, int steps, int warmup) {
  BenchSink sink;
  auto trainer = moewb::engine::Trainer::create(config, &sink);
  if (!trainer.isOk()) {
    std::fprintf(stderr, "%s: %s\n", mode.c_str(), trainer.status().toString().c_str());
    std::exit(2);
  }
  ModeResult r;
  r.mode = mode;
  std::vector<double> ms;
  std::vector<int64_t> timedSteps;
  const int measuring = config.swap.mode == "auto" ? 1 : 0;
  for (int s = 0; s < measuring + warmup + steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    auto step = trainer.value()->step();
    const auto end = std::chrono::steady_clock::now();
    if (!step.isOk()) {
      std::fprintf(stderr, "%s: %s\n", mode.c_str(), step.status().toString().c_str());
      std::exit(1);
    }
    if (s < measuring + warmup) continue;
    ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    r.peakBytes = std::max(r.peakBytes, step.value().peakBytes);
    timedSteps.push_back(step.value().step);
  }
  r.stepMs = median(ms);
  r.tokensPerS = double(config.tokensPerStep()) / (r.stepMs / 1e3);
  r.fixedBytes = sink.weights + sink.grads + sink.optimizer;
  if (sink.plans > 0) r.summary = sink.plan.summary;
  // Swap totals over the timed steps; late / reloads after the first step that swapped.
  int64_t firstSwap = -1;
  for (const auto& e : sink.steps) {
    if (e.offloads > 0) {
      firstSwap = e.step;
      break;
    }
  }
  int timed = 0;
  for (const auto& e : sink.steps) {
    if (std::find(timedSteps.begin(), timedSteps.end(), e.step) == timedSteps.end()) continue;
    ++timed;
    r.peakNoSwapBytes = std::max(r.peakNoSwapBytes, e.hbmPeakNoSwapBytes);
    r.swappedGbPerStep += double(e.swappedBytes) / 1e9;
    r.copyMs += e.copyMs;
    r.exposedMs += e.exposedMs;
    if (firstSwap >= 0 && e.step > firstSwap) {
      r.late += e.lateReloads;
      r.reloads += e.reloads;
    }
  }
  if (timed > 0) {
    r.swappedGbPerStep /= timed;
    r.copyMs /= timed;
    r.exposedMs /= timed;
  }
  double d2hBytes = 0, d2hNs = 0;
  for (const auto& c : sink.copies) {
    if (!c.toHost) continue;
    if (std::find(timedSteps.begin(), timedSteps.end(), c.step) != timedSteps.end()) {
      r.offloadWaitMs += double(c.stallNs) / 1e6;
    }
    d2hBytes += double(c.bytes);
    d2hNs += double(c.endNs - c.startNs);
  }
  r.d2hGbps = d2hNs > 0 ? d2hBytes / d2hNs : 0;  // bytes per ns = GB/s
  if (timed > 0) r.offloadWaitMs /= timed;
  return r;
}

void print(const ModeResult& r, const RunConfig& c) {
  const double gb = 1e9;
  std::printf("%-8s %9.0f %8.1f %8.2f %8.2f %8.2f %8.1f %8.2f %7.1f%% %6lld/%-6lld %7.1f %8.2f\n",
              r.mode.c_str(), r.tokensPerS, r.stepMs, double(r.peakBytes) / gb,
              double(r.peakNoSwapBytes) / gb, r.swappedGbPerStep, r.copyMs, r.exposedMs,
              r.copyMs > 0 ? 100.0 * r.exposedMs / r.copyMs : 0.0, (long long)r.late,
              (long long)r.reloads, r.d2hGbps, r.offloadWaitMs);
  std::printf("{\"name\": \"moewb_swap_%s_%s\", \"tokens_per_s\": %.0f, \"step_ms\": %.3f, "
               "\"peak_gb\": %.3f, \"peak_no_swap_gb\": %.3f, \"fixed_gb\": %.3f, "
               "\"swapped_gb_per_step\": %.3f, \"copy_ms\": %.3f, \"exposed_ms\": %.3f, "
               "\"late_reloads\": %lld, \"reloads\": %lld, \"d2h_gbps\": %.2f, "
               "\"offload_wait_ms\": %.3f, \"plan\": \"%s\"}\n",
               c.run.name.c_str(), r.mode.c_str(), r.tokensPerS, r.stepMs,
               double(r.peakBytes) / gb, double(r.peakNoSwapBytes) / gb,
               double(r.fixedBytes) / gb, r.swappedGbPerStep, r.copyMs, r.exposedMs,
               (long long)r.late, (long long)r.reloads, r.d2hGbps, r.offloadWaitMs,
               r.summary.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s CONFIG.toml [--steps N] [--warmup N] [--target-fraction F] "
                 "[--target-gb G] [--modes off,auto,manual] [--manual-ops LIST] "
                 "[--pinned-gb G] [--set key=value ...]\n",
                 argv[0]);
    return 2;
  }
  auto loaded = moewb::engine::loadConfigFile(argv[1]);
  if (!loaded.isOk()) {
    std::fprintf(stderr, "%s\n", loaded.status().toString().c_str());
    return 2;
  }
  // Line-buffered: a run cut short by a time limit keeps the rows it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  RunConfig config = loaded.value();
  int steps = 6, warmup = 2;
  double targetFraction = 0.8, pinnedGb = 24, targetGb = 0;
  std::string manualOps = "moe_act", modes = "off,auto,manual";
  for (int i = 2; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--steps") && value) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--warmup") && value) {
      warmup = std::max(0, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--target-fraction") && value) {
      targetFraction = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--target-gb") && value) {
      targetGb = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--modes") && value) {
      modes = argv[++i];
    } else if (!std::strcmp(argv[i], "--manual-ops") && value) {
      manualOps = argv[++i];
    } else if (!std::strcmp(argv[i], "--pinned-gb") && value) {
      pinnedGb = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--set") && value) {
      auto status = moewb::engine::applyOverride(config, argv[++i]);
      if (!status.isOk()) {
        std::fprintf(stderr, "%s\n", status.toString().c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  config.run.backend = "cuda";
  std::printf("%-8s %9s %8s %8s %8s %8s %8s %8s %8s %13s %7s %8s\n", "mode", "tokens/s",
              "step_ms", "peak_GB", "nosw_GB", "swap_GB", "copy_ms", "expo_ms", "expo/cp",
              "late/reloads", "d2h_GB/s", "offw_ms");
  const auto wanted = [&](const char* mode) {
    return ("," + modes + ",").find(std::string(",") + mode + ",") != std::string::npos;
  };
  if (wanted("auto") && !wanted("off") && targetGb <= 0) {
    std::fprintf(stderr, "--modes without off needs --target-gb for auto (the off run sets it)\n");
    return 2;
  }
  ModeResult base;
  if (wanted("off")) {
    RunConfig off = config;
    off.swap.mode = "off";
    base = runMode("off", off, steps, warmup);
    print(base, config);
  }
  if (wanted("auto")) {
    RunConfig automatic = config;
    automatic.swap.mode = "auto";
    automatic.swap.pinnedBudgetGb = pinnedGb;
    const int64_t activations = std::max<int64_t>(0, base.peakBytes - base.fixedBytes);
    const double targetBytes = targetGb > 0 ? targetGb * 1e9
                                            : double(base.fixedBytes) +
                                                  targetFraction * double(activations);
    automatic.swap.hbmTargetGb = targetBytes / 1e9;
    if (targetGb > 0) {
      std::printf("auto: HBM target %.2f GB (--target-gb)\n", targetBytes / 1e9);
    } else {
      std::printf("auto: HBM target %.2f GB = fixed %.2f GB + %.0f%% of the no-swap activation "
                  "peak %.2f GB\n",
                  targetBytes / 1e9, double(base.fixedBytes) / 1e9, 100 * targetFraction,
                  double(activations) / 1e9);
    }
    const ModeResult autoResult = runMode("auto", automatic, steps, warmup);
    print(autoResult, config);
    std::printf("auto plan: %s\n", autoResult.summary.c_str());
    if (wanted("off")) {
      std::printf("auto vs off: %.1f%% tokens/s, peak %.2f -> %.2f GB (target %.2f GB)\n",
                  100.0 * (autoResult.tokensPerS / base.tokensPerS - 1.0),
                  double(base.peakBytes) / 1e9, double(autoResult.peakBytes) / 1e9,
                  targetBytes / 1e9);
    }
  }
  if (wanted("manual")) {
    RunConfig manual = config;
    manual.swap.mode = "manual";
    manual.swap.ops = manualOps;
    manual.swap.pinnedBudgetGb = pinnedGb;
    const ModeResult manualResult = runMode("manual", manual, steps, warmup);
    print(manualResult, config);
    std::printf("manual (%s) plan: %s\n", manualOps.c_str(), manualResult.summary.c_str());
  }
  return 0;
}
