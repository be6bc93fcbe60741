// fuzzTraceReader (see fuzz_targets.h): a trace file from elsewhere through every TraceReader
// query that `moewb info`, `moewb export`, `moewb merge` and the GUI make, in the order they make
// them. Results are dropped; only crashes, hangs and sanitizer reports matter. The work per input
// is bounded: per-row follow-up queries (slice details, collectives) stop after a few rows.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_targets.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/gpu_summary.h"
#include "moewb/storage/run_liveness.h"
#include "moewb/storage/trace_merge.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::fuzz {
namespace {

namespace fs = std::filesystem;
using storage::TimeWindow;
using storage::TraceReader;

constexpr int kFollowUps = 8;  // rows per list that get a follow-up query

// This process's scratch folder: the input file and the export / merge outputs.
const fs::path& scratchDir() {
  static const fs::path dir = [] {
    fs::path path = fs::temp_directory_path() / ("moewb-fuzz-trace-" + std::to_string(getpid()));
    fs::create_directories(path);
    return path;
  }();
  return dir;
}

// Removes `path` and the sidecars SQLite may leave beside it.
void removeWithSidecars(const fs::path& path) {
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    fs::remove(path.string() + suffix, ignored);
  }
}

// `moewb info`: run, steps, liveness, memory, phases, imbalance, GPU summary, stats.
void infoQueries(TraceReader& reader) {
  auto meta = reader.meta();
  auto runs = reader.runs();
  if (runs.isOk()) {
    for (const auto& run : *runs) {
      if (meta.isOk()) (void)storage::describeRunStatus(run, *meta, 0);
      (void)reader.steps(run.id);
      (void)reader.steps(run.id, 1);
    }
  }
  auto bounds = reader.timeBounds();
  if (bounds.isOk() && bounds->endNs < INT64_MAX) {
    (void)reader.counters({bounds->startNs, bounds->endNs + 1});
  }
  (void)reader.memoryTotals();
  (void)reader.tracks();
  (void)reader.phaseTotals();
  (void)reader.phaseTotals(storage::kCategoryKernel);
  (void)reader.layerImbalance();
  (void)storage::kernelSummary(reader, 12);
  (void)storage::gpuIdleSummary(reader);
  (void)reader.stats();
}

// The GUI: time windows, lanes and series, details of what is clicked, the parallel dock.
void guiQueries(TraceReader& reader) {
  auto bounds = reader.timeBounds();
  const TimeWindow all = TimeWindow::all();
  const TimeWindow window = bounds.isOk() ? *bounds : all;
  auto slices = reader.slices(window);
  (void)reader.slices(all);
  (void)reader.counters(all);
  (void)reader.configChanges();
  (void)reader.expertLoad(0, INT64_MAX);
  (void)reader.memorySeries(window, 64);
  (void)reader.memorySeries(all, 1);
  (void)reader.gpuLanes(window, 64);
  (void)reader.gpuLanes(all, 1);
  if (slices.isOk()) {
    int followed = 0;
    for (const auto& slice : *slices) {
      if (followed++ >= kFollowUps) break;
      (void)reader.slices({slice.startNs, slice.startNs + 1}, slice.track);
      (void)reader.gpuSliceDetails(slice.id);
      (void)reader.collectiveAt(slice.track, slice.startNs);
      (void)reader.layerLoad(slice.step, slice.layer);
      (void)reader.memorySeries(window, 16, slice.track);
      (void)reader.gpuLanes(window, 16, slice.track);
    }
  }
  auto overview = reader.parallelOverview();
  storage::ParallelFilter everything;
  (void)reader.a2aTrafficMatrix(everything);
  (void)reader.rankLoads(everything);
  if (overview.isOk()) {
    int followed = 0;
    for (int64_t step : overview->steps) {
      if (followed++ >= kFollowUps) break;
      (void)reader.stepCollectives(step);
      storage::ParallelFilter filter{step, std::nullopt, ""};
      if (!overview->layers.empty()) filter.layer = overview->layers.front();
      if (!overview->phases.empty()) filter.phase = overview->phases.front();
      (void)reader.a2aTrafficMatrix(filter);
      (void)reader.rankLoads(filter);
    }
  }
}

// The swap queries of `moewb info` and the GUI: plans, watermarks, the per-layer table over all
// steps and over the first plan's step, and the copies of the whole file and of a window around
// the first few, per rank.
void swapQueries(TraceReader& reader) {
  auto plans = reader.swapPlans();
  (void)reader.swapSteps();
  (void)reader.swapLayerSummary();
  if (plans.isOk() && !plans->empty()) {
    (void)reader.swapLayerSummary(plans->front().step, plans->front().step);
  }
  auto copies = reader.swapEvents(TimeWindow::all());
  if (!copies.isOk()) return;
  int followed = 0;
  for (const storage::SwapEventRow& copy : *copies) {
    if (followed++ >= kFollowUps) break;
    if (copy.startNs == INT64_MAX) continue;
    const int64_t endNs = copy.endNs > copy.startNs ? copy.endNs : copy.startNs + 1;
    (void)reader.swapEvents({copy.startNs, endNs}, copy.rank);
  }
}

// The streaming visits of export and merge, each stopped early once.
void streamingQueries(TraceReader& reader) {
  int64_t seen = 0;
  (void)reader.forEachSlice([&](const storage::SliceRow&) { return ++seen < 100000; });
  (void)reader.forEachSliceWithGpuWork(
      [&](const storage::SliceRow&, const storage::GpuWorkRow*) { return true; });
  (void)reader.forEachCounter([&](const storage::CounterRow&) { return true; });
  (void)reader.forEachMemoryEvent([&](const storage::MemoryEventRow&) { return true; });
  (void)reader.forEachSlice([](const storage::SliceRow&) { return false; });
}

}  // namespace

int fuzzTraceReader(const uint8_t* data, size_t size) {
  const fs::path input = scratchDir() / "input.sqlite";
  const fs::path json = scratchDir() / "export.json";
  const fs::path merged = scratchDir() / "merged.sqlite";
  removeWithSidecars(input);
  {
    std::ofstream out(input, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  {
    auto opened = TraceReader::open(input.string());
    if (opened.isOk()) {
      TraceReader& reader = **opened;
      infoQueries(reader);
      guiQueries(reader);
      swapQueries(reader);
      streamingQueries(reader);
      storage::ChromeExportStats exportStats;
      (void)storage::exportChromeTrace(reader, json.string(), &exportStats);
    }
  }
  // `moewb merge` opens its inputs itself; one input is a whole run when it holds every rank.
  storage::MergeOptions options;
  options.overwrite = true;
  options.allowMissingRanks = true;
  (void)storage::mergeTraces({input.string()}, merged.string(), options);
  removeWithSidecars(json);
  removeWithSidecars(merged);
  removeWithSidecars(input);
  return 0;
}

}  // namespace moewb::fuzz
