// Trace-writer throughput: synthetic slice rows pushed from one producer thread into a real
// SQLite trace, committed per "step" of `rowsPerStep` rows, measured until everything is on disk
// (close() included). Reports rows/s; the target (DESIGN.md) is >= 1M events/s sustained.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "moewb/storage/trace_writer.h"

namespace {

void BM_WriterSlices(benchmark::State& state) {
  const int64_t rowsPerStep = state.range(0);
  const int64_t steps = 200;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("moewb-writer-bench-" + std::to_string(getpid()) + ".sqlite")).string();
  int64_t rows = 0;
  for (auto _ : state) {
    auto writer = moewb::storage::TraceWriter::create(path, {.overwrite = true});
    if (!writer.isOk()) {
      state.SkipWithError(writer.status().toString().c_str());
      return;
    }
    moewb::storage::TraceWriter& w = **writer;
    moewb::RunId run = w.addRun({.name = "bench", .backend = "cpu", .status = "running"});
    moewb::TrackId track = w.addTrack({.name = "thread", .kind = "thread"});
    const char* names[] = {"attention.fwd", "router.fwd", "permute.fwd", "experts.fwd", "combine.fwd"};
    int64_t t = 0;
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t i = 0; i < rowsPerStep; ++i, t += 100) {
        w.addSlice({.track = track, .startNs = t, .durNs = 90, .name = names[i % 5],
                    .category = "phase", .step = s, .layer = int32_t(i % 4), .depth = 2});
      }
      w.addStep({.run = run, .step = s, .startNs = t - 100 * rowsPerStep, .endNs = t});
      rows += rowsPerStep + 1;
    }
    if (!w.close().isOk()) state.SkipWithError("close failed");
  }
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsRate);
  std::filesystem::remove(path);
}
BENCHMARK(BM_WriterSlices)->Arg(100)->Arg(5000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
