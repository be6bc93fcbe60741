// TraceDocument: one open trace file and everything the views show about it.
//
// beginOpen() loads a file on a worker thread (trace_loader.h) and returns at once: the worker
// opens the file and streams the first run's steps, the expert loads, every host slice and the
// tracks in bounded chunks; the GUI thread applies them every kDrainIntervalMs, at most
// kDrainBudgetMs at a time (emitting opening() once the file proved readable, then refreshed() at
// most every kRefreshIntervalMs, less often when the views' redraws are slow, and loadProgress()
// as the data grows, and opened() when everything is in; the timeline's per-level summary comes
// with the header from the trace's sidecar or after the slices), so the views fill in while the
// user can still act; cancelLoad() stops it and closes the document. open() does the same load
// synchronously. No load holds a whole table in flight: peak memory is what the models keep plus
// a few chunks. GPU capture slices (tracks of kind stream and
// cuda_api) are not loaded: the timeline asks for the stream lanes of its window (gpuLanes,
// downsampled by the reader), and selectGpuSlice fills the GPU details model from the file. Those
// per-window reads (GPU lanes, memory series) run on a WindowQueryWorker with its own connection:
// requestWindow asks, windowAnswered answers on the GUI thread. refresh() reads only what is new
// since the last load, for a trace that a run is still writing (WAL): steps after the last step
// held, slices from the end of the last committed step on (duplicates are skipped) and expert loads
// of newly committed steps and the memory counters up to the last committed step; the models grow
// with insert signals, so views keep their state. A refresh costs O(new rows) plus the reader's
// indexed queries. Errors come back as Status (the reader's message names the file) and through
// failed() (in plain words: userMessage); the document is left as it was. GUI thread only (the
// worker's reader becomes this thread's once the load has finished).
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "moewb/base/status.h"
#include "moewb/gui/config_change_model.h"
#include "moewb/gui/expert_load_model.h"
#include "moewb/gui/gpu_details_model.h"
#include "moewb/gui/phase_summary_model.h"
#include "moewb/gui/step_table_model.h"
#include "moewb/gui/timeline_data.h"
#include "moewb/gui/trace_loader.h"
#include "moewb/gui/window_query_worker.h"
#include "moewb/storage/trace_reader.h"

class QTimer;

namespace moewb::gui {

// The engine's memory account of one step (counters "memory.<category>_bytes", one sample each
// per step, stamped at the step end). A category the trace has no sample for is NaN.
struct MemorySample {
  enum Category { kWeights, kGrads, kOptimizer, kActivations, kCategoryCount };
  int32_t rank = 0;  // the rank of the counter's track
  int64_t step = 0;
  double bytes[kCategoryCount];  // indexed by Category
  MemorySample();
  // "weights", "grads", "optimizer", "activations".
  static const char* categoryName(int category);
  // The category of counter `name` ("memory.grads_bytes" -> kGrads), or -1.
  static int categoryOf(const std::string& name);
};

class TraceDocument : public QObject {
  Q_OBJECT

 public:
  explicit TraceDocument(QObject* parent = nullptr);
  ~TraceDocument() override;

  // How often the GUI thread takes the worker's chunks while a load runs.
  static constexpr int kDrainIntervalMs = 40;
  // GUI-thread time one drain may spend applying chunks before it lets other events run.
  static constexpr int kDrainBudgetMs = 12;
  // While a load runs, refreshed() comes at most this often (the views redraw on it), and less
  // often when the views' redraw is slow: the next one waits 3x what the last one cost them
  // (about a quarter of the GUI thread), up to kMaxRefreshIntervalMs.
  static constexpr int kRefreshIntervalMs = 150;
  static constexpr int kMaxRefreshIntervalMs = 1000;

  // Opens `path` and loads it before returning (a running load is cancelled first). Errors: the
  // reader's Status (not found, not a trace, corrupt, newer schema), which leaves the current
  // document as it was, or a failed query, which leaves the document closed; failed() is emitted
  // for both.
  Status open(const QString& path);
  // Starts loading `path` on a worker thread and returns at once (a running load is cancelled
  // first). The current document stays until the file proved to be a readable trace: then it is
  // replaced (opening()), the data streams in (refreshed(), loadProgress()) and opened() ends
  // the load. Errors as for open(), reported through failed() and lastLoadStatus().
  void beginOpen(const QString& path);
  // Stops a running load: the worker ends at its next row, the file is closed and every model
  // emptied; emits loadCanceled(). No-op when no load runs.
  void cancelLoad();
  // Whether a load started by beginOpen() is running.
  bool isLoading() const { return m_channel != nullptr; }
  // The outcome of the last open()/beginOpen() (ok while one runs); kCancelled after a cancel.
  const Status& lastLoadStatus() const { return m_loadStatus; }
  // Chunk sizes and the test hook of later loads.
  void setLoadOptions(const TraceLoadOptions& options) { m_loadOptions = options; }
  // Closes the file and empties every model (a running load is cancelled, without
  // loadCanceled()).
  void close();
  // Loads what was committed since the last open/refresh. No-op when nothing is open or while a
  // load runs.
  Status refresh();

  // True from opening() on, also while the data still streams in.
  bool isOpen() const { return !m_path.isEmpty(); }
  QString path() const { return m_path; }
  // The run shown (the first run of the file), if the file has one.
  const std::optional<storage::RunRow>& run() const { return m_run; }
  // Time span of all slices loaded so far; while a load runs, also that of the whole file (so a
  // view fitted to it keeps its scale while the slices stream in).
  TimeRange timeBounds() const;
  // Data-quality counters of the file (`stats` table) as of the last open/refresh.
  const std::vector<storage::StatRow>& stats() const { return m_stats; }
  // The file's meta table as of the last open/refresh (the writer's heartbeat among it:
  // storage/run_liveness.h).
  const std::map<std::string, std::string>& meta() const { return m_meta; }

  StepTableModel* stepModel() { return &m_steps; }
  ExpertLoadModel* expertLoadModel() { return &m_expertLoad; }
  PhaseSummaryModel* phaseSummaryModel() { return &m_phases; }
  // The trace's config_change rows (live setting changes), in step and time order.
  ConfigChangeModel* configChangeModel() { return &m_configChanges; }
  const TimelineData& timeline() const { return m_timeline; }
  // Tracks of kind "memory" (a rank's device memory, CUDA runs), in id order; empty otherwise.
  const std::vector<storage::TrackRow>& memoryTracks() const { return m_memoryTracks; }
  // The device-memory series of every memory track over `window`, downsampled to `buckets`
  // (see storage::TraceReader::memorySeries; the timeline asks for one bucket per pixel).
  // Reads the file (indexed, O(events in the window)); empty when nothing is open.
  Result<std::vector<storage::MemorySeries>> memorySeries(TimeRange window, int buckets);
  // The GPU lanes' tracks: per rank its CUDA API threads ("cuda_api"), then its CUDA streams
  // ("stream"), each by id (the order of gpuLanes); empty for traces without GPU capture.
  const std::vector<storage::TrackRow>& gpuLaneTracks() const { return m_gpuLaneTracks; }
  // The API and stream lanes over `window` with `buckets` buckets (storage::TraceReader::
  // gpuLanes; the timeline asks for one bucket per pixel). Empty when nothing is open or there
  // are no GPU tracks.
  Result<std::vector<storage::GpuLane>> gpuLanes(TimeRange window, int buckets);
  // Asks the window-query worker (window_query_worker.h) for the GPU lanes and memory series of
  // `window` with `buckets` buckets, read off the GUI thread; windowAnswered() brings the answer
  // (a newer request replaces one not started yet). Returns the request's ticket (increasing), or
  // 0 when there is nothing to read (nothing open, no GPU or memory tracks, a load running).
  uint64_t requestWindow(TimeRange window, int buckets);
  // Whether a requestWindow answer is still to come.
  bool windowQueryPending() const;
  // Fills gpuDetailsModel() with GPU slice `slice`'s details and the expert load of its step and
  // layer; clears it when the slice is not GPU work. Errors: read errors (the model is cleared).
  Status selectGpuSlice(SliceId slice);
  // The details of the GPU slice last selected with selectGpuSlice.
  GpuDetailsModel* gpuDetailsModel() { return &m_gpuDetails; }
  // Memory account per rank and step, in (rank, step) order; empty for traces without memory
  // counters. Samples are mapped to the step row whose [start, end] holds their timestamp (by
  // order of arrival when the run has no step rows) and to their counter track's rank; the
  // first sample of a (rank, step, category) is kept.
  const std::vector<MemorySample>& memory() const { return m_memory; }
  // Changes whenever memory() changes (views skip rebuilding their series otherwise).
  uint64_t memoryRevision() const { return m_memoryRevision; }

 signals:
  // A load reached the point where the file is known to be a readable trace: the previous
  // document was closed and `path` is the document now; its data streams in.
  void opening(const QString& path);
  // Fraction of a running load done (0..1); reaches 1 just before opened().
  void loadProgress(double fraction);
  // A running load was cancelled; the document is closed.
  void loadCanceled(const QString& path);
  // A file was opened and loaded completely.
  void opened(const QString& path);
  // A refresh added data (the counts may all be 0 when only the run status or the config changes
  // changed; configChangeModel() signals its own inserts).
  void refreshed(int newSteps, int newSlices, int newExpertLoads);
  void closed();
  // An open or refresh failed; `message` names the file and the problem.
  void failed(const QString& message);
  // The answer to requestWindow (GUI thread; `answer` is valid during the call only).
  void windowAnswered(const moewb::gui::WindowAnswer& answer);

 private:
  Status loadNewSlices(int64_t fromNs);
  Status loadNewSteps(int* added);
  Status loadNewExpertLoads(int* added);
  Status loadConfigChanges(int* added);
  Status loadNewMemory(int* added);
  Status loadRunInfo();
  Status fail(const Status& status);
  // Applying what a load read (GUI thread).
  void applyRunInfo(TraceHeader& header);
  void applyHeader(std::unique_ptr<TraceHeader> header, const QString& path);
  void applyChunk(TraceChunk&& chunk, const QString& path);
  int applySlices(std::vector<storage::SliceRow>& rows);
  // Adds a load chunk's slices (and its new names) to the timeline and the phase summary.
  int applyLoadedSlices(TraceChunk& chunk);
  int applyMemory(const std::vector<storage::CounterRow>& rows);
  // Takes the worker's chunks; ends the load when the worker is done.
  void drainLoad();
  // Joins the worker thread and drops the channel.
  void stopWorker();
  // Starts the window-query worker for the open file (requestWindow, on first use).
  void startWindowWorker();

  std::unique_ptr<storage::TraceReader> m_reader;  // null while a load runs
  std::unique_ptr<WindowQueryWorker> m_windowWorker;  // set while a file with lanes is open
  uint64_t m_windowTicket = 0;                        // last requestWindow ticket
  uint64_t m_windowAnswered = 0;                      // last ticket answered
  QString m_path;
  std::unique_ptr<TraceLoadChannel> m_channel;  // set while beginOpen's load runs
  std::thread m_worker;
  QTimer* m_drainTimer = nullptr;
  QString m_loadingPath;       // the file beginOpen is loading
  bool m_loadingHeld = false;  // its header was applied (the document is that file now)
  TimeRange m_fileBounds;      // the loading file's slice span (reader timeBounds)
  TraceLoadOptions m_loadOptions;
  Status m_loadStatus;
  QElapsedTimer m_sinceRefresh;  // since the last refreshed() of the running load
  int m_refreshIntervalMs = kRefreshIntervalMs;  // the running load's current interval
  int m_pendingSteps = 0;        // rows applied since then
  int m_pendingSlices = 0;
  int m_pendingLoads = 0;
  std::optional<storage::RunRow> m_run;
  std::vector<storage::StatRow> m_stats;
  std::map<std::string, std::string> m_meta;
  std::vector<storage::TrackRow> m_memoryTracks;
  std::vector<storage::TrackRow> m_gpuLaneTracks;
  std::vector<TrackId> m_hostTracks;  // tracks whose slices are loaded (not stream / cuda_api)
  bool m_hasGpuTracks = false;        // the file has stream or cuda_api tracks
  GpuDetailsModel m_gpuDetails;
  StepTableModel m_steps;
  ExpertLoadModel m_expertLoad;
  PhaseSummaryModel m_phases;
  ConfigChangeModel m_configChanges;
  TimelineData m_timeline;
  int64_t m_stepsEndNs = 0;       // latest end of a committed step held, ns
  int64_t m_lastExpertStep = -1;  // highest step whose expert loads are held
  int m_lastNewSlices = 0;        // slices added by the last loadNewSlices
  std::vector<std::string> m_loadNames;  // the running load's names, by name index
  std::vector<int32_t> m_loadNameIds;    // their timeline name ids, by name index
  std::vector<MemorySample> m_memory;
  std::map<int64_t, int32_t> m_trackRanks;  // track id -> rank, for the memory samples
  uint64_t m_memoryRevision = 0;
  int64_t m_memoryCursorNs;                                    // counters before this time are held
  int64_t m_memoryByOrder[MemorySample::kCategoryCount] = {};  // samples seen, without steps
};

}  // namespace moewb::gui
