// Range selection and search on a large trace (issue 18): a figure, not a test.
//
//   gui_selection_bench [--slices N] [--kernels K] [--trace PATH]
//
// Host side: builds the timeline's in-memory data (TimelineData, what the GUI holds after
// opening) with N host slices (default 1M) shaped like samples/configs/small.toml's steps (per
// 1 ms step 48 slices: step; forward, backward, optimizer; 44 phases of 4 layers), then times
// aggregateHostSlices over the whole trace and over a tenth of it, and TimelineSearch::run for a
// common name ("experts", 1/6 of the slices) and a missing one. GPU side: writes a trace with K
// kernels (default 1M; 40 names on one stream, 1 us each every 2 us) through storage::TraceWriter
// (reused when PATH exists) and times storage::gpuWorkInRange over all of it, the Selection
// dock's worker query. Prints the median of 5 runs of each.
#include <QElapsedTimer>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "moewb/gui/range_aggregate.h"
#include "moewb/gui/timeline_search.h"
#include "moewb/storage/range_queries.h"
#include "moewb/storage/trace_writer.h"

namespace {

using namespace moewb;

double medianMs(const std::function<void()>& body) {
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    QElapsedTimer t;
    t.start();
    body();
    ms.push_back(double(t.nsecsElapsed()) / 1e6);
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// One step of small.toml's shape at `startNs` (48 slices).
void addStep(std::vector<storage::SliceRow>& rows, int64_t step, int64_t startNs) {
  static const char* kPhases[] = {
      "kda.fwd",    "router.fwd",  "permute.fwd", "experts.fwd", "combine.fwd",         "kda.bwd",
      "router.bwd", "permute.bwd", "experts.bwd", "combine.bwd", "sparse_attention.fwd"};
  auto add = [&](int64_t s, int64_t dur, const char* name, int32_t depth) {
    storage::SliceRow r;
    r.track = TrackId(1);
    r.startNs = s;
    r.durNs = dur;
    r.name = name;
    r.depth = depth;
    r.step = step;
    rows.push_back(r);
  };
  add(startNs, 1'000'000, "step", 0);
  add(startNs, 400'000, "forward", 1);
  add(startNs + 400'000, 500'000, "backward", 1);
  add(startNs + 900'000, 100'000, "optimizer", 1);
  for (int i = 0; i < 44; ++i) add(startNs + i * 20'000, 15'000, kPhases[i % 11], 2);
}

Status writeKernelTrace(const std::string& path, int64_t kernels) {
  storage::WriterOptions options;
  options.overwrite = true;
  MOEWB_ASSIGN_OR_RETURN(auto writer, storage::TraceWriter::create(path, options));
  storage::RunRow run;
  run.name = "selection-bench";
  run.backend = "cuda";
  run.status = "running";
  writer->addRun(run);
  const TrackId stream = writer->addTrack({TrackId(), "GPU 0 stream 7", "stream", 0, 7});
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("kernel_" + std::to_string(i));
  for (int64_t k = 0; k < kernels; ++k) {
    const std::string& name = names[size_t(k % 40)];
    storage::GpuKernelRow row{0, 7, 8, 1, 1, 128, 1, 1, 16, 0, 0, name, name, "experts.fwd"};
    writer->addGpuKernel({SliceId(), stream, k * 2'000, 1'000, name, "kernel", k / 1000, -1, 0, 0},
                         row);
    if (k % 100'000 == 99'999) MOEWB_RETURN_IF_ERROR(writer->flush());
  }
  return writer->close();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t slices = 1'000'000, kernels = 1'000'000;
  std::string path = (std::filesystem::temp_directory_path() / "selection_bench.sqlite").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--slices"))
      slices = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--kernels"))
      kernels = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--trace"))
      path = argv[i + 1];
  }
  gui::TimelineData data;
  for (int64_t step = 0; step * 48 < slices;) {
    std::vector<storage::SliceRow> rows;
    for (int k = 0; k < 1000 && step * 48 < slices; ++k, ++step) {
      addStep(rows, step, step * 1'100'000);
    }
    data.addSlices(rows);
  }
  const gui::TimeRange all = data.bounds();
  const gui::TimeRange tenth{all.startNs + all.durNs() * 45 / 100,
                             all.startNs + all.durNs() * 55 / 100};
  size_t rows = 0;
  const double fullMs = medianMs([&] { rows = gui::aggregateHostSlices(data, all).size(); });
  const double tenthMs = medianMs([&] { (void)gui::aggregateHostSlices(data, tenth); });
  std::printf("host_slices %lld\n", static_cast<long long>(data.sliceCount()));
  std::printf("aggregate_full_range_ms %.1f (%zu names)\n", fullMs, rows);
  std::printf("aggregate_tenth_range_ms %.1f\n", tenthMs);
  gui::TimelineSearch search;
  const double findMs = medianMs([&] { search.run(data, QStringLiteral("experts")); });
  std::printf("search_common_name_ms %.1f (%zu matches)\n", findMs, search.matches().size());
  const double missMs = medianMs([&] { search.run(data, QStringLiteral("no such name")); });
  std::printf("search_missing_name_ms %.1f\n", missMs);
  if (kernels <= 0) return 0;
  if (!std::filesystem::exists(path)) {
    QElapsedTimer t;
    t.start();
    const Status written = writeKernelTrace(path, kernels);
    if (!written.isOk()) {
      std::fprintf(stderr, "%s\n", written.toString().c_str());
      return 1;
    }
    std::printf("wrote %s (%lld kernels) in %.1f s\n", path.c_str(),
                static_cast<long long>(kernels), double(t.elapsed()) / 1e3);
  }
  size_t groups = 0;
  const double gpuMs = medianMs([&] {
    auto r = storage::gpuWorkInRange(path, storage::TimeWindow::all());
    groups = r.isOk() ? r->size() : 0;
  });
  std::printf("gpu_aggregate_full_range_ms %.1f (%zu names; on the worker thread)\n", gpuMs,
              groups);
  return 0;
}
