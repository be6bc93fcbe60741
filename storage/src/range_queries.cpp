// gpuWorkInRange: the GPU work inside a time window grouped by name (see range_queries.h).
#include "moewb/storage/range_queries.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

#include "schema.h"
#include "sqlite_trace_reader.h"
#include "sqlite_util.h"
#include "trace_file_check.h"
#include "trace_open.h"

namespace moewb::storage {

namespace {

using detail::Statement;

// ?1 = lowest start to scan (window start - longest slice), ?2 = window start, ?3 = window end.
// CROSS JOIN keeps the stream tracks outside, so each is one range of slice(track, start_ns).
// The rows are grouped in C++ (a hash map on the string ids): SQLite's GROUP BY would sort
// every row through a temporary b-tree first, about 6x slower at 1M kernels.
constexpr const char* kGpuRangeSql =
    "SELECT s.name, s.category, s.start_ns, s.dur_ns, s.id "
    "FROM track t CROSS JOIN slice s ON s.track = t.id "
    "WHERE t.kind = 'stream' AND s.start_ns >= ?1 AND s.start_ns < ?3 "
    "AND s.start_ns + s.dur_ns > ?2";

// The sums of one (name, category) pair of string ids.
struct Group {
  int64_t count = 0;
  double totalNs = 0;  // summed as double and clamped, as SQL total() would
  int64_t maxNs = -1;
  int64_t longestId = 0;
  int64_t longestStartNs = 0;
  int64_t longestDurNs = 0;
};

// The longest slice duration: the writer's meta value, else a scan of the stream tracks' slices.
Result<int64_t> longestSliceNs(detail::Database& db) {
  MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> meta,
                         detail::queryFirstRow(db, "SELECT value FROM meta WHERE key = ?1",
                                               detail::column0Text, detail::kMetaMaxSliceDurNs));
  if (meta) {
    const std::string& text = *meta;
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && ptr == text.data() + text.size() && value >= 0) return value;
  }
  MOEWB_ASSIGN_OR_RETURN(
      const std::optional<int64_t> scanned,
      detail::queryFirstRow(db, "SELECT coalesce(max(dur_ns), 0) FROM slice", detail::column0Int));
  return std::max<int64_t>(scanned.value_or(0), 0);
}

// Fills the short names of the kernel groups from their longest slice's gpu_kernel row.
Status addShortNames(detail::Database& db, std::vector<RangeNameTotal>& rows) {
  MOEWB_ASSIGN_OR_RETURN(const bool hasKernels, detail::tableExists(db, "gpu_kernel"));
  if (!hasKernels) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(
      Statement q, Statement::prepare(db,
                                      "SELECT coalesce(n.text, '') FROM gpu_kernel k LEFT JOIN "
                                      "string n ON n.id = k.short_name WHERE k.slice = ?1"));
  for (RangeNameTotal& row : rows) {
    if (row.category != "kernel") continue;
    MOEWB_RETURN_IF_ERROR(q.bindInt(1, row.longest.value));
    MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> name,
                           detail::firstRow(q, detail::column0Text));
    if (name) row.shortName = *name;
  }
  return Status::ok();
}

// The text of string id `id` ("" when missing), with `q` prepared on "SELECT text FROM string
// WHERE id = ?1".
Result<std::string> stringText(Statement& q, int64_t id) {
  MOEWB_RETURN_IF_ERROR(q.bindInt(1, id));
  MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> text,
                         detail::firstRow(q, detail::column0Text));
  return text.value_or(std::string());
}

Result<std::vector<RangeNameTotal>> queryGpuRange(detail::Database& db, TimeWindow window) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t longestNs, longestSliceNs(db));
  MOEWB_ASSIGN_OR_RETURN(Statement q, Statement::prepare(db, kGpuRangeSql));
  MOEWB_RETURN_IF_ERROR(
      q.bindAll(detail::saturatingSub(window.startNs, longestNs), window.startNs, window.endNs));
  std::map<std::pair<int64_t, int64_t>, Group> groups;  // few names: a small ordered map
  std::pair<int64_t, int64_t> lastKey{-1, -1};
  Group* last = nullptr;
  MOEWB_RETURN_IF_ERROR(detail::forEachRow(q, [&](const Statement& s) {
    const std::pair<int64_t, int64_t> key{s.columnInt(0), s.columnInt(1)};
    if (!last || key != lastKey) {
      last = &groups[key];
      lastKey = key;
    }
    const int64_t startNs = s.columnInt(2), durNs = s.columnInt(3);
    const int64_t endNs = detail::saturatingAdd(startNs, durNs);
    const int64_t clipped = std::min(endNs, window.endNs) - std::max(startNs, window.startNs);
    ++last->count;
    last->totalNs += double(clipped);
    if (clipped > last->maxNs) {
      last->maxNs = clipped;
      last->longestId = s.columnInt(4);
      last->longestStartNs = startNs;
      last->longestDurNs = durNs;
    }
  }));
  MOEWB_ASSIGN_OR_RETURN(Statement text,
                         Statement::prepare(db, "SELECT text FROM string WHERE id = ?1"));
  std::vector<RangeNameTotal> rows;
  int64_t clamped = 0;
  for (const auto& [key, g] : groups) {
    RangeNameTotal row;
    MOEWB_ASSIGN_OR_RETURN(row.name, stringText(text, key.first));
    MOEWB_ASSIGN_OR_RETURN(row.category, stringText(text, key.second));
    row.count = g.count;
    row.totalNs = detail::clampToInt64(g.totalNs, &clamped);
    row.maxNs = g.maxNs;
    row.longest = SliceId{g.longestId};
    row.longestStartNs = g.longestStartNs;
    row.longestEndNs = detail::saturatingAdd(g.longestStartNs, g.longestDurNs);
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const RangeNameTotal& a, const RangeNameTotal& b) {
    if (a.totalNs != b.totalNs) return a.totalNs > b.totalNs;
    return a.name != b.name ? a.name < b.name : a.category < b.category;
  });
  MOEWB_RETURN_IF_ERROR(addShortNames(db, rows));
  return rows;
}

}  // namespace

Result<std::vector<RangeNameTotal>> gpuWorkInRange(const std::string& path, TimeWindow window) {
  if (window.endNs <= window.startNs) return std::vector<RangeNameTotal>{};
  MOEWB_RETURN_IF_ERROR(detail::checkTraceFileHeader(path));
  MOEWB_ASSIGN_OR_RETURN(detail::UntrustedTrace trace,
                         detail::openUntrustedTrace(path, ReaderOptions{}.queryTimeLimit));
  MOEWB_RETURN_IF_ERROR(trace.db.exec("BEGIN"));
  Result<std::vector<RangeNameTotal>> rows = queryGpuRange(trace.db, window);
  const Status ended = trace.db.exec(rows.isOk() ? "COMMIT" : "ROLLBACK");
  if (rows.isOk() && !ended.isOk()) return ended;
  return rows;
}

}  // namespace moewb::storage
