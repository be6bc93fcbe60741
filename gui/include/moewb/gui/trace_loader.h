// Trace loading for TraceDocument, split so the reading can run on a worker thread.
//
// loadTrace opens a trace file and reads what the document shows, as a sequence of chunks handed to
// a sink: first a TraceHeader (run, stats, meta, tracks, steps, config changes: the small tables);
// then, read at the same time on two threads and interleaved, the host slices in start order
// (tracks of kind stream and cuda_api are left to per-window queries) and the counters in time
// ranges of steps followed by the expert loads in ranges of steps. The sink is only ever called on
// the calling thread. No chunk holds more than a bounded number of rows, so a load never has a
// whole table in flight; the sink owns each chunk and applies it (the document on the GUI thread).
// Each chunk carries the fraction of the load done, for a progress bar. Cost: one read of each
// table, O(rows) in total; memory O(rows per chunk) beyond what the sink keeps. The bulk tables
// (slices, expert loads) are read through storage::BulkTraceReader: slices without string joins
// (names go over as indexes into a list of names that grows chunk by chunk, so a slice carries no
// heap memory) and expert loads in one scan of their table in file order, without a sort.
// The timeline's per-level summary (timeline_summary.h) comes from the trace's sidecar
// ("<trace>.summary", validated against the file) in the header chunk, or is built from the
// slices as they stream (O(1) amortized per slice), its finished buckets travelling with the
// slice chunks; the load then writes the sidecar beside the trace when it can. A trace with a
// live -wal (a run writing it) gets no summary: its slices may grow past the bounds read first.
//
// TraceLoadChannel carries chunks from the worker to the GUI thread: a bounded queue (push blocks
// while it is full, so a worker never runs far ahead of the GUI), a cancel flag the worker polls
// per row, and the final result. All its methods are thread-safe.
// userMessage turns a Status into the text a dialog shows: the message alone, without the code
// name ("data loss: ...") or a source location.
#pragma once

#include <QString>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_summary.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

// The small tables of a trace, read before anything else.
struct TraceHeader {
  std::optional<storage::RunRow> run;       // the first run of the file, if any
  std::vector<storage::StatRow> stats;      // data-quality counters
  std::map<std::string, std::string> meta;  // meta table (heartbeat among it)
  std::vector<storage::TrackRow> tracks;    // every track, by id
  std::vector<storage::StepRow> steps;      // committed steps of the run, (step, rank) order
  std::vector<storage::ConfigChangeRow> configChanges;  // step and time order
  int64_t countersEndNs = 0;   // counters before this time are loaded (later chunks), ns
  storage::TimeWindow bounds;  // first slice start .. last slice end, ns
};

// One piece of a load. The header comes first; then slice chunks (in start order) interleave
// with counter chunks (in time order) and expert-load chunks (in step order, after the counters).
struct TraceChunk {
  std::unique_ptr<TraceHeader> header;        // set in the first chunk only
  std::vector<storage::CounterRow> counters;  // a time range's counters, (track, ts) order
  std::vector<storage::ExpertLoadRow> expertLoads;
  int64_t expertLoadsToStep = -1;         // expert loads of steps <= this are complete
  std::vector<LoadedSlice> slices;        // host slices, start order
  // Names first used by this chunk's slices: name index (LoadedSlice::nameIndex, categoryIndex)
  // k is the k-th name of the load, counting the newNames of every chunk so far in order.
  std::vector<std::string> newNames;
  // The timeline's per-level summary (timeline_summary.h): whole in the header chunk when read
  // from the trace's sidecar; else built as the slices stream, each slice chunk carrying the
  // buckets its slices completed and the chunk after the last slices the rest, to be appended
  // in order (appendSummary).
  std::unique_ptr<TimelineSummary> summary;
  // The parts of the summary handed over so far are not exact (a lane of the file is not in
  // start order): drop them; no more parts come.
  bool dropSummary = false;
  double progress = 0;                    // fraction of the load done after it, 0..1
};

struct TraceLoadOptions {
  // Small enough that applying one chunk on the GUI thread takes a few ms.
  size_t slicesPerChunk = 32'768;        // slices per chunk
  int64_t stepsPerExpertChunk = 512;     // steps of expert loads per chunk
  int64_t stepsPerCounterChunk = 8'192;  // steps whose time range of counters makes a chunk
  // Read the summary from "<trace>.summary" when it belongs to the file, and write it there after
  // building it (where the directory can be written and no run is writing the trace).
  bool summaryFile = true;
  // Test hook: the worker sleeps this long after handing over each slice chunk (so a test can
  // cancel a load of a small file while it is running). 0 in the application.
  std::chrono::milliseconds sliceChunkDelay{0};
};

// Reads the run info (run, stats, meta, tracks) of `reader` into `header`.
Status readRunInfo(storage::TraceReader& reader, TraceHeader* header);

// Opens `path` and reads it into `sink` (see the header comment). `sink` may return false to
// stop; `cancel` is polled per row. Returns the reader, idle, for the caller's later queries (it
// may be handed to another thread once this returns). Errors: the reader's open errors (before
// any chunk: not found, not a trace, corrupt, newer schema), read errors, kCancelled when stopped.
// Thread-safety: runs on any thread; `sink` is called on the calling thread.
Result<std::unique_ptr<storage::TraceReader>> loadTrace(
    const std::string& path, const std::function<bool(TraceChunk&&)>& sink,
    const std::atomic<bool>& cancel, const TraceLoadOptions& options = {});

class TraceLoadChannel {
 public:
  explicit TraceLoadChannel(size_t capacity = 8) : m_capacity(capacity) {}

  // Worker: queues `chunk`, waiting while `capacity` chunks wait; false (chunk dropped) once
  // cancelled.
  bool push(TraceChunk&& chunk);
  // Worker: the load ended with `result` (the reader, or why not).
  void finish(Result<std::unique_ptr<storage::TraceReader>> result);
  // GUI: the oldest chunk queued, if any; wakes a waiting worker.
  std::optional<TraceChunk> takeOne();
  // GUI: whether finish() was called and every chunk was taken.
  bool done();
  // GUI: the result given to finish() (once done()).
  Result<std::unique_ptr<storage::TraceReader>> takeResult();
  // Any thread: asks the worker to stop; push() returns false from now on.
  void cancel();
  const std::atomic<bool>& cancelFlag() const { return m_cancelled; }

 private:
  std::mutex m_mutex;
  std::condition_variable m_space;
  std::deque<TraceChunk> m_chunks;
  size_t m_capacity;
  std::atomic<bool> m_cancelled{false};
  bool m_finished = false;
  std::optional<Result<std::unique_ptr<storage::TraceReader>>> m_result;
};

// The text a user sees for `status`: its message without the status-code name and without
// bracketed debug details or source locations ("[sqlite3_step failed at x.cpp:12, ...]",
// "(x.cpp:12)"); the first letter capitalised. "" for an ok status.
QString userMessage(const Status& status);

}  // namespace moewb::gui
