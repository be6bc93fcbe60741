// SqliteTraceReader: the TraceReader implementation (see moewb/storage/trace_reader.h), plus the
// SQL of its indexed queries, exposed so tests can check their query plans.
//
// One read-only, hardened SQLite connection (trace_open.h; WAL: it sees what a writer in any
// process has committed). Bad values it meets are counted in reader-side stats rows.
// Costs: slices(window) is an index range scan over [window.start - maxSliceDur, window.end) of
// slice(start_ns) (or slice(track, start_ns)), where maxSliceDur is one meta lookup written by
// the writer; timeBounds is three index probes; counters(window) one index range per track;
// steps/expertLoad are key range scans; phaseTotals and layerImbalance scan their tables;
// memorySeries is index probes plus a covering-index range scan (sqlite_trace_reader_memory.cpp);
// the GPU lane and kernel-detail queries are in sqlite_trace_reader_gpu.cpp, the parallel-run
// queries (traffic matrix, rows per rank, matched collectives) in sqlite_trace_reader_parallel.cpp,
// the swap queries in sqlite_trace_reader_swap.cpp.
// Multi-statement queries run in one read transaction so they see one snapshot.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "moewb/storage/trace_reader.h"
#include "sqlite_util.h"

namespace moewb::storage::detail {

// The row of a statement selecting "id, track, start_ns, dur_ns, name text, category text, step,
// layer, correlation_id, depth" (the slice columns with names resolved), in that order.
SliceRow sliceFromColumns(const Statement& s);
// The row of a statement selecting "id, name, kind, rank, thread_id" from track, in that order.
TrackRow trackFromColumns(const Statement& s);
// The row of a statement selecting "step, layer, expert, rank, tokens, dropped, bias" from
// expert_load, in that order.
ExpertLoadRow expertLoadFromColumns(const Statement& s);

// ?1 = lowest start to scan (window.start - max slice duration), ?2 = window end (exclusive),
// ?3 = window start; with the track variant, ?4 = track.
inline constexpr const char* kSliceWindowSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "WHERE s.start_ns >= ?1 AND s.start_ns < ?2 AND s.start_ns + s.dur_ns > ?3 "
    "ORDER BY s.start_ns, s.id";
inline constexpr const char* kSliceWindowTrackSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "WHERE s.track = ?4 AND s.start_ns >= ?1 AND s.start_ns < ?2 AND s.start_ns + s.dur_ns > ?3 "
    "ORDER BY s.start_ns, s.id";
// ?1 = window start, ?2 = window end (exclusive).
inline constexpr const char* kCounterWindowSql =
    "SELECT c.track, coalesce(n.text, ''), c.ts_ns, c.value "
    "FROM track t CROSS JOIN counter c ON c.track = t.id "
    "LEFT JOIN string n ON n.id = c.name "
    "WHERE c.ts_ns >= ?1 AND c.ts_ns < ?2 ORDER BY c.ts_ns, c.track, c.id";

// Memory series (see memorySeries): ?1 = track, ?2 = category string id, ?3 = window start;
// the last event before the window, and (with ?4 = window end) the events in it, both read from
// the covering index memory_event_series_idx without a sort.
inline constexpr const char* kMemoryBeforeWindowSql =
    "SELECT in_use_bytes FROM memory_event WHERE track = ?1 AND category = ?2 AND ts_ns < ?3 "
    "ORDER BY ts_ns DESC, id DESC LIMIT 1";
inline constexpr const char* kMemoryInWindowSql =
    "SELECT ts_ns, in_use_bytes FROM memory_event WHERE track = ?1 AND category = ?2 "
    "AND ts_ns >= ?3 AND ts_ns < ?4 ORDER BY ts_ns, id";
// The next (track, category) pair after (?1, ?2): one index probe (a loose index scan).
inline constexpr const char* kMemoryNextSeriesSql =
    "SELECT track, category FROM memory_event WHERE (track, category) > (?1, ?2) "
    "ORDER BY track, category LIMIT 1";

// Whether table `table` (one of the swap tables) of schema `schema` ("main", or an attached
// input such as "src") exists with every column this build reads. Cost: one pragma_table_info.
Result<bool> swapTableReadable(Database& db, const std::string& table,
                               const std::string& schema = "main");
// Columns added to the swap plan tables after them (files from before read their defaults).
enum class SwapAddedColumns {
  kPlanSettings,  // swap_plan: free_lag_layers, ops, min_bytes
  kRecompute,     // swap_plan: recompute_ops, recompute_ms_source; swap_plan_layer: recompute_ms
};
// Whether `schema` has every column of `columns`. Cost: one pragma_table_info per table.
Result<bool> swapHasAddedColumns(Database& db, SwapAddedColumns columns,
                                 const std::string& schema = "main");

class SqliteTraceReader final : public TraceReader {
 public:
  // See TraceReader::open.
  static Result<std::unique_ptr<SqliteTraceReader>> open(const std::string& path,
                                                         const ReaderOptions& options = {});

  const std::string& path() const override { return m_path; }
  Result<std::map<std::string, std::string>> meta() override;
  Result<std::vector<RunRow>> runs() override;
  Result<std::vector<TrackRow>> tracks() override;
  Result<std::vector<StepRow>> steps(RunId run, int64_t fromStep) override;
  Result<std::vector<SliceRow>> slices(TimeWindow window, std::optional<TrackId> track) override;
  Result<TimeWindow> timeBounds() override;
  Result<std::vector<ExpertLoadRow>> expertLoad(int64_t fromStep, int64_t toStep) override;
  Result<std::vector<CounterRow>> counters(TimeWindow window) override;
  Result<std::vector<ConfigChangeRow>> configChanges() override;
  Result<std::vector<StatRow>> stats() override;
  Result<std::vector<PhaseTotal>> phaseTotals(const std::string& category) override;
  Result<std::vector<LayerImbalance>> layerImbalance() override;
  Status forEachSlice(const std::function<bool(const SliceRow&)>& visit) override;
  Status forEachSliceWithGpuWork(
      const std::function<bool(const SliceRow&, const GpuWorkRow*)>& visit) override;
  Status forEachCounter(const std::function<bool(const CounterRow&)>& visit) override;
  Result<std::vector<MemorySeries>> memorySeries(TimeWindow window, int32_t buckets,
                                                 std::optional<TrackId> track) override;
  Result<std::vector<MemoryCategoryTotals>> memoryTotals() override;
  Status forEachMemoryEvent(const std::function<bool(const MemoryEventRow&)>& visit) override;
  Result<std::vector<GpuLane>> gpuLanes(TimeWindow window, int32_t buckets,
                                        std::optional<TrackId> track) override;
  Result<std::optional<GpuSliceDetails>> gpuSliceDetails(SliceId slice) override;
  Result<std::optional<LayerLoad>> layerLoad(int64_t step, int32_t layer) override;
  // Parallel-run queries (sqlite_trace_reader_parallel.cpp).
  Result<ParallelOverview> parallelOverview() override;
  Result<A2aTrafficMatrix> a2aTrafficMatrix(const ParallelFilter& filter) override;
  Result<RankLoads> rankLoads(const ParallelFilter& filter) override;
  Result<std::vector<MatchedCollective>> stepCollectives(int64_t step) override;
  Result<std::optional<MatchedCollective>> collectiveAt(TrackId track, int64_t startNs) override;
  // Swap queries (sqlite_trace_reader_swap.cpp).
  Result<std::vector<SwapEventRow>> swapEvents(TimeWindow window,
                                               std::optional<int32_t> rank) override;
  Result<std::vector<SwapStepRow>> swapSteps() override;
  Result<std::vector<SwapPlanRow>> swapPlans() override;
  Result<std::vector<SwapLayerSummary>> swapLayerSummary(int64_t fromStep,
                                                         int64_t toStep) override;

 private:
  explicit SqliteTraceReader(std::string path) : m_path(std::move(path)) {}
  Status verifyIsTrace();
  Status verifyCoreTables();
  // Records a stats row of the reader's own (see TraceReader::stats): adds `count` to the row
  // `name` and keeps the first description.
  void countBadValue(const std::string& name, int64_t count, const std::string& description);
  // Counts `count` values that overflowed int64 and were clamped (stats row values_clamped).
  void countClamped(int64_t count);
  // Checks every run's world_size against [1, kMaxWorldSize] and counts the runs outside it
  // (the stats row names the first). Cost: one scan of run.
  Status checkRunWorldSizes();
  Result<std::string> metaValue(const char* key);
  // The longest slice duration (meta, else a scan for files written by other tools).
  Result<int64_t> maxSliceDurNs();
  Result<std::vector<SliceRow>> slicesInSnapshot(TimeWindow window, std::optional<TrackId> track);
  Result<TimeWindow> timeBoundsInSnapshot();
  // Whether memory_event has the columns this build reads (step, in_use_bytes); cached.
  Result<bool> hasMemoryColumns();
  Result<std::vector<GpuLane>> gpuLanesInSnapshot(TimeWindow window, int32_t buckets,
                                                  std::optional<TrackId> track);
  Result<std::vector<MemorySeries>> memorySeriesInSnapshot(TimeWindow window, int32_t buckets,
                                                           std::optional<TrackId> track);
  Result<ParallelOverview> parallelOverviewInSnapshot();
  Result<std::optional<int32_t>> runWorldSize();
  // Which swap tables have every column this build reads (bits of SwapTable in
  // sqlite_trace_reader_swap.cpp); files from before swap, or with the empty placeholder table
  // of early v1 files, have none. Cached (one pragma_table_info read per table).
  Result<int> swapTables();
  // The longest swap copy (meta max_swap_dur_ns, else a scan of swap_event), at least 0.
  Result<int64_t> maxSwapDurNs();
  Result<std::vector<SwapEventRow>> swapEventsInSnapshot(TimeWindow window,
                                                         std::optional<int32_t> rank);
  // `settings`, `recompute`: the file has the kPlanSettings, the kRecompute columns (else
  // their defaults are read).
  Result<std::vector<SwapPlanRow>> swapPlansInSnapshot(bool settings, bool recompute);
  // Repairs one read swap copy in place (reversed times, negative bytes or stalls), counting
  // each repair in the reader's stats.
  void repairSwapEvent(SwapEventRow& row);
  // Runs `body` inside BEGIN ... COMMIT so that its statements see one snapshot.
  template <typename T, typename Body>
  Result<T> inReadTransaction(Body&& body);

  std::string m_path;
  Database m_db;  // never moved after open(): statements point at it
  int m_memoryColumns = -1;  // hasMemoryColumns: -1 unknown, 0 no, 1 yes
  int m_swapTables = -1;     // swapTables: -1 unknown, else the bit set
  std::vector<StatRow> m_badValues;  // the reader's own stats rows, by first occurrence
};

// `value` (an SQL total(), exact for integers below 2^53) as int64, clamped to the int64 range;
// `clamped` counts each clamp. NaN gives 0 and counts.
int64_t clampToInt64(double value, int64_t* clamped);
// a + b and a - b clamped to the int64 range; `clamped` (when given) counts each clamp.
int64_t saturatingAdd(int64_t a, int64_t b, int64_t* clamped = nullptr);
int64_t saturatingSub(int64_t a, int64_t b, int64_t* clamped = nullptr);

template <typename T, typename Body>
Result<T> SqliteTraceReader::inReadTransaction(Body&& body) {
  MOEWB_RETURN_IF_ERROR(m_db.exec("BEGIN"));
  Result<T> result = body();
  const Status ended = m_db.exec(result.isOk() ? "COMMIT" : "ROLLBACK");
  if (result.isOk() && !ended.isOk()) return ended;
  return result;
}

}  // namespace moewb::storage::detail
