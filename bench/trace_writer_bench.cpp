// Trace-writer throughput: synthetic slice rows pushed from one producer thread into a real
// SQLite trace, committed per "step" of `rowsPerStep` rows, measured until everything is on disk
// (close() included). Reports rows/s; the target (DESIGN.md) is >= 1M events/s sustained, and
// producer_ns/row: CPU time the producing thread spends in add* calls per row (the hot-path cost).
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>

#include "moewb/storage/trace_writer.h"

namespace {

int64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void BM_WriterSlices(benchmark::State& state) {
  const int64_t rowsPerStep = state.range(0);
  const int64_t steps = 200;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("moewb-writer-bench-" + std::to_string(getpid()) + ".sqlite")).string();
  int64_t rows = 0;
  int64_t producerCpuNs = 0;
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
    const int64_t cpuStart = threadCpuNs();
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t i = 0; i < rowsPerStep; ++i, t += 100) {
        w.addSlice({.track = track, .startNs = t, .durNs = 90, .name = names[i % 5],
                    .category = "phase", .step = s, .layer = int32_t(i % 4), .depth = 2});
      }
      w.addStep({.run = run, .step = s, .startNs = t - 100 * rowsPerStep, .endNs = t});
      rows += rowsPerStep + 1;
    }
    producerCpuNs += threadCpuNs() - cpuStart;
    if (!w.close().isOk()) state.SkipWithError("close failed");
  }
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsRate);
  state.counters["producer_ns/row"] = rows > 0 ? double(producerCpuNs) / double(rows) : 0.0;
  std::filesystem::remove(path);
}
BENCHMARK(BM_WriterSlices)->Arg(100)->Arg(5000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
