// BulkTraceReader: batched, join-free whole-table reads for loading a trace (see
// moewb/storage/trace_bulk_reader.h).
#include "moewb/storage/trace_bulk_reader.h"

#include <algorithm>
#include <functional>
#include <vector>
#include <unordered_map>

#include "sqlite_trace_reader.h"
#include "sqlite_util.h"
#include "trace_open.h"

namespace moewb::storage {

namespace {

// Slices in start order with their string ids (slice_start_idx gives the order, no sort).
constexpr const char* kSliceIdsSql =
    "SELECT id, track, start_ns, dur_ns, name, category, step, layer, correlation_id, depth "
    "FROM slice ORDER BY start_ns, id";
// Expert loads of a step range; (step, layer) is the index order, so there is no sort.
constexpr const char* kExpertLoadRangeSql =
    "SELECT step, layer, expert, rank, tokens, dropped, bias FROM expert_load "
    "WHERE step >= ?1 AND step <= ?2 ORDER BY step, layer";
// The same rows in rowid order: a scan of the table, no index (NOT INDEXED keeps the planner off
// expert_load_step_layer_idx, whose walk looks every row up by rowid).
constexpr const char* kExpertLoadScanSql =
    "SELECT step, layer, expert, rank, tokens, dropped, bias FROM expert_load NOT INDEXED "
    "WHERE step >= ?1 AND step <= ?2";
constexpr const char* kStringSql = "SELECT text FROM string WHERE id = ?1";
constexpr const char* kMaxSliceIdSql = "SELECT coalesce(max(id), 0) FROM slice";

void readExpertLoad(const detail::Statement& q, ExpertLoadRow& row) {
  row = detail::expertLoadFromColumns(q);
}

// Steps a bound `query` to its end, reading each row with readRow(query, row) into batches of
// rowsPerBatch rows handed to `visit` (the last one possibly shorter); visit returning false
// stops early. The query is reset at the end, error or not (forEachRow). This is the hot path of
// loading a trace: forEachRow is a template, so the loop below compiles to the same step / read
// loop as a hand-written one, with no call through a std::function and no allocation per row
// (rows are read in place into the batch, whose capacity is reused).
template <typename Row, typename ReadRow>
Status visitInBatches(detail::Statement& query, size_t rowsPerBatch, const ReadRow& readRow,
                      const std::function<bool(std::vector<Row>&)>& visit) {
  const size_t per = std::max<size_t>(1, rowsPerBatch);
  std::vector<Row> batch;
  batch.reserve(std::min<size_t>(per, 1 << 16));
  bool more = true;
  MOEWB_RETURN_IF_ERROR(detail::forEachRow(query, [&](const detail::Statement& q) {
    readRow(q, batch.emplace_back());
    if (batch.size() < per) return true;
    more = visit(batch);
    batch.clear();
    return more;
  }));
  if (more && !batch.empty()) visit(batch);
  return Status::ok();
}

}  // namespace

struct BulkTraceReader::State {
  detail::Database db;
  detail::Statement slices;       // kSliceIdsSql, prepared on first use
  detail::Statement expertLoads;  // kExpertLoadRangeSql
  detail::Statement expertScan;   // kExpertLoadScanSql
  detail::Statement string;       // kStringSql
  std::unordered_map<int64_t, std::string> strings;  // stringText's cache
};

BulkTraceReader::BulkTraceReader(std::unique_ptr<State> state) : m_state(std::move(state)) {}

BulkTraceReader::~BulkTraceReader() = default;

Result<std::unique_ptr<BulkTraceReader>> BulkTraceReader::open(const std::string& path,
                                                               const ReaderOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(detail::UntrustedTrace trace,
                         detail::openUntrustedTrace(path, options.queryTimeLimit));
  auto state = std::make_unique<State>();
  state->db = std::move(trace.db);
  return std::unique_ptr<BulkTraceReader>(new BulkTraceReader(std::move(state)));
}

Result<std::string> BulkTraceReader::stringText(int64_t id) {
  if (auto it = m_state->strings.find(id); it != m_state->strings.end()) return it->second;
  detail::Statement& query = m_state->string;
  if (!query.isPrepared()) {
    MOEWB_ASSIGN_OR_RETURN(query, detail::Statement::prepare(m_state->db, kStringSql));
  }
  MOEWB_RETURN_IF_ERROR(query.bindInt(1, id));
  MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> found,
                         detail::firstRow(query, detail::column0Text));
  std::string text = found.value_or(std::string());
  m_state->strings.emplace(id, text);
  return text;
}

Status BulkTraceReader::forEachSliceBatch(
    size_t rowsPerBatch, const std::function<bool(std::vector<SliceIdRow>&)>& visit) {
  detail::Statement& query = m_state->slices;
  if (!query.isPrepared()) {
    MOEWB_ASSIGN_OR_RETURN(query, detail::Statement::prepare(m_state->db, kSliceIdsSql));
  }
  return visitInBatches<SliceIdRow>(
      query, rowsPerBatch,
      [](const detail::Statement& q, SliceIdRow& row) {
        row.id = q.columnInt(0);
        row.track = q.columnInt(1);
        row.startNs = q.columnInt(2);
        row.durNs = q.columnInt(3);
        row.nameId = q.columnInt(4);
        row.categoryId = q.columnInt(5);
        row.step = q.columnInt(6);
        row.layer = q.columnInt32(7);
        row.correlationId = q.columnInt(8);
        row.depth = q.columnInt32(9);
      },
      visit);
}

Status BulkTraceReader::forEachExpertLoadBatch(
    int64_t fromStep, int64_t toStep, size_t rowsPerBatch,
    const std::function<bool(std::vector<ExpertLoadRow>&)>& visit) {
  detail::Statement& query = m_state->expertLoads;
  if (!query.isPrepared()) {
    MOEWB_ASSIGN_OR_RETURN(query, detail::Statement::prepare(m_state->db, kExpertLoadRangeSql));
  }
  MOEWB_RETURN_IF_ERROR(query.bindAll(fromStep, toStep));
  return visitInBatches<ExpertLoadRow>(query, rowsPerBatch, readExpertLoad, visit);
}

Status BulkTraceReader::forEachExpertLoadInFileOrder(
    int64_t fromStep, int64_t toStep, size_t rowsPerBatch,
    const std::function<bool(std::vector<ExpertLoadRow>&)>& visit) {
  detail::Statement& query = m_state->expertScan;
  if (!query.isPrepared()) {
    MOEWB_ASSIGN_OR_RETURN(query, detail::Statement::prepare(m_state->db, kExpertLoadScanSql));
  }
  MOEWB_RETURN_IF_ERROR(query.bindAll(fromStep, toStep));
  return visitInBatches<ExpertLoadRow>(query, rowsPerBatch, readExpertLoad, visit);
}

Result<int64_t> BulkTraceReader::maxSliceId() {
  MOEWB_ASSIGN_OR_RETURN(const std::optional<int64_t> found,
                         detail::queryFirstRow(m_state->db, kMaxSliceIdSql, detail::column0Int));
  return found.value_or(0);
}

}  // namespace moewb::storage
