// TraceWriter: creates a trace file (SQLite, schema v1, WAL mode) and appends rows to it from a
// background writer thread, so the engine's hot path only copies a row into a queue.
//
// Ordering and durability: rows are written in the order they were added. Rows accumulate in one
// open transaction that is committed when a step completes (addStep), when flush() is called, or
// when the pending batch gets large; so after a crash the file holds every step committed before
// it, and a reader (WAL) sees each step as soon as it is committed. Ids (RunId, TrackId) are
// assigned on the calling thread without waiting for the database.
// Thread-safety: all add* methods may be called from any thread.
// Errors: a failed SQLite write is remembered and returned by flush()/close(); the open
// transaction (rows since the last commit) is rolled back and later rows are dropped and counted.
// Rows added after close() are dropped too.
// Back-pressure: at most WriterOptions::maxQueuedOps rows wait for the writer thread; an add*
// call beyond that blocks until the writer catches up, so the file never falls more than that far
// behind the run. The waits (count, total ms) go into the stats rows trace_writer_waits and
// trace_writer_wait_ms (written once there was a wait).
// Liveness: every commit, and every kHeartbeatPeriodMs while nothing is added, sets the meta key
// heartbeat_unix_ms to the wall clock, so a reader can tell a run whose writer is alive from one
// whose process died (storage/run_liveness.h).
#pragma once

#include <memory>
#include <string>

#include "moewb/base/status.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/swap_queries.h"

namespace moewb::storage {

struct WriterOptions {
  bool overwrite = false;         // replace an existing file at path
  int64_t maxBatchRows = 50'000;  // commit early when this many rows are pending
  int64_t maxQueuedOps = 4'096;   // rows (ops) queued for the writer thread before add* waits
};

class TraceWriter {
 public:
  // Creates `path` (and its parent directory) with the schema and meta rows. Errors:
  // kAlreadyExists if the file exists and !options.overwrite; kInternal naming the file and
  // SQLite's message if it cannot be created.
  static Result<std::unique_ptr<TraceWriter>> create(const std::string& path,
                                                     const WriterOptions& options = {});
  virtual ~TraceWriter() = default;

  // Queues a run row (status "running"); returns its id.
  virtual RunId addRun(const RunRow& run) = 0;
  // Marks the run finished: status, message and end time.
  virtual void finishRun(RunId run, const std::string& status, const std::string& message,
                         int64_t endNs) = 0;
  // Queues a track; returns its id.
  virtual TrackId addTrack(const TrackRow& track) = 0;
  virtual void addSlice(const SliceRow& slice) = 0;
  virtual void addCounter(const CounterRow& counter) = 0;
  // Queues one device-memory allocation or free (memory_event table); as cheap as addSlice.
  virtual void addMemoryEvent(const MemoryEventRow& event) = 0;
  virtual void addExpertLoad(const ExpertLoadRow& load) = 0;
  // Queues one cell of an EP all-to-all traffic matrix (a2a_traffic table).
  virtual void addA2aTraffic(const A2aTrafficRow& traffic) = 0;
  // Queues the details of one collective (collective table); its slice is added separately.
  virtual void addCollective(const CollectiveRow& collective) = 0;
  virtual void addConfigChange(RunId run, const ConfigChangeRow& change) = 0;
  // GPU activity (see gpu_rows.h): the slice and its detail row are written together; the
  // detail row is keyed by the slice's id. The slice's category should be the matching
  // kCategory* constant.
  virtual void addGpuKernel(const SliceRow& slice, const GpuKernelRow& kernel) = 0;
  virtual void addGpuMemcpy(const SliceRow& slice, const GpuMemcpyRow& memcpy) = 0;
  virtual void addGpuMemset(const SliceRow& slice, const GpuMemsetRow& memset) = 0;
  virtual void addGpuSync(const SliceRow& slice, const GpuSyncRow& sync) = 0;
  virtual void addCudaApi(const SliceRow& slice, const CudaApiRow& call) = 0;
  // Queues one device memory allocation or free (gpu_memory table).
  virtual void addGpuMemory(const GpuMemoryRow& memory) = 0;
  // Swap (tables swap_plan, swap_plan_layer, swap_plan_tensor, swap_event, swap_step; row types
  // in swap_queries.h), each row of run `run`; the rows' id fields are ignored (the file assigns
  // them). addSwapPlan writes the plan with its per-layer profile (layerForwardMs,
  // layerBackwardMs, layerOtherBytes and layerRecomputeMs: one swap_plan_layer row per index of
  // the longest, 0 where a shorter one ends; layerRecomputeMs only with a recomputeMsSource,
  // else stored as unknown) and its tensors (one swap_plan_tensor row each, idx = position);
  // addSwapEvent one copy; addSwapStep a step's watermarks (same run, step and rank replace the
  // earlier row). As cheap as addSlice for events; plans cost a row copy of their vectors.
  virtual void addSwapPlan(RunId run, const SwapPlanRow& plan) = 0;
  virtual void addSwapEvent(RunId run, const SwapEventRow& event) = 0;
  virtual void addSwapStep(RunId run, const SwapStepRow& step) = 0;
  // Upserts a stats row (same name replaces the value).
  virtual void addStat(const StatRow& stat) = 0;
  // Queues the step row and commits the transaction with everything queued before it.
  virtual void addStep(const StepRow& step) = 0;
  // Sets a meta key (e.g. "host", "gpu").
  virtual void setMeta(const std::string& key, const std::string& value) = 0;

  // Blocks until everything queued so far is committed. Returns the first write error, if any.
  virtual Status flush() = 0;
  // Without waiting: the first write error the writer thread has met so far (a full disk, a
  // removed file), ok while every write succeeded. Any thread. A run checks it at every step
  // boundary so that it stops within a step of the error instead of training on.
  virtual Status health() const { return Status::ok(); }
  // Steps that are durable in the file: the smallest, over the ranks that have a track in it,
  // of (that rank's last committed step + 1); 0 before every such rank has committed a step.
  // The progress line of `moewb run` prints it. Any thread, without waiting.
  virtual int64_t committedSteps() const { return 0; }
  // Records that a producer upstream of this writer (a tracer's helper thread with a full
  // queue of its own) waited `ns` for the writer to catch up; counted with the writer's own
  // queue waits in trace_writer_waits / trace_writer_wait_ms. Any thread.
  virtual void addBackPressureWait(int64_t ns) { (void)ns; }

  // Flushes, checkpoints the WAL into the main file, switches the file to journal_mode=DELETE
  // (no -wal/-shm left beside it; skipped, keeping WAL mode, while another connection such as a
  // live reader has it open) and stops the writer thread. Idempotent.
  virtual Status close() = 0;

  // The file path this writer writes.
  virtual const std::string& path() const = 0;
};

}  // namespace moewb::storage
