// Training-step throughput of the CPU reference engine on the sample configs' shapes:
// tokens/s and the peak bytes of engine tensors per step. No tracing (sink = null) and with the
// host tracer writing a real trace, to show what tracing costs.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "moewb/engine/trainer.h"
#include "moewb/profiler/host_tracer.h"
#include "moewb/storage/trace_writer.h"
#include "../tests/source_dir.h"

namespace {

using moewb::engine::RunConfig;

// samples/configs/<name>.toml with run.threads set (defaults when the file cannot be read).
RunConfig sampleConfig(const char* name, int threads) {
  auto config = moewb::engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/" +
                                              name + ".toml");
  if (!config.isOk()) return RunConfig{};
  config->run.threads = threads;
  return config.value();
}

RunConfig tinyConfig(int threads) { return sampleConfig("tiny", threads); }

// Times trainer steps of `config` after `warmupSteps` untimed ones; reports tokens/s and the
// peak bytes of engine tensors in a step.
void benchmarkTrainSteps(benchmark::State& state, const RunConfig& config, int warmupSteps) {
  auto trainer = moewb::engine::Trainer::create(config, nullptr);
  if (!trainer.isOk()) {
    state.SkipWithError(trainer.status().toString().c_str());
    return;
  }
  for (int i = 0; i < warmupSteps; ++i) (void)(*trainer)->step();
  int64_t peak = 0;
  for (auto _ : state) {
    auto step = (*trainer)->step();
    if (!step.isOk()) {
      state.SkipWithError(step.status().toString().c_str());
      return;
    }
    peak = std::max(peak, step->peakBytes);
  }
  state.counters["tokens/s"] = benchmark::Counter(
      double(state.iterations()) * double(config.tokensPerStep()), benchmark::Counter::kIsRate);
  state.counters["peak_MiB"] = double(peak) / (1024.0 * 1024.0);
}

// The full hybrid model (KDA + sparse attention + latent MoE with a shared expert + CCE), timed
// past the sparse layers' 50-step dense warm-up.
void BM_SmallTrainStep(benchmark::State& state) {
  benchmarkTrainSteps(state, sampleConfig("small", int(state.range(0))), 60);
}
BENCHMARK(BM_SmallTrainStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The walking-skeleton model (softmax attention); one untimed step for first-touch allocations.
void BM_TinyTrainStep(benchmark::State& state) {
  benchmarkTrainSteps(state, tinyConfig(int(state.range(0))), 1);
}
BENCHMARK(BM_TinyTrainStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_TinyTrainStepTraced(benchmark::State& state) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("moewb-bench-" + std::to_string(getpid()) + ".sqlite")).string();
  auto writer = moewb::storage::TraceWriter::create(path, {.overwrite = true});
  if (!writer.isOk()) {
    state.SkipWithError(writer.status().toString().c_str());
    return;
  }
  moewb::profiler::HostTracer tracer(writer->get());
  auto trainer = moewb::engine::Trainer::create(tinyConfig(2), &tracer);
  if (!trainer.isOk()) {
    state.SkipWithError(trainer.status().toString().c_str());
    return;
  }
  (void)(*trainer)->step();
  for (auto _ : state) {
    auto step = (*trainer)->step();
    if (!step.isOk()) {
      state.SkipWithError(step.status().toString().c_str());
      return;
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(
      double(state.iterations()) * double(tinyConfig(2).tokensPerStep()), benchmark::Counter::kIsRate);
  (void)(*writer)->close();
  std::filesystem::remove(path);
}
BENCHMARK(BM_TinyTrainStepTraced)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
