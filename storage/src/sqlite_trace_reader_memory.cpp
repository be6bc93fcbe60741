// The reader's device-memory queries: the downsampled bytes-in-use series per (track, category)
// for a time window, the whole-file totals per category, and the streaming pass over all events.
// The series query never scans outside the window: the (track, category) pairs come from a loose
// index scan (one probe per pair), the value before the window from one probe, and the window's
// events from a covering-index range read in time order, bucketed here (max per bucket).
#include <algorithm>
#include <limits>

#include "sqlite_trace_reader.h"

namespace moewb::storage::detail {

namespace {

struct SeriesKey {
  int64_t track = 0;
  int64_t categoryId = 0;
  std::string category;
};

// Accumulates the events of one bucket and emits its points (see memorySeries).
class BucketWriter {
 public:
  explicit BucketWriter(std::vector<MemoryPoint>* out) : m_out(out) {}
  void add(uint64_t bucket, int64_t tsNs, int64_t bytes) {
    if (!m_open || bucket != m_bucket) {
      flush();
      m_open = true;
      m_bucket = bucket;
      m_firstNs = m_lastNs = tsNs;
      m_peak = m_last = bytes;
      return;
    }
    m_lastNs = tsNs;
    m_peak = std::max(m_peak, bytes);
    m_last = bytes;
  }
  void flush() {
    if (!m_open) return;
    m_out->push_back({m_firstNs, m_peak});
    if (m_last != m_peak) m_out->push_back({m_lastNs, m_last});
    m_open = false;
  }

 private:
  std::vector<MemoryPoint>* m_out;
  bool m_open = false;
  uint64_t m_bucket = 0;
  int64_t m_firstNs = 0, m_lastNs = 0, m_peak = 0, m_last = 0;
};

// Every (track, category) of memory_event in (track, category id) order, with category names.
Result<std::vector<SeriesKey>> seriesKeys(Database& db) {
  MOEWB_ASSIGN_OR_RETURN(Statement next, Statement::prepare(db, kMemoryNextSeriesSql));
  MOEWB_ASSIGN_OR_RETURN(Statement name,
                         Statement::prepare(db, "SELECT text FROM string WHERE id = ?1"));
  std::vector<SeriesKey> keys;
  int64_t track = std::numeric_limits<int64_t>::min();
  int64_t category = std::numeric_limits<int64_t>::min();
  while (true) {
    MOEWB_RETURN_IF_ERROR(next.bindAll(track, category));
    MOEWB_ASSIGN_OR_RETURN(const bool hasRow, next.step());
    if (!hasRow) break;
    track = next.columnInt(0);
    category = next.columnInt(1);
    next.reset();
    MOEWB_RETURN_IF_ERROR(name.bindInt(1, category));
    MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> text, firstRow(name, column0Text));
    keys.push_back({track, category, text.value_or(std::string())});
  }
  return keys;
}

}  // namespace

Result<bool> SqliteTraceReader::hasMemoryColumns() {
  if (m_memoryColumns < 0) {
    MOEWB_ASSIGN_OR_RETURN(
        const std::optional<int64_t> columns,
        queryFirstRow(m_db,
                      "SELECT count(*) FROM pragma_table_info('memory_event') "
                      "WHERE name IN ('track', 'ts_ns', 'step', 'kind', 'bytes', 'address', "
                      "'category', 'in_use_bytes')",
                      column0Int));
    m_memoryColumns = columns == 8 ? 1 : 0;
  }
  return m_memoryColumns == 1;
}

Result<std::vector<MemorySeries>> SqliteTraceReader::memorySeries(TimeWindow window,
                                                                  int32_t buckets,
                                                                  std::optional<TrackId> track) {
  MOEWB_ASSIGN_OR_RETURN(const bool usable, hasMemoryColumns());
  if (!usable) return std::vector<MemorySeries>{};
  return inReadTransaction<std::vector<MemorySeries>>(
      [&] { return memorySeriesInSnapshot(window, std::max(buckets, 1), track); });
}

Result<std::vector<MemorySeries>> SqliteTraceReader::memorySeriesInSnapshot(
    TimeWindow window, int32_t buckets, std::optional<TrackId> track) {
  MOEWB_ASSIGN_OR_RETURN(auto keys, seriesKeys(m_db));
  if (track) {
    std::erase_if(keys, [&](const SeriesKey& k) { return k.track != track->value; });
  }
  std::stable_sort(keys.begin(), keys.end(), [](const SeriesKey& a, const SeriesKey& b) {
    return a.track != b.track ? a.track < b.track : a.category < b.category;
  });
  std::vector<MemorySeries> out;
  if (keys.empty()) return out;

  // Buckets cut the part of the window that holds events (the window may be TimeWindow::all()).
  // One probe of memory_event_ts_idx each; nullopt when there are no events.
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> firstNs,
      queryFirstRow(m_db, "SELECT min(ts_ns) FROM memory_event", column0IntOrNull));
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> lastNs,
      queryFirstRow(m_db, "SELECT max(ts_ns) FROM memory_event", column0IntOrNull));
  int64_t lo = window.startNs;
  int64_t hi = window.endNs;
  if (firstNs && *firstNs > lo) lo = *firstNs;
  if (lastNs && *lastNs < hi) hi = *lastNs + 1;  // *lastNs < hi, so no overflow
  const uint64_t span = hi > lo ? uint64_t(hi) - uint64_t(lo) : 0;
  const uint64_t width = std::max<uint64_t>((span + uint64_t(buckets) - 1) / uint64_t(buckets), 1);

  MOEWB_ASSIGN_OR_RETURN(Statement before, Statement::prepare(m_db, kMemoryBeforeWindowSql));
  MOEWB_ASSIGN_OR_RETURN(Statement inside, Statement::prepare(m_db, kMemoryInWindowSql));
  for (const SeriesKey& key : keys) {
    MemorySeries series;
    series.track = TrackId(key.track);
    series.category = key.category;
    MOEWB_RETURN_IF_ERROR(before.bindAll(key.track, key.categoryId, window.startNs));
    MOEWB_ASSIGN_OR_RETURN(const std::optional<int64_t> bytesBefore, firstRow(before, column0Int));
    if (bytesBefore) series.points.push_back({window.startNs, *bytesBefore});
    if (span > 0) {
      MOEWB_RETURN_IF_ERROR(inside.bindAll(key.track, key.categoryId, lo, hi));
      BucketWriter writer(&series.points);
      MOEWB_RETURN_IF_ERROR(forEachRow(inside, [&](const Statement& s) {
        const int64_t ts = s.columnInt(0);
        writer.add((uint64_t(ts) - uint64_t(lo)) / width, ts, s.columnInt(1));
      }));
      writer.flush();
    }
    out.push_back(std::move(series));
  }
  return out;
}

Result<std::vector<MemoryCategoryTotals>> SqliteTraceReader::memoryTotals() {
  MOEWB_ASSIGN_OR_RETURN(const bool usable, hasMemoryColumns());
  if (!usable) return std::vector<MemoryCategoryTotals>{};
  return queryRows(m_db,
                   "SELECT m.track, coalesce(s.text, ''), "
                   "sum(m.kind = 'alloc' AND m.address != 0), sum(m.kind = 'free'), "
                   "max(m.in_use_bytes) FROM memory_event m "
                   "LEFT JOIN string s ON s.id = m.category "
                   "GROUP BY m.track, m.category ORDER BY m.track, 2",
                   [](const Statement& s) {
                     MemoryCategoryTotals row;
                     row.track = TrackId(s.columnInt(0));
                     row.category = s.columnText(1);
                     row.allocations = s.columnInt(2);
                     row.frees = s.columnInt(3);
                     row.peakBytes = s.columnInt(4);
                     return row;
                   });
}

Status SqliteTraceReader::forEachMemoryEvent(
    const std::function<bool(const MemoryEventRow&)>& visit) {
  MOEWB_ASSIGN_OR_RETURN(const bool usable, hasMemoryColumns());
  if (!usable) return Status::ok();
  return queryEachRow(m_db,
                      "SELECT m.track, m.ts_ns, m.step, m.kind, m.bytes, m.address, "
                      "coalesce(s.text, ''), m.in_use_bytes FROM memory_event m "
                      "LEFT JOIN string s ON s.id = m.category ORDER BY m.ts_ns, m.id",
                      [&](const Statement& s) {
                        MemoryEventRow row;
                        row.track = TrackId(s.columnInt(0));
                        row.tsNs = s.columnInt(1);
                        row.step = s.columnInt(2);
                        row.isAllocation = s.columnText(3) != "free";
                        row.bytes = s.columnInt(4);
                        row.address = s.columnInt(5);
                        row.category = s.columnText(6);
                        row.inUseBytes = s.columnInt(7);
                        return visit(row);
                      });
}

}  // namespace moewb::storage::detail
