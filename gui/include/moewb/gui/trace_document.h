// TraceDocument: one open trace file and everything the views show about it.
//
// open() opens the file with storage::TraceReader and loads the first run's steps, every host
// slice, the expert loads and the tracks into the models and the timeline store. GPU capture
// slices (tracks of kind stream and cuda_api) are not loaded: the timeline asks for the stream
// lanes of its window (gpuLanes, downsampled by the reader), and selectGpuSlice fills the GPU
// details model from the file. refresh() reads only
// what is new since the last load, for a trace that a run is still writing (WAL): steps after the
// last step held, slices from the end of the last committed step on (duplicates are skipped) and
// expert loads of newly committed steps and the memory counters up to the last committed step;
// the models grow with insert signals, so views keep their state. A refresh costs O(new rows) plus
// the reader's indexed queries. Errors come back as Status (the reader's message names the file)
// and through failed(); the document is left as it was. GUI thread only (the reader's connection
// belongs to this thread).
#pragma once

#include <QObject>
#include <QString>
#include <map>
#include <memory>
#include <optional>

#include "moewb/base/status.h"
#include "moewb/gui/config_change_model.h"
#include "moewb/gui/expert_load_model.h"
#include "moewb/gui/gpu_details_model.h"
#include "moewb/gui/phase_summary_model.h"
#include "moewb/gui/step_table_model.h"
#include "moewb/gui/timeline_data.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

// The engine's memory account of one step (counters "memory.<category>_bytes", one sample each
// per step, stamped at the step end). A category the trace has no sample for is NaN.
struct MemorySample {
  enum Category { kWeights, kGrads, kOptimizer, kActivations, kCategoryCount };
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

  // Opens `path` and loads it. Errors: the reader's Status (not found, not a trace, corrupt,
  // newer schema), which leaves the current document as it was, or a failed query, which leaves
  // the document closed; failed() is emitted for both.
  Status open(const QString& path);
  // Closes the file and empties every model.
  void close();
  // Loads what was committed since the last open/refresh. No-op when nothing is open.
  Status refresh();

  bool isOpen() const { return m_reader != nullptr; }
  QString path() const { return m_path; }
  // The run shown (the first run of the file), if the file has one.
  const std::optional<storage::RunRow>& run() const { return m_run; }
  // Time span of all slices loaded so far.
  TimeRange timeBounds() const { return m_timeline.bounds(); }
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
  // Fills gpuDetailsModel() with GPU slice `slice`'s details and the expert load of its step and
  // layer; clears it when the slice is not GPU work. Errors: read errors (the model is cleared).
  Status selectGpuSlice(SliceId slice);
  // The details of the GPU slice last selected with selectGpuSlice.
  GpuDetailsModel* gpuDetailsModel() { return &m_gpuDetails; }
  // Memory account per step, in step order; empty for traces without memory counters. Samples
  // are mapped to the step row whose [start, end] holds their timestamp (by order of arrival
  // when the run has no step rows); with several ranks the first sample of a step is kept.
  const std::vector<MemorySample>& memory() const { return m_memory; }

 signals:
  // A file was opened and loaded.
  void opened(const QString& path);
  // A refresh added data (the counts may all be 0 when only the run status or the config changes
  // changed; configChangeModel() signals its own inserts).
  void refreshed(int newSteps, int newSlices, int newExpertLoads);
  void closed();
  // An open or refresh failed; `message` names the file and the problem.
  void failed(const QString& message);

 private:
  Status loadAll();
  Status loadNewSlices(int64_t fromNs);
  Status loadNewSteps(int* added);
  Status loadNewExpertLoads(int* added);
  Status loadConfigChanges(int* added);
  Status loadNewMemory(int* added);
  Status loadRunInfo();
  Status fail(const Status& status);

  std::unique_ptr<storage::TraceReader> m_reader;
  QString m_path;
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
  std::vector<MemorySample> m_memory;
  int64_t m_memoryCursorNs;                                    // counters before this time are held
  int64_t m_memoryByOrder[MemorySample::kCategoryCount] = {};  // samples seen, without steps
};

}  // namespace moewb::gui
