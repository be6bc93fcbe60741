// SqliteTraceWriter: the TraceWriter implementation (see moewb/storage/trace_writer.h).
//
// Threads: callers only build a WriteOp and push it on a WriterQueue (ids come from atomics, so
// no call waits for the database). One writer thread owns the SQLite connection: it drains the
// queue in batches, interns strings through an in-memory cache, inserts rows with prepared
// statements (slices by multi-row INSERTs of up to 64 rows) inside one open transaction and
// commits on a step row, on flush() and every maxBatchRows rows. After the first failed SQLite
// call the transaction is rolled back, the error is kept for flush()/close() and every later
// row is dropped and counted.
// Costs: add* O(1) plus a row copy; a commit is one WAL append + (synchronous=NORMAL) no fsync.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "moewb/storage/trace_writer.h"
#include "sqlite_util.h"
#include "writer_queue.h"

namespace moewb::storage::detail {

class SqliteTraceWriter final : public TraceWriter {
 public:
  // See TraceWriter::create.
  static Result<std::unique_ptr<SqliteTraceWriter>> create(const std::string& path,
                                                           const WriterOptions& options);
  ~SqliteTraceWriter() override;

  RunId addRun(const RunRow& run) override;
  void finishRun(RunId run, const std::string& status, const std::string& message,
                 int64_t endNs) override;
  TrackId addTrack(const TrackRow& track) override;
  void addSlice(const SliceRow& slice) override;
  void addCounter(const CounterRow& counter) override;
  void addMemoryEvent(const MemoryEventRow& event) override;
  void addExpertLoad(const ExpertLoadRow& load) override;
  void addA2aTraffic(const A2aTrafficRow& traffic) override;
  void addCollective(const CollectiveRow& collective) override;
  void addConfigChange(RunId run, const ConfigChangeRow& change) override;
  void addGpuKernel(const SliceRow& slice, const GpuKernelRow& kernel) override;
  void addGpuMemcpy(const SliceRow& slice, const GpuMemcpyRow& memcpy) override;
  void addGpuMemset(const SliceRow& slice, const GpuMemsetRow& memset) override;
  void addGpuSync(const SliceRow& slice, const GpuSyncRow& sync) override;
  void addCudaApi(const SliceRow& slice, const CudaApiRow& call) override;
  void addGpuMemory(const GpuMemoryRow& memory) override;
  void addSwapPlan(RunId run, const SwapPlanRow& plan) override;
  void addSwapEvent(RunId run, const SwapEventRow& event) override;
  void addSwapStep(RunId run, const SwapStepRow& step) override;
  void addStat(const StatRow& stat) override;
  void addStep(const StepRow& step) override;
  void setMeta(const std::string& key, const std::string& value) override;
  Status health() const override { return currentError(); }
  int64_t committedSteps() const override { return m_committedSteps.load(); }
  void addBackPressureWait(int64_t ns) override;
  Status flush() override;
  Status close() override;
  const std::string& path() const override { return m_path; }

  // Blocks until the writer thread has applied every op queued so far, WITHOUT committing them
  // (tests use it to look at an open transaction from a reader). Any thread.
  void waitApplied();
  // Rows dropped after a write error or because they were added after close(). Any thread.
  int64_t droppedRows() const { return m_droppedRows.load(); }

 private:
  // Slices are inserted kSliceBatchRows at a time by one multi-row INSERT (a statement
  // execution costs about as much as a few rows); the buffered slices (their column values,
  // strings already interned) are flushed before any other op, a sync op or a commit, so rows
  // still reach the database in the order they were added.
  static constexpr int kSliceColumns = 9;
  static constexpr int kSliceStatements = 6;  // multi-row statements for 2, 4, .. 64 rows
  static constexpr int kSliceBatchRows = 2 << (kSliceStatements - 1);

  struct Statements {
    Statement insertRun, finishRun, insertTrack, insertSlice, insertCounter, insertMemoryEvent,
        insertExpertLoad,
        insertA2aTraffic, insertCollective,
        insertConfigChange, upsertStat, upsertStep, upsertMeta, insertString, begin, commit,
        rollback;
    // GPU activity details (sqlite_trace_writer_gpu.cpp).
    Statement insertGpuKernel, insertGpuMemcpy, insertGpuMemset, insertGpuSync, insertCudaApi,
        insertGpuMemory;
    // Swap rows (sqlite_trace_writer_swap.cpp).
    Statement insertSwapPlan, insertSwapPlanLayer, insertSwapPlanTensor, insertSwapEvent,
        upsertSwapStep;
    // insertSlices[k] inserts 2^(k+1) slices (2 .. kSliceBatchRows); one slice: insertSlice.
    Statement insertSlices[kSliceStatements];
  };

  SqliteTraceWriter(std::string path, WriterOptions options);
  Status openAndInitialize();
  Status prepareStatements();
  template <typename T>
  void push(T&& op) {
    if (!m_queue.push(std::forward<T>(op))) m_droppedRows.fetch_add(1);
  }

  // Writer thread.
  void writerLoop();
  void applyOp(WriteOp& op);
  Status applyRow(const RunRow& row);
  Status applyRow(const FinishRunOp& op);
  Status applyRow(const TrackRow& row);
  Status applyRow(const SliceRow& row);
  Status applyRow(const CounterRow& row);
  Status applyRow(const MemoryEventRow& row);
  Status applyRow(const ExpertLoadRow& row);
  Status applyRow(const A2aTrafficRow& row);
  Status applyRow(const CollectiveRow& row);
  Status applyRow(const ConfigChangeOp& op);
  Status applyRow(const StatRow& row);
  Status applyRow(const StepRow& row);
  Status applyRow(const MetaOp& op);
  Status applyRow(const SyncOp& op);
  Status applyRow(const GpuActivityOp& op);
  Status applyRow(const GpuMemoryRow& row);
  Status prepareGpuStatements();
  Status applyRow(const SwapEventOp& op);
  Status applyRow(const SwapPlanOp& op);
  Status applyRow(const SwapStepOp& op);
  Status prepareSwapStatements();
  // Inserts one slice at once (not buffered) and returns its id.
  Result<int64_t> insertSliceNow(const SliceRow& row);
  Status applyDetail(int64_t sliceId, const GpuKernelRow& row);
  Status applyDetail(int64_t sliceId, const GpuMemcpyRow& row);
  Status applyDetail(int64_t sliceId, const GpuMemsetRow& row);
  Status applyDetail(int64_t sliceId, const GpuSyncRow& row);
  Status applyDetail(int64_t sliceId, const CudaApiRow& row);
  template <typename T>
  Status applyRow(const std::unique_ptr<T>& boxed) {
    return applyRow(*boxed);
  }
  Result<int64_t> internString(const std::string& text);
  Status insertSliceValues(Statement& statement, const int64_t* values, int rows);
  Status flushSlices();
  Status beginIfNeeded();
  Status commit();
  void fail(const Status& status);

  // Writer thread: folds the step rows of the transaction just committed into the per-rank
  // committed steps and updates m_committedSteps.
  void noteCommittedSteps();
  // Writer thread, inside the open transaction: the heartbeat meta row and, when they changed,
  // the back-pressure stats rows.
  Status writeHeartbeatAndWaits();

  void recordError(const Status& status);
  Status currentError() const;
  Status checkpointAndCloseDatabase();

  const std::string m_path;
  const WriterOptions m_options;
  Database m_db;  // declared before m_stmts: statements are finalized first
  Statements m_stmts;
  WriterQueue m_queue;
  std::thread m_thread;

  std::atomic<int64_t> m_nextRunId{1};
  std::atomic<int64_t> m_nextTrackId{1};
  std::atomic<int64_t> m_droppedRows{0};
  std::atomic<int64_t> m_committedSteps{0};
  std::atomic<int64_t> m_upstreamWaits{0};
  std::atomic<int64_t> m_upstreamWaitNs{0};

  // Owned by the writer thread.
  int64_t m_sliceValues[kSliceBatchRows * kSliceColumns] = {};
  int m_bufferedSlices = 0;
  std::unordered_map<std::string, int64_t> m_stringIds;
  bool m_inTransaction = false;
  bool m_failed = false;
  int64_t m_pendingRows = 0;    // rows in the open transaction
  int64_t m_maxSliceDurNs = 0;  // longest slice so far, mirrored into meta on commit
  bool m_maxSliceDurDirty = false;
  int64_t m_maxSwapDurNs = -1;  // longest swap copy so far (-1: none), mirrored into meta
  bool m_maxSwapDurDirty = false;
  std::map<int32_t, int64_t> m_rankNextStep;     // rank with a track -> last committed step + 1
  std::map<int32_t, int64_t> m_pendingNextStep;  // the same for the open transaction's step rows
  int64_t m_waitsWritten = 0;                    // back-pressure waits in the stats rows

  mutable std::mutex m_errorMutex;
  Status m_firstError;  // guarded by m_errorMutex

  std::mutex m_closeMutex;
  bool m_closed = false;  // guarded by m_closeMutex
};

}  // namespace moewb::storage::detail
