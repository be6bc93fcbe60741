// The trace writer's GPU activity rows (see gpu_rows.h): the caller-side add* methods and, on the
// writer thread, the slice + detail inserts. A GPU slice is inserted on its own (not through the
// multi-row slice buffer) because its detail row needs the slice id; the buffered slices are
// flushed first (applyOp does that before every non-slice op), so rows keep their order.
// Cost per GPU row on the writer thread: two statement executions plus string interning.
#include <utility>

#include "sqlite_trace_writer.h"

namespace moewb::storage {

bool isGpuWorkCategory(const std::string& category) {
  return category == kCategoryKernel || category == kCategoryMemcpy ||
         category == kCategoryMemset;
}

bool isGpuCaptureCategory(const std::string& category) {
  return isGpuWorkCategory(category) || category == kCategorySync || category == kCategoryApi ||
         category == kCategoryNvtx;
}

namespace detail {

Status SqliteTraceWriter::prepareGpuStatements() {
  const std::pair<Statement*, const char*> statements[] = {
      {&m_stmts.insertGpuKernel,
       "INSERT INTO gpu_kernel(slice, device_id, stream_id, grid_x, grid_y, grid_z, block_x, "
       "block_y, block_z, registers_per_thread, static_shared_bytes, dynamic_shared_bytes, "
       "mangled_name, short_name, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"},
      {&m_stmts.insertGpuMemcpy,
       "INSERT INTO gpu_memcpy(slice, device_id, stream_id, copy_kind, src_kind, dst_kind, bytes, "
       "phase) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
      {&m_stmts.insertGpuMemset,
       "INSERT INTO gpu_memset(slice, device_id, stream_id, bytes, value, memory_kind, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&m_stmts.insertGpuSync,
       "INSERT INTO gpu_sync(slice, sync_type, stream_id, cuda_event_id, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5)"},
      {&m_stmts.insertCudaApi,
       "INSERT INTO cuda_api(slice, api, cbid, thread_id, return_value, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      {&m_stmts.insertGpuMemory,
       "INSERT INTO gpu_memory(track, ts_ns, kind, memory_kind, bytes, address, device_id, "
       "stream_id, correlation_id, step, layer, phase) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"},
  };
  for (const auto& [statement, sql] : statements) {
    MOEWB_ASSIGN_OR_RETURN(*statement, Statement::prepare(m_db, sql));
  }
  return Status::ok();
}

// ---- caller side -------------------------------------------------------------------------

void SqliteTraceWriter::addGpuKernel(const SliceRow& slice, const GpuKernelRow& kernel) {
  push(std::make_unique<GpuActivityOp>(GpuActivityOp{slice, kernel}));
}
void SqliteTraceWriter::addGpuMemcpy(const SliceRow& slice, const GpuMemcpyRow& memcpy) {
  push(std::make_unique<GpuActivityOp>(GpuActivityOp{slice, memcpy}));
}
void SqliteTraceWriter::addGpuMemset(const SliceRow& slice, const GpuMemsetRow& memset) {
  push(std::make_unique<GpuActivityOp>(GpuActivityOp{slice, memset}));
}
void SqliteTraceWriter::addGpuSync(const SliceRow& slice, const GpuSyncRow& sync) {
  push(std::make_unique<GpuActivityOp>(GpuActivityOp{slice, sync}));
}
void SqliteTraceWriter::addCudaApi(const SliceRow& slice, const CudaApiRow& call) {
  push(std::make_unique<GpuActivityOp>(GpuActivityOp{slice, call}));
}
void SqliteTraceWriter::addGpuMemory(const GpuMemoryRow& memory) {
  push(std::make_unique<GpuMemoryRow>(memory));
}

// ---- writer thread -----------------------------------------------------------------------

Result<int64_t> SqliteTraceWriter::insertSliceNow(const SliceRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t nameId, internString(row.name));
  MOEWB_ASSIGN_OR_RETURN(const int64_t categoryId, internString(row.category));
  const int64_t values[kSliceColumns] = {row.track.value, row.startNs,   row.durNs,
                                         nameId,          categoryId,    row.step,
                                         row.layer,       row.correlationId, row.depth};
  if (row.durNs > m_maxSliceDurNs) {
    m_maxSliceDurNs = row.durNs;
    m_maxSliceDurDirty = true;
  }
  MOEWB_RETURN_IF_ERROR(insertSliceValues(m_stmts.insertSlice, values, 1));
  return int64_t(sqlite3_last_insert_rowid(m_db.handle()));
}

Status SqliteTraceWriter::applyRow(const GpuActivityOp& op) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t sliceId, insertSliceNow(op.slice));
  return std::visit([&](const auto& row) { return applyDetail(sliceId, row); }, op.detail);
}

Status SqliteTraceWriter::applyDetail(int64_t sliceId, const GpuKernelRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t mangledId, internString(row.mangledName));
  MOEWB_ASSIGN_OR_RETURN(const int64_t shortId, internString(row.shortName));
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertGpuKernel.bindAll(
      sliceId, row.deviceId, row.streamId, row.gridX, row.gridY, row.gridZ, row.blockX, row.blockY,
      row.blockZ, row.registersPerThread, row.staticSharedBytes, row.dynamicSharedBytes, mangledId,
      shortId, phaseId));
  return m_stmts.insertGpuKernel.run();
}

Status SqliteTraceWriter::applyDetail(int64_t sliceId, const GpuMemcpyRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertGpuMemcpy.bindAll(sliceId, row.deviceId, row.streamId,
                                                        row.copyKind, row.srcKind, row.dstKind,
                                                        row.bytes, phaseId));
  return m_stmts.insertGpuMemcpy.run();
}

Status SqliteTraceWriter::applyDetail(int64_t sliceId, const GpuMemsetRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertGpuMemset.bindAll(sliceId, row.deviceId, row.streamId,
                                                        row.bytes, row.value, row.memoryKind,
                                                        phaseId));
  return m_stmts.insertGpuMemset.run();
}

Status SqliteTraceWriter::applyDetail(int64_t sliceId, const GpuSyncRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertGpuSync.bindAll(sliceId, row.syncType, row.streamId,
                                                      row.cudaEventId, phaseId));
  return m_stmts.insertGpuSync.run();
}

Status SqliteTraceWriter::applyDetail(int64_t sliceId, const CudaApiRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertCudaApi.bindAll(sliceId, row.api, row.cbid, row.threadId,
                                                      row.returnValue, phaseId));
  return m_stmts.insertCudaApi.run();
}

Status SqliteTraceWriter::applyRow(const GpuMemoryRow& row) {
  MOEWB_ASSIGN_OR_RETURN(const int64_t phaseId, internString(row.phase));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertGpuMemory.bindAll(
      row.track.value, row.tsNs, row.isAllocation ? "alloc" : "free", row.memoryKind, row.bytes,
      int64_t(row.address), row.deviceId, row.streamId, row.correlationId, row.step, row.layer,
      phaseId));
  return m_stmts.insertGpuMemory.run();
}

}  // namespace detail
}  // namespace moewb::storage
