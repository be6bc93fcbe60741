// The swap policy's cost at the size the workbench's what-if re-plans on every slider move: 64
// layers x 7 ops (448 candidates), an H200-shaped profile (T = 16384, D = 2048, top-8, F = 1408,
// bf16; 3 ms forward and 6 ms backward per layer). Cases: auto with a target that forces a
// choice (the peak without swap is 194 GB; at 55 GB/s only about 11 GB can leave during the
// 196 ms forward, so 100 GB is out of reach and makes the policy try every candidate), and one
// simulation alone. Figures in bench/RESULTS.md.
#include <benchmark/benchmark.h>

#include "model/swap/swap_controller.h"

namespace {

using namespace moewb::engine;

SwapProfile h200Profile() {
  ModelDims d;
  d.vocabSize = 32768;
  d.dModel = 2048;
  d.numLayers = 64;
  d.numHeads = 16;
  d.seqLen = 4096;
  d.batchSize = 4;
  d.numExperts = 64;
  d.topK = 8;
  d.dFf = 1408;
  SwapProfile p = swapProfileFor(d);
  p.layerForwardMs.assign(64, 3.0);
  p.layerBackwardMs.assign(64, 6.0);
  p.turnMs = 4;
  p.fixedBytes = 20'000'000'000;
  return p;
}

SwapSettings h200Settings(double targetGb) {
  SwapSection section;
  section.mode = "auto";
  section.hbmTargetGb = targetGb;
  section.pinnedBudgetGb = 200;
  return swapSettingsFrom(section, 141'000'000'000);
}

void BM_PlanAutoForcedChoice(benchmark::State& state) {
  const SwapProfile p = h200Profile();
  const SwapSettings s = h200Settings(double(state.range(0)));
  for (auto _ : state) {
    auto plan = planSwap(s, p);
    benchmark::DoNotOptimize(plan);
    state.SetLabel(plan.isOk() ? plan->summary : plan.status().message());
  }
}
BENCHMARK(BM_PlanAutoForcedChoice)->Arg(190)->Arg(186)->Arg(100)->Unit(benchmark::kMillisecond);

void BM_SimulateOnce(benchmark::State& state) {
  const SwapProfile p = h200Profile();
  const SwapSettings s = h200Settings(0);
  std::vector<SwapAction> actions(p.tensors.size(), SwapAction::kKeep);
  for (size_t i = 0; i < actions.size(); i += 2) actions[i] = SwapAction::kSwap;
  for (auto _ : state) benchmark::DoNotOptimize(simulateSwap(s, p, actions));
}
BENCHMARK(BM_SimulateOnce)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
