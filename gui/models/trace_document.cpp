// TraceDocument: opening a trace and loading it into the models, then incremental refreshes.
#include "moewb/gui/trace_document.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moewb::gui {

namespace {
constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min() / 4;
constexpr int64_t kLastStep = std::numeric_limits<int64_t>::max() / 4;
}  // namespace

MemorySample::MemorySample() {
  std::fill(std::begin(bytes), std::end(bytes), std::nan(""));
}

const char* MemorySample::categoryName(int category) {
  static const char* kNames[] = {"weights", "grads", "optimizer", "activations"};
  return category >= 0 && category < kCategoryCount ? kNames[category] : "";
}

int MemorySample::categoryOf(const std::string& name) {
  for (int c = 0; c < kCategoryCount; ++c) {
    if (name == std::string("memory.") + categoryName(c) + "_bytes") return c;
  }
  return -1;
}

TraceDocument::TraceDocument(QObject* parent) : QObject(parent), m_memoryCursorNs(kNoTime) {}

TraceDocument::~TraceDocument() = default;

Status TraceDocument::fail(const Status& status) {
  emit failed(QString::fromStdString(status.toString()));
  return status;
}

Status TraceDocument::open(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return fail(reader.status());
  close();
  m_reader = std::move(reader).value();
  m_path = path;
  Status status = loadAll();
  if (!status.isOk()) {
    close();
    return fail(status.withContext(path.toStdString()));
  }
  emit opened(path);
  return Status::ok();
}

void TraceDocument::close() {
  const bool wasOpen = isOpen();
  m_reader.reset();
  m_path.clear();
  m_run.reset();
  m_stats.clear();
  m_meta.clear();
  m_memoryTracks.clear();
  m_gpuLaneTracks.clear();
  m_hostTracks.clear();
  m_hasGpuTracks = false;
  m_gpuDetails.clear();
  m_steps.setRows({});
  m_expertLoad.setRows({});
  m_phases.clear();
  m_configChanges.setRows({});
  m_timeline.clear();
  m_stepsEndNs = 0;
  m_lastExpertStep = -1;
  m_lastNewSlices = 0;
  m_memory.clear();
  m_memoryCursorNs = kNoTime;
  std::fill(std::begin(m_memoryByOrder), std::end(m_memoryByOrder), 0);
  if (wasOpen) emit closed();
}

Status TraceDocument::loadRunInfo() {
  MOEWB_ASSIGN_OR_RETURN(auto runs, m_reader->runs());
  if (!runs.empty()) m_run = runs.front();
  MOEWB_ASSIGN_OR_RETURN(m_stats, m_reader->stats());
  MOEWB_ASSIGN_OR_RETURN(m_meta, m_reader->meta());
  MOEWB_ASSIGN_OR_RETURN(auto tracks, m_reader->tracks());
  m_memoryTracks.clear();
  m_gpuLaneTracks.clear();
  m_hostTracks.clear();
  m_hasGpuTracks = false;
  for (const storage::TrackRow& t : tracks) {
    if (t.kind == storage::kTrackKindMemory) m_memoryTracks.push_back(t);
    if (t.kind == storage::kTrackKindStream || t.kind == storage::kTrackKindCudaApi) {
      m_gpuLaneTracks.push_back(t);
      m_hasGpuTracks = true;
    } else {
      m_hostTracks.push_back(t.id);
    }
  }
  // As TraceReader::gpuLanes orders its lanes: per rank the API threads, then the streams.
  std::stable_sort(m_gpuLaneTracks.begin(), m_gpuLaneTracks.end(),
                   [](const storage::TrackRow& a, const storage::TrackRow& b) {
                     const bool aStream = a.kind == storage::kTrackKindStream;
                     const bool bStream = b.kind == storage::kTrackKindStream;
                     if (a.rank != b.rank) return a.rank < b.rank;
                     return aStream != bStream ? bStream : a.id < b.id;
                   });
  if (tracks.size() != m_timeline.tracks().size()) m_timeline.setTracks(tracks);
  return Status::ok();
}

Result<std::vector<storage::MemorySeries>> TraceDocument::memorySeries(TimeRange window,
                                                                       int buckets) {
  if (!m_reader || m_memoryTracks.empty()) return std::vector<storage::MemorySeries>{};
  return m_reader->memorySeries({window.startNs, window.endNs}, buckets);
}

Result<std::vector<storage::GpuLane>> TraceDocument::gpuLanes(TimeRange window, int buckets) {
  if (!m_reader || m_gpuLaneTracks.empty()) return std::vector<storage::GpuLane>{};
  return m_reader->gpuLanes({window.startNs, window.endNs}, buckets);
}

Status TraceDocument::selectGpuSlice(SliceId slice) {
  if (!m_reader) {
    m_gpuDetails.clear();
    return Status::ok();
  }
  auto details = m_reader->gpuSliceDetails(slice);
  if (!details.isOk()) {
    m_gpuDetails.clear();
    return details.status();
  }
  std::optional<storage::LayerLoad> load;
  if (details->has_value() && (*details)->slice.step >= 0 && (*details)->slice.layer >= 0) {
    auto read = m_reader->layerLoad((*details)->slice.step, (*details)->slice.layer);
    if (!read.isOk()) {
      m_gpuDetails.clear();
      return read.status();
    }
    load = std::move(read).value();
  }
  m_gpuDetails.setDetails(*details, load, m_timeline.bounds().startNs);
  return Status::ok();
}

Status TraceDocument::loadAll() {
  MOEWB_RETURN_IF_ERROR(loadRunInfo());
  int steps = 0, loads = 0, changes = 0, memory = 0;
  MOEWB_RETURN_IF_ERROR(loadNewSteps(&steps));
  MOEWB_RETURN_IF_ERROR(loadNewSlices(kNoTime));
  MOEWB_RETURN_IF_ERROR(loadConfigChanges(&changes));
  MOEWB_RETURN_IF_ERROR(loadNewMemory(&memory));
  return loadNewExpertLoads(&loads);
}

Status TraceDocument::refresh() {
  if (!isOpen()) return Status::ok();
  const std::string oldStatus = m_run ? m_run->status : std::string();
  // Slices before the end of the last committed step held are complete; read from there on.
  const int64_t sliceCursor = m_steps.rows().empty() ? m_timeline.bounds().endNs : m_stepsEndNs;
  int steps = 0, loads = 0, changes = 0, memory = 0;
  Status status = loadRunInfo();
  if (status.isOk()) status = loadNewSteps(&steps);
  if (status.isOk()) status = loadNewSlices(m_timeline.sliceCount() ? sliceCursor : kNoTime);
  if (status.isOk()) status = loadNewExpertLoads(&loads);
  if (status.isOk()) status = loadConfigChanges(&changes);
  if (status.isOk()) status = loadNewMemory(&memory);
  if (!status.isOk()) return fail(status.withContext(m_path.toStdString()));
  const bool runChanged = m_run && m_run->status != oldStatus;
  if (steps || m_lastNewSlices || loads || changes || memory || runChanged) {
    emit refreshed(steps, m_lastNewSlices, loads);
  }
  return Status::ok();
}

Status TraceDocument::loadNewSteps(int* added) {
  *added = 0;
  if (!m_run) return Status::ok();
  const auto& held = m_steps.rows();
  const int64_t from = held.empty() ? 0 : held.back().step + 1;
  MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->steps(m_run->id, from));
  for (const auto& r : rows) m_stepsEndNs = std::max(m_stepsEndNs, r.endNs);
  *added = int(rows.size());
  m_steps.appendRows(rows);
  return Status::ok();
}

Status TraceDocument::loadNewSlices(int64_t fromNs) {
  m_lastNewSlices = 0;
  MOEWB_ASSIGN_OR_RETURN(auto bounds, m_reader->timeBounds());
  if (bounds.endNs <= bounds.startNs && bounds.startNs == 0) return Status::ok();
  const storage::TimeWindow window{std::max(fromNs, bounds.startNs - 1), bounds.endNs + 1};
  if (window.endNs <= window.startNs) return Status::ok();
  std::vector<storage::SliceRow> rows;
  if (!m_hasGpuTracks) {
    MOEWB_ASSIGN_OR_RETURN(rows, m_reader->slices(window));
  } else {
    // Only the host tracks (indexed per track), so kernels and API calls are never read here.
    for (TrackId track : m_hostTracks) {
      MOEWB_ASSIGN_OR_RETURN(auto part, m_reader->slices(window, track));
      rows.insert(rows.end(), std::make_move_iterator(part.begin()),
                  std::make_move_iterator(part.end()));
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const storage::SliceRow& a, const storage::SliceRow& b) {
                       return a.startNs < b.startNs;
                     });
  }
  std::vector<bool> accepted;
  m_lastNewSlices = int(m_timeline.addSlices(rows, &accepted));
  if (m_lastNewSlices == 0) return Status::ok();
  std::vector<storage::SliceRow> fresh;
  fresh.reserve(size_t(m_lastNewSlices));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (accepted[i]) fresh.push_back(std::move(rows[i]));
  }
  m_phases.addSlices(fresh);
  return Status::ok();
}

Status TraceDocument::loadNewExpertLoads(int* added) {
  *added = 0;
  const auto& held = m_steps.rows();
  // With step rows, only steps committed so far are complete; without any, take everything.
  const int64_t to = held.empty() ? kLastStep : held.back().step;
  const int64_t from = m_lastExpertStep + 1;
  if (from > to) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->expertLoad(from, to));
  if (held.empty()) {
    for (const auto& r : rows) m_lastExpertStep = std::max(m_lastExpertStep, r.step);
  } else {
    m_lastExpertStep = to;
  }
  *added = int(rows.size());
  m_expertLoad.appendRows(rows);
  return Status::ok();
}

Status TraceDocument::loadConfigChanges(int* added) {
  MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->configChanges());
  *added = m_configChanges.syncRows(std::move(rows));
  return Status::ok();
}

Status TraceDocument::loadNewMemory(int* added) {
  *added = 0;
  const auto& steps = m_steps.rows();
  // With step rows, only counters up to the end of the last committed step are complete.
  const int64_t endNs = steps.empty() ? std::numeric_limits<int64_t>::max() : m_stepsEndNs + 1;
  if (endNs <= m_memoryCursorNs) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->counters({m_memoryCursorNs, endNs}));
  for (const storage::CounterRow& r : rows) {
    m_memoryCursorNs = std::max(m_memoryCursorNs, r.tsNs + 1);
    const int category = MemorySample::categoryOf(r.name);
    if (category < 0) continue;
    int64_t step = -1;
    if (steps.empty()) {
      step = m_memoryByOrder[category]++;
    } else {
      // The first step (in step order) whose end is at or after the sample and that holds it.
      auto it =
          std::lower_bound(steps.begin(), steps.end(), r.tsNs,
                           [](const storage::StepRow& s, int64_t ts) { return s.endNs < ts; });
      if (it == steps.end() || it->startNs > r.tsNs) continue;
      step = it->step;
    }
    auto at = std::lower_bound(m_memory.begin(), m_memory.end(), step,
                               [](const MemorySample& m, int64_t s) { return m.step < s; });
    if (at == m_memory.end() || at->step != step) {
      MemorySample fresh;
      fresh.step = step;
      at = m_memory.insert(at, fresh);
    }
    if (std::isnan(at->bytes[category])) {
      at->bytes[category] = r.value;
      ++*added;
    }
  }
  return Status::ok();
}

}  // namespace moewb::gui
