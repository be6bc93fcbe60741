// TraceDocument: opening a trace and loading it into the models, then incremental refreshes.
#include "moewb/gui/trace_document.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QPointer>
#include <QTimer>
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

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
  static const std::string kCounterNames[kCategoryCount] = {
      "memory.weights_bytes", "memory.grads_bytes", "memory.optimizer_bytes",
      "memory.activations_bytes"};
  for (int c = 0; c < kCategoryCount; ++c) {
    if (name == kCounterNames[c]) return c;
  }
  return -1;
}

TraceDocument::TraceDocument(QObject* parent) : QObject(parent), m_memoryCursorNs(kNoTime) {
  m_drainTimer = new QTimer(this);
  m_drainTimer->setInterval(kDrainIntervalMs);
  connect(m_drainTimer, &QTimer::timeout, this, &TraceDocument::drainLoad);
}

TraceDocument::~TraceDocument() {
  stopWorker();
}

Status TraceDocument::fail(const Status& status) {
  emit failed(userMessage(status));
  return status;
}

TimeRange TraceDocument::timeBounds() const {
  TimeRange bounds = m_timeline.bounds();
  if (!isLoading() || m_fileBounds.isEmpty()) return bounds;
  if (bounds.isEmpty()) return m_fileBounds;
  return {std::min(bounds.startNs, m_fileBounds.startNs),
          std::max(bounds.endNs, m_fileBounds.endNs)};
}

Status TraceDocument::open(const QString& path) {
  stopWorker();
  const std::atomic<bool> never{false};
  bool held = false;
  auto reader = loadTrace(
      path.toStdString(),
      [&](TraceChunk&& chunk) {
        held = held || chunk.header != nullptr;
        applyChunk(std::move(chunk), path);
        return true;
      },
      never, m_loadOptions);
  if (!reader.isOk()) {
    m_loadStatus = held ? reader.status().withContext(path.toStdString()) : reader.status();
    if (held) close();
    return fail(m_loadStatus);
  }
  m_reader = std::move(reader).value();
  m_loadStatus = Status::ok();
  emit opened(path);
  return Status::ok();
}

void TraceDocument::beginOpen(const QString& path) {
  stopWorker();
  m_loadStatus = Status::ok();
  m_loadingPath = path;
  m_loadingHeld = false;
  m_channel = std::make_unique<TraceLoadChannel>();
  TraceLoadChannel* channel = m_channel.get();
  const TraceLoadOptions options = m_loadOptions;
  const std::string file = path.toStdString();
  m_worker = std::thread([channel, options, file] {
    channel->finish(loadTrace(
        file, [channel](TraceChunk&& chunk) { return channel->push(std::move(chunk)); },
        channel->cancelFlag(), options));
  });
  m_drainTimer->start();
}

void TraceDocument::stopWorker() {
  m_drainTimer->stop();
  m_pendingSteps = m_pendingSlices = m_pendingLoads = 0;
  m_sinceRefresh.invalidate();
  m_refreshIntervalMs = kRefreshIntervalMs;
  if (m_channel) m_channel->cancel();
  if (m_worker.joinable()) m_worker.join();
  m_channel.reset();
  m_fileBounds = {};
}

void TraceDocument::cancelLoad() {
  if (!isLoading()) return;
  const QString path = m_loadingPath;
  stopWorker();
  close();
  m_loadStatus = cancelled("loading " + path.toStdString() + " was cancelled");
  emit loadCanceled(path);
}

void TraceDocument::drainLoad() {
  if (!m_channel) return;
  // Apply chunks for at most kDrainBudgetMs, so input and paints go on between drains.
  QElapsedTimer budget;
  budget.start();
  const bool finished = m_channel->done();  // before taking: every chunk is queued by then
  double progress = -1;
  bool more = false;
  while (!finished) {
    if (budget.elapsed() >= kDrainBudgetMs) {
      more = true;
      break;
    }
    std::optional<TraceChunk> chunk = m_channel->takeOne();
    if (!chunk) break;
    if (chunk->header) m_pendingSteps += int(chunk->header->steps.size());
    m_pendingLoads += int(chunk->expertLoads.size());
    progress = chunk->progress;
    const bool header = chunk->header != nullptr;
    applyChunk(std::move(*chunk), m_loadingPath);
    if (header) m_loadingHeld = true;
    m_pendingSlices += m_lastNewSlices;
    m_lastNewSlices = 0;
  }
  if (!finished) {
    // The views redraw at most every kRefreshIntervalMs while the data streams in.
    if (m_loadingHeld && (m_pendingSteps || m_pendingSlices || m_pendingLoads) &&
        (!m_sinceRefresh.isValid() || m_sinceRefresh.elapsed() >= m_refreshIntervalMs)) {
      m_sinceRefresh.start();
      emit refreshed(std::exchange(m_pendingSteps, 0), std::exchange(m_pendingSlices, 0),
                     std::exchange(m_pendingLoads, 0));
      // The views redrew inside the emit: keep their share of the GUI thread to about a quarter.
      const qint64 costMs = m_sinceRefresh.elapsed();
      m_refreshIntervalMs =
          int(std::clamp<qint64>(3 * costMs, kRefreshIntervalMs, kMaxRefreshIntervalMs));
    }
    if (progress >= 0) emit loadProgress(progress);
    // More waiting: come back as soon as the events queued meanwhile were handled.
    if (more) QTimer::singleShot(0, this, &TraceDocument::drainLoad);
    return;
  }
  auto result = m_channel->takeResult();
  const QString path = m_loadingPath;
  const bool held = m_loadingHeld;
  stopWorker();
  if (!result.isOk()) {
    m_loadStatus = held ? result.status().withContext(path.toStdString()) : result.status();
    if (held) close();
    (void)fail(m_loadStatus);
    return;
  }
  m_reader = std::move(result).value();
  emit loadProgress(1.0);
  emit opened(path);
}

void TraceDocument::applyChunk(TraceChunk&& chunk, const QString& path) {
  if (chunk.header) applyHeader(std::move(chunk.header), path);
  if (chunk.summary) m_timeline.addSummary(std::move(chunk.summary));
  if (chunk.dropSummary) m_timeline.dropSummary();
  if (!chunk.counters.empty()) applyMemory(chunk.counters);
  if (!chunk.expertLoads.empty() || chunk.expertLoadsToStep >= 0) {
    if (chunk.expertLoadsToStep >= 0) {
      m_lastExpertStep = std::max(m_lastExpertStep, chunk.expertLoadsToStep);
    } else {
      for (const auto& r : chunk.expertLoads) m_lastExpertStep = std::max(m_lastExpertStep, r.step);
    }
    m_expertLoad.appendRows(chunk.expertLoads);
  }
  if (!chunk.slices.empty() || !chunk.newNames.empty()) m_lastNewSlices = applyLoadedSlices(chunk);
}

int TraceDocument::applyLoadedSlices(TraceChunk& chunk) {
  for (std::string& name : chunk.newNames) {
    m_loadNameIds.push_back(m_timeline.internName(name));
    m_loadNames.push_back(std::move(name));
  }
  std::vector<bool> accepted;
  const int added = int(m_timeline.addLoadedSlices(chunk.slices, m_loadNameIds, &accepted));
  if (added == 0) return 0;
  if (size_t(added) == chunk.slices.size()) accepted.clear();
  m_phases.addLoadedSlices(chunk.slices, m_loadNames, accepted);
  return added;
}

void TraceDocument::applyHeader(std::unique_ptr<TraceHeader> header, const QString& path) {
  const bool loading = isLoading();
  // close() would stop this load's worker: empty the models without it.
  if (loading) {
    std::unique_ptr<TraceLoadChannel> channel = std::move(m_channel);
    close();
    m_channel = std::move(channel);
  } else {
    close();
  }
  m_path = path;
  if (header->bounds.endNs > header->bounds.startNs) {
    m_fileBounds = {header->bounds.startNs, header->bounds.endNs};
  }
  applyRunInfo(*header);
  for (const auto& r : header->steps) m_stepsEndNs = std::max(m_stepsEndNs, r.endNs);
  m_steps.appendRows(header->steps);
  m_configChanges.syncRows(std::move(header->configChanges));
  emit opening(path);
}

void TraceDocument::close() {
  if (isLoading()) stopWorker();
  const bool wasOpen = isOpen();
  m_windowWorker.reset();
  m_windowAnswered = m_windowTicket;  // answers still on their way are of the closed file
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
  m_loadNames.clear();
  m_loadNameIds.clear();
  m_memory.clear();
  m_trackRanks.clear();
  ++m_memoryRevision;
  m_memoryCursorNs = kNoTime;
  std::fill(std::begin(m_memoryByOrder), std::end(m_memoryByOrder), 0);
  if (wasOpen) emit closed();
}

Status TraceDocument::loadRunInfo() {
  TraceHeader header;
  MOEWB_RETURN_IF_ERROR(readRunInfo(*m_reader, &header));
  applyRunInfo(header);
  return Status::ok();
}

void TraceDocument::applyRunInfo(TraceHeader& header) {
  if (header.run) m_run = header.run;
  m_stats = std::move(header.stats);
  m_meta = std::move(header.meta);
  const std::vector<storage::TrackRow>& tracks = header.tracks;
  m_memoryTracks.clear();
  m_gpuLaneTracks.clear();
  m_hostTracks.clear();
  m_hasGpuTracks = false;
  for (const storage::TrackRow& t : tracks) {
    m_trackRanks[t.id.value] = t.rank;
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

void TraceDocument::startWindowWorker() {
  m_windowWorker.reset();
  if (!m_reader || (m_gpuLaneTracks.empty() && m_memoryTracks.empty())) return;
  QPointer<TraceDocument> self(this);
  m_windowWorker = std::make_unique<WindowQueryWorker>(
      m_path.toStdString(), [self](WindowAnswer&& answer) {
        auto shared = std::make_shared<WindowAnswer>(std::move(answer));
        // The receiver may be gone by the time the GUI thread runs this (self is then null).
        QMetaObject::invokeMethod(
            QCoreApplication::instance(),
            [self, shared] {
              if (!self || shared->query.ticket <= self->m_windowAnswered) return;
              self->m_windowAnswered = shared->query.ticket;
              emit self->windowAnswered(*shared);
            },
            Qt::QueuedConnection);
      });
}

uint64_t TraceDocument::requestWindow(TimeRange window, int buckets) {
  if (!m_reader || isLoading() || (m_gpuLaneTracks.empty() && m_memoryTracks.empty())) return 0;
  if (!m_windowWorker) startWindowWorker();
  WindowQuery query;
  query.ticket = ++m_windowTicket;
  query.window = window;
  query.buckets = std::max(1, buckets);
  query.gpu = !m_gpuLaneTracks.empty();
  query.memory = !m_memoryTracks.empty();
  m_windowWorker->request(query);
  return query.ticket;
}

bool TraceDocument::windowQueryPending() const {
  return m_windowWorker && m_windowAnswered < m_windowTicket;
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

Status TraceDocument::refresh() {
  if (!m_reader || isLoading()) return Status::ok();
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
  m_lastNewSlices = applySlices(rows);
  return Status::ok();
}

// Adds `rows` to the timeline and, those it did not hold yet, to the phase summary; moves the
// new rows only when some were duplicates (a refresh re-reading an overlapping window).
int TraceDocument::applySlices(std::vector<storage::SliceRow>& rows) {
  std::vector<bool> accepted;
  const int added = int(m_timeline.addSlices(rows, &accepted));
  if (added == 0) return 0;
  if (size_t(added) == rows.size()) {
    m_phases.addSlices(rows);
    return added;
  }
  std::vector<storage::SliceRow> fresh;
  fresh.reserve(size_t(added));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (accepted[i]) fresh.push_back(std::move(rows[i]));
  }
  m_phases.addSlices(fresh);
  return added;
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
  *added = applyMemory(rows);
  return Status::ok();
}

int TraceDocument::applyMemory(const std::vector<storage::CounterRow>& rows) {
  const auto& steps = m_steps.rows();
  int added = 0;
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
    const auto rank = m_trackRanks.find(r.track.value);
    const std::pair<int32_t, int64_t> key{rank == m_trackRanks.end() ? 0 : rank->second, step};
    auto at = std::lower_bound(m_memory.begin(), m_memory.end(), key,
                               [](const MemorySample& m, const std::pair<int32_t, int64_t>& k) {
                                 return std::make_pair(m.rank, m.step) < k;
                               });
    if (at == m_memory.end() || at->rank != key.first || at->step != step) {
      MemorySample fresh;
      fresh.rank = key.first;
      fresh.step = step;
      at = m_memory.insert(at, fresh);
    }
    if (std::isnan(at->bytes[category])) {
      at->bytes[category] = r.value;
      ++added;
    }
  }
  if (added) ++m_memoryRevision;
  return added;
}

}  // namespace moewb::gui
