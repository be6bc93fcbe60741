// TraceReader: read-only access to a trace file, also while another process is writing it
// (WAL). Opening checks that the file is a MoE Workbench trace with a schema version this build
// understands; queries are typed and use the store's indexes (time-window queries on
// slice(start_ns), per-step queries on step and expert_load keys).
//
// Files from elsewhere are untrusted: every problem is a Status naming the file, never a crash
// or a hang. The file is opened read-only with SQLite's defensive settings (no triggers, no
// views but those of the schema, bounded value sizes, a time limit per query); in a place that
// cannot be written (a read-only mount, a shared archive) a finished trace is read with SQLite's
// immutable mode. Bad values (a world size beyond kMaxWorldSize, sums that overflow int64) are
// clamped and counted in stats() rows, as Perfetto does.
// Thread-safety: one TraceReader per thread (it owns one SQLite connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/gpu_queries.h"
#include "moewb/storage/parallel_queries.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/swap_queries.h"

namespace moewb::storage {

// The schema version this build writes and the newest it reads.
inline constexpr int kSchemaVersion = 1;

// The largest world size (and so ranks 0 .. kMaxWorldSize - 1) readers accept from a file; the
// config allows far fewer. A run's world_size outside [1, kMaxWorldSize] is read as the nearest
// bound (with a stats row "world_size_out_of_range" naming the value); merge refuses such files.
inline constexpr int32_t kMaxWorldSize = 4096;

// How TraceReader::open treats the file.
struct ReaderOptions {
  // A query step that runs longer than this is stopped, failing with kResourceExhausted "the
  // trace's query took longer than N s; the file may be damaged or hostile". 0 = no limit.
  std::chrono::milliseconds queryTimeLimit{60'000};
};

struct TimeWindow {
  int64_t startNs = 0;
  int64_t endNs = 0;  // exclusive

  // The window that overlaps every slice and counter.
  static constexpr TimeWindow all() {
    return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
};

// Aggregate of all slices with one name (for `moewb info` and the GUI's summary).
struct PhaseTotal {
  std::string name;
  std::string category;
  int64_t count = 0;
  int64_t totalNs = 0;
  int64_t maxNs = 0;
  double meanNs() const { return count ? double(totalNs) / double(count) : 0.0; }
};

// Load imbalance of one layer over a range of steps: max/mean of per-expert tokens.
struct LayerImbalance {
  int32_t layer = 0;
  double meanMaxOverMean = 0;  // average over steps of (max_e tokens / mean_e tokens)
  double lastMaxOverMean = 0;  // the same for the last step in range
  int32_t hottestExpert = 0;   // expert with most tokens summed over the range
  double hottestShare = 0;     // its share of all assignments in the range
};

// One point of a device-memory series: from tsNs on, `bytes` are in use (until the next point).
struct MemoryPoint {
  int64_t tsNs = 0;
  int64_t bytes = 0;
  bool operator==(const MemoryPoint&) const = default;
};

// Bytes in use of one category on one memory track over a window, downsampled (see
// TraceReader::memorySeries).
struct MemorySeries {
  TrackId track;                    // a track of kind "memory" (one rank's device)
  std::string category;             // "weights", "activations", ...
  std::vector<MemoryPoint> points;  // ts ascending (equal ts possible)
};

// Whole-file totals of one category on one memory track (for `moewb info`).
struct MemoryCategoryTotals {
  TrackId track;
  std::string category;
  int64_t allocations = 0;  // alloc events, not counting baseline rows (address 0)
  int64_t frees = 0;        // free events
  int64_t peakBytes = 0;    // largest bytes in use after any event
};

class TraceReader {
 public:
  // Opens `path` read-only (see the header comment). Errors (kDataLoss / kNotFound /
  // kFailedPrecondition, each message naming the file): not found, not an SQLite file, an
  // SQLite file that is not a trace, truncated or corrupt, an empty file beside a -wal with data
  // (SQLite would delete that -wal), a -wal with data in a place that cannot be written, views
  // or triggers that the schema does not declare, or a newer schema version than kSchemaVersion.
  static Result<std::unique_ptr<TraceReader>> open(const std::string& path,
                                                   const ReaderOptions& options = {});
  virtual ~TraceReader() = default;

  virtual const std::string& path() const = 0;
  virtual Result<std::map<std::string, std::string>> meta() = 0;
  virtual Result<std::vector<RunRow>> runs() = 0;
  virtual Result<std::vector<TrackRow>> tracks() = 0;
  // Committed steps of one run with step >= fromStep, ordered by (step, rank).
  virtual Result<std::vector<StepRow>> steps(RunId run, int64_t fromStep = 0) = 0;
  // Slices overlapping the window (start < window.end && start + dur > window.start), ordered by
  // start; optionally only of one track.
  virtual Result<std::vector<SliceRow>> slices(TimeWindow window,
                                               std::optional<TrackId> track = std::nullopt) = 0;
  // [first slice start, last slice end] over the whole file; {0,0} when empty.
  virtual Result<TimeWindow> timeBounds() = 0;
  // Expert load rows with fromStep <= step <= toStep, ordered by (step, layer, expert, rank).
  virtual Result<std::vector<ExpertLoadRow>> expertLoad(int64_t fromStep, int64_t toStep) = 0;
  virtual Result<std::vector<CounterRow>> counters(TimeWindow window) = 0;
  virtual Result<std::vector<ConfigChangeRow>> configChanges() = 0;
  // The file's stats rows, then the reader's own: bad values met so far, each a row named for
  // the problem (world_size_out_of_range, values_clamped) with severity "error".
  virtual Result<std::vector<StatRow>> stats() = 0;
  // Totals per slice name, largest total first; `category` empty = all categories.
  virtual Result<std::vector<PhaseTotal>> phaseTotals(const std::string& category = "") = 0;
  // Per-layer imbalance over all committed steps, ordered by layer. Per step, tokens are summed
  // over ranks; the mean is over the experts that layer has rows for anywhere in the file; steps
  // where a layer routed no tokens are left out (lastMaxOverMean is the last step with tokens).
  virtual Result<std::vector<LayerImbalance>> layerImbalance() = 0;

  // Device memory in use per (memory track, category) over `window`, downsampled for drawing:
  // the window is cut into `buckets` (>= 1) equal time buckets and each bucket that holds events
  // gives at most two points, (its first event's ts, the largest bytes in use after any of its
  // events) and, when the bucket ends at a different value, (its last event's ts, that value);
  // so peaks survive downsampling and the level after each bucket is exact. When an event
  // precedes the window, the series starts with (window.startNs, the bytes in use then).
  // Every (track, category) of the file is returned, ordered by track then category name,
  // also those with no points in the window; optionally only of `track`. Empty for a trace
  // without memory events (or from a build whose memory_event table lacks in_use_bytes).
  // Cost: two index probes per series plus one covering-index range scan over the window's
  // events (no sort), in one read snapshot; the output is O(series * buckets).
  virtual Result<std::vector<MemorySeries>> memorySeries(TimeWindow window, int32_t buckets,
                                                         std::optional<TrackId> track = {});
  // Per (memory track, category): allocation and free counts and the peak bytes in use, ordered
  // by track then category name; empty without memory events. Cost: one scan of memory_event.
  virtual Result<std::vector<MemoryCategoryTotals>> memoryTotals();
  // Calls `visit` for every memory event in (ts, id) order, streaming; stops early when `visit`
  // returns false. The default implementations of these three report no memory events.
  virtual Status forEachMemoryEvent(const std::function<bool(const MemoryEventRow&)>& visit);

  // GPU lanes over `window`, downsampled for drawing: one GpuLane per track of kind "cuda_api"
  // (its API calls and synchronisations, without its NVTX ranges) and "stream" (kernels, copies,
  // memsets); per rank the API threads first, then the streams, each by track id; also lanes
  // without items; optionally only `track`.
  // The window is cut into `buckets` (>= 1) equal buckets; slices at least one bucket long are
  // items of their own, and runs of shorter slices whose gaps are shorter than one bucket fold
  // into one item (count > 1), so a lane has O(buckets) items however many kernels it ran.
  // Errors: read errors. Cost: one index range scan of slice(track, start_ns) per lane track
  // over the window (rows read O(slices in the window)), in one read snapshot. The default
  // implementation reports no lanes.
  virtual Result<std::vector<GpuLane>> gpuLanes(TimeWindow window, int32_t buckets,
                                                std::optional<TrackId> track = {});
  // The details of GPU slice `slice` (kernel, memcpy or memset, with its launching API call
  // found by correlation id); for a CUDA API call, those of the GPU work it launched; nullopt
  // when the slice does not exist or is not GPU work and launched none.
  // Cost: a few primary-key probes and one probe of the correlation index.
  virtual Result<std::optional<GpuSliceDetails>> gpuSliceDetails(SliceId slice);
  // Expert load of (step, layer), summed over ranks; nullopt without rows for it. Cost: one
  // range of the expert_load(step, layer) index.
  virtual Result<std::optional<LayerLoad>> layerLoad(int64_t step, int32_t layer);

  // Parallel runs (world size > 1): all-to-all traffic, routed rows per rank, collectives
  // matched across ranks (result types in parallel_queries.h). Files of one rank, or from before
  // these tables existed, give empty results. Implemented in sqlite_trace_reader_parallel.cpp;
  // the defaults report nothing.
  //
  // World size, steps with collectives, a2a layers and phases, and the EP groups. Cost: a scan
  // of the collective(step, rank) index for the steps, index probes of the first step for the
  // rest.
  virtual Result<ParallelOverview> parallelOverview();
  // The a2a_traffic bytes of `filter` summed per (src, dst) into a [W, W] matrix, W = the first
  // run's world size (or 1 + the largest rank read without a run row; at most kMaxWorldSize).
  // Ranks outside [0, W) go to outOfRangeBytes. Errors: read errors. Cost: one range of
  // a2a_traffic(step, layer) with a step, one scan of a2a_traffic for all steps.
  virtual Result<A2aTrafficMatrix> a2aTrafficMatrix(const ParallelFilter& filter);
  // Per rank: routed rows sent and received and the load of the experts it hosts, from the
  // expert_load rows of `filter` (its phase is ignored) and the EP groups of parallelOverview;
  // ranks without an EP group host every expert. Cost: one grouped range of expert_load(step,
  // layer) (a scan for all steps) plus parallelOverview.
  virtual Result<RankLoads> rankLoads(const ParallelFilter& filter);
  // Every collective of `step` matched across its peers, ordered by first start, then group and
  // seq. Cost: one range of the collective(step, rank) index.
  virtual Result<std::vector<MatchedCollective>> stepCollectives(int64_t step);
  // The collective whose slice starts at `startNs` on comm track `track`, matched across its
  // peers; nullopt when there is no collective there. Cost: index probes of slice(track,
  // start_ns) and collective(step, rank), one range of collective(step, rank).
  virtual Result<std::optional<MatchedCollective>> collectiveAt(TrackId track, int64_t startNs);

  // Swap (result types in swap_queries.h). Files without swap tables, or a run without swap,
  // give empty results; the defaults report nothing. Implemented in sqlite_trace_reader_swap.cpp.
  //
  // Copies overlapping `window`, ordered by start then id; optionally one rank. Cost: one range
  // of the swap_event(start_ns) index.
  virtual Result<std::vector<SwapEventRow>> swapEvents(TimeWindow window,
                                                       std::optional<int32_t> rank = {});
  // Every step's watermarks, by step then rank. Cost: one scan of swap_step.
  virtual Result<std::vector<SwapStepRow>> swapSteps();
  // Every plan with its profile, by step then rank. Cost: a scan of swap_plan and one range of
  // swap_plan_tensor / swap_plan_layer per plan.
  virtual Result<std::vector<SwapPlanRow>> swapPlans();
  // Per (rank, layer): copies, bytes, late reloads, offload waits and stalls (exposed and worst:
  // reload stalls and offload waits alike) over steps [fromStep, toStep] (inclusive; defaults:
  // all), ordered by rank then layer. Cost: one grouped scan of swap_event.
  virtual Result<std::vector<SwapLayerSummary>> swapLayerSummary(
      int64_t fromStep = 0, int64_t toStep = std::numeric_limits<int64_t>::max());

  // Calls `visit` for every slice in (start, id) order, streaming (memory O(1) in the number of
  // slices); stops early when `visit` returns false. `visit` may call other methods of this
  // reader. The default implementation calls slices(TimeWindow::all()).
  virtual Status forEachSlice(const std::function<bool(const SliceRow&)>& visit);
  // forEachSlice, with each GPU work slice's detail row (kernel launch shape, copy kind and
  // bytes, memset bytes, phase) alongside; nullptr for other slices and in files without GPU
  // tables. Same order; costs one primary-key probe per slice and GPU table more. The default
  // implementation passes nullptr for every slice.
  virtual Status forEachSliceWithGpuWork(
      const std::function<bool(const SliceRow&, const GpuWorkRow*)>& visit);
  // Calls `visit` for every counter sample, streaming; stops early when `visit` returns false.
  // The SQLite reader goes in (track, ts) order; the default implementation calls
  // counters(TimeWindow::all()) (ts order).
  virtual Status forEachCounter(const std::function<bool(const CounterRow&)>& visit);
};

// Bad values an export met and wrote in a repaired form.
struct ChromeExportStats {
  int64_t invalidUtf8Strings = 0;  // texts with invalid UTF-8, written with U+FFFD in its place
  int64_t clampedTimes = 0;        // timestamps whose distance from the origin overflows int64
};

// Writes the trace as Chrome Trace Event JSON (object form with "traceEvents"), which Perfetto UI
// and chrome://tracing open: one process per rank, one thread per track, complete ("X") events
// for slices with step/layer in args, counter ("C") events, and metadata names. Bad values never
// abort it: invalid UTF-8 is replaced, overflowing times are clamped, both counted in `stats`
// (optional). Errors: kInternal naming outPath if it cannot be written; read errors.
Status exportChromeTrace(TraceReader& reader, const std::string& outPath,
                         ChromeExportStats* stats = nullptr);

}  // namespace moewb::storage
