// Trace loading in chunks (any thread), the worker-to-GUI channel and user-facing error text.
#include "moewb/gui/trace_loader.h"

#include <QRegularExpression>
#include <algorithm>
#include <limits>
#include <thread>
#include <unordered_set>

namespace moewb::gui {

namespace {

constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min() / 4;
constexpr int64_t kLastStep = std::numeric_limits<int64_t>::max() / 4;
// Share of the progress bar given to the header, the counters and the expert loads; slices take
// the rest.
constexpr double kHeaderShare = 0.02;
constexpr double kCounterShare = 0.04;
constexpr double kExpertShare = 0.14;

bool isGpuLaneTrack(const storage::TrackRow& t) {
  return t.kind == storage::kTrackKindStream || t.kind == storage::kTrackKindCudaApi;
}

Result<std::unique_ptr<TraceHeader>> readHeader(storage::TraceReader& reader) {
  auto header = std::make_unique<TraceHeader>();
  MOEWB_RETURN_IF_ERROR(readRunInfo(reader, header.get()));
  if (header->run) {
    MOEWB_ASSIGN_OR_RETURN(header->steps, reader.steps(header->run->id, 0));
  }
  MOEWB_ASSIGN_OR_RETURN(header->configChanges, reader.configChanges());
  // With step rows, only counters up to the end of the last committed step are complete (as
  // TraceDocument::refresh reads them).
  int64_t stepsEndNs = 0;
  for (const storage::StepRow& s : header->steps) stepsEndNs = std::max(stepsEndNs, s.endNs);
  header->countersEndNs =
      header->steps.empty() ? std::numeric_limits<int64_t>::max() : stepsEndNs + 1;
  MOEWB_ASSIGN_OR_RETURN(header->bounds, reader.timeBounds());
  return header;
}

// What the streams need of the header, which the sink takes before they run.
struct LoadPlan {
  std::vector<int64_t> counterCuts;  // ascending times cutting the counters into chunks
  int64_t countersEndNs = 0;
  bool hasSteps = false;
  int64_t firstStep = 0;
  int64_t lastStep = 0;
  std::unordered_set<int64_t> gpuTracks;  // GPU lane tracks, read per window by the timeline
  storage::TimeWindow bounds;
};

LoadPlan planOf(const TraceHeader& header, const TraceLoadOptions& options) {
  LoadPlan plan;
  plan.hasSteps = !header.steps.empty();
  if (plan.hasSteps) {
    plan.firstStep = header.steps.front().step;
    plan.lastStep = header.steps.back().step;
  }
  for (const storage::TrackRow& t : header.tracks) {
    if (isGpuLaneTrack(t)) plan.gpuTracks.insert(t.id.value);
  }
  plan.bounds = header.bounds;
  plan.countersEndNs = header.countersEndNs;
  plan.counterCuts.push_back(kNoTime);
  const size_t per = size_t(std::max<int64_t>(1, options.stepsPerCounterChunk));
  for (size_t i = per; i < header.steps.size(); i += per) {
    const int64_t cut = std::min(header.steps[i].startNs, plan.countersEndNs);
    if (cut > plan.counterCuts.back()) plan.counterCuts.push_back(cut);
  }
  if (plan.countersEndNs > plan.counterCuts.back()) plan.counterCuts.push_back(plan.countersEndNs);
  return plan;
}

// The counters before the header's countersEndNs, in time ranges of options.stepsPerCounterChunk
// steps.
Status streamCounters(storage::TraceReader& reader, const LoadPlan& plan,
                      const std::function<bool(TraceChunk&&)>& sink,
                      const std::atomic<bool>& cancel, bool* stopped) {
  const size_t ranges = plan.counterCuts.size() - 1;
  for (size_t i = 0; i < ranges; ++i) {
    if (cancel.load(std::memory_order_relaxed)) {
      *stopped = true;
      return Status::ok();
    }
    TraceChunk chunk;
    MOEWB_ASSIGN_OR_RETURN(chunk.counters,
                           reader.counters({plan.counterCuts[i], plan.counterCuts[i + 1]}));
    chunk.progress = kHeaderShare + kCounterShare * double(i + 1) / double(ranges);
    if (!sink(std::move(chunk))) {
      *stopped = true;
      return Status::ok();
    }
  }
  return Status::ok();
}

// Expert loads of the header's steps in ranges of options.stepsPerExpertChunk steps (all of them
// in one chunk for a file without step rows).
Status streamExpertLoads(storage::TraceReader& reader, const LoadPlan& plan,
                         const std::function<bool(TraceChunk&&)>& sink,
                         const std::atomic<bool>& cancel, const TraceLoadOptions& options,
                         bool* stopped) {
  if (!plan.hasSteps) {
    TraceChunk chunk;
    MOEWB_ASSIGN_OR_RETURN(chunk.expertLoads, reader.expertLoad(0, kLastStep));
    chunk.progress = kHeaderShare + kCounterShare + kExpertShare;
    *stopped = !sink(std::move(chunk));
    return Status::ok();
  }
  const int64_t first = plan.firstStep;
  const int64_t last = plan.lastStep;
  const int64_t per = std::max<int64_t>(1, options.stepsPerExpertChunk);
  for (int64_t from = first; from <= last; from += per) {
    if (cancel.load(std::memory_order_relaxed)) {
      *stopped = true;
      return Status::ok();
    }
    TraceChunk chunk;
    chunk.expertLoadsToStep = std::min(last, from + per - 1);
    MOEWB_ASSIGN_OR_RETURN(chunk.expertLoads, reader.expertLoad(from, chunk.expertLoadsToStep));
    const double done = double(chunk.expertLoadsToStep - first + 1) / double(last - first + 1);
    chunk.progress = kHeaderShare + kCounterShare + kExpertShare * done;
    if (!sink(std::move(chunk))) {
      *stopped = true;
      return Status::ok();
    }
  }
  return Status::ok();
}

// Host slices in start order, options.slicesPerChunk at a time; progress by start time.
Status streamSlices(storage::TraceReader& reader, const LoadPlan& plan,
                    const std::function<bool(TraceChunk&&)>& sink, const std::atomic<bool>& cancel,
                    const TraceLoadOptions& options, bool* stopped) {
  const std::unordered_set<int64_t>& skip = plan.gpuTracks;
  const double startNs = double(plan.bounds.startNs);
  const double spanNs = std::max(1.0, double(plan.bounds.endNs - plan.bounds.startNs));
  const double sliceShare = 1.0 - kHeaderShare - kCounterShare - kExpertShare;
  const size_t per = std::max<size_t>(1, options.slicesPerChunk);
  TraceChunk chunk;
  chunk.slices.reserve(per);
  auto handOver = [&](double fraction) {
    chunk.progress =
        kHeaderShare + kCounterShare + kExpertShare + sliceShare * std::clamp(fraction, 0.0, 1.0);
    const bool more = sink(std::move(chunk));
    chunk = TraceChunk();
    chunk.slices.reserve(per);
    if (more && options.sliceChunkDelay.count() > 0) {
      std::this_thread::sleep_for(options.sliceChunkDelay);
    }
    return more;
  };
  Status status = reader.forEachSlice([&](const storage::SliceRow& row) {
    if (cancel.load(std::memory_order_relaxed)) {
      *stopped = true;
      return false;
    }
    if (!skip.empty() && skip.count(row.track.value)) return true;
    chunk.slices.push_back(row);
    if (chunk.slices.size() < per) return true;
    if (!handOver((double(row.startNs) - startNs) / spanNs)) *stopped = true;
    return !*stopped;
  });
  MOEWB_RETURN_IF_ERROR(status);
  if (!*stopped && !chunk.slices.empty() && !handOver(1.0)) *stopped = true;
  return Status::ok();
}

}  // namespace

Status readRunInfo(storage::TraceReader& reader, TraceHeader* header) {
  MOEWB_ASSIGN_OR_RETURN(auto runs, reader.runs());
  header->run.reset();
  if (!runs.empty()) header->run = runs.front();
  MOEWB_ASSIGN_OR_RETURN(header->stats, reader.stats());
  MOEWB_ASSIGN_OR_RETURN(header->meta, reader.meta());
  MOEWB_ASSIGN_OR_RETURN(header->tracks, reader.tracks());
  return Status::ok();
}

Result<std::unique_ptr<storage::TraceReader>> loadTrace(
    const std::string& path, const std::function<bool(TraceChunk&&)>& sink,
    const std::atomic<bool>& cancel, const TraceLoadOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(path));
  const Status stoppedStatus = cancelled("loading " + path + " was cancelled");
  if (cancel.load()) return stoppedStatus;
  MOEWB_ASSIGN_OR_RETURN(auto header, readHeader(*reader));
  const LoadPlan plan = planOf(*header, options);
  TraceChunk first;
  first.header = std::move(header);
  first.progress = kHeaderShare;
  if (!sink(std::move(first))) return stoppedStatus;
  bool stopped = false;
  MOEWB_RETURN_IF_ERROR(streamCounters(*reader, plan, sink, cancel, &stopped));
  if (stopped) return stoppedStatus;
  MOEWB_RETURN_IF_ERROR(streamExpertLoads(*reader, plan, sink, cancel, options, &stopped));
  if (stopped) return stoppedStatus;
  MOEWB_RETURN_IF_ERROR(streamSlices(*reader, plan, sink, cancel, options, &stopped));
  if (stopped) return stoppedStatus;
  return reader;
}

bool TraceLoadChannel::push(TraceChunk&& chunk) {
  std::unique_lock lock(m_mutex);
  m_space.wait(lock, [&] { return m_cancelled.load() || m_chunks.size() < m_capacity; });
  if (m_cancelled.load()) return false;
  m_chunks.push_back(std::move(chunk));
  return true;
}

void TraceLoadChannel::finish(Result<std::unique_ptr<storage::TraceReader>> result) {
  std::lock_guard lock(m_mutex);
  m_result.emplace(std::move(result));
  m_finished = true;
}

std::optional<TraceChunk> TraceLoadChannel::takeOne() {
  std::optional<TraceChunk> out;
  {
    std::lock_guard lock(m_mutex);
    if (m_chunks.empty()) return out;
    out.emplace(std::move(m_chunks.front()));
    m_chunks.pop_front();
  }
  m_space.notify_all();
  return out;
}

bool TraceLoadChannel::done() {
  std::lock_guard lock(m_mutex);
  return m_finished && m_chunks.empty();
}

Result<std::unique_ptr<storage::TraceReader>> TraceLoadChannel::takeResult() {
  std::lock_guard lock(m_mutex);
  if (!m_result) return internalError("the trace load has not finished");
  Result<std::unique_ptr<storage::TraceReader>> out = std::move(*m_result);
  m_result.reset();
  return out;
}

void TraceLoadChannel::cancel() {
  {
    std::lock_guard lock(m_mutex);
    m_cancelled.store(true);
  }
  m_space.notify_all();
}

QString userMessage(const Status& status) {
  if (status.isOk()) return {};
  QString text = QString::fromStdString(status.message()).trimmed();
  // Debug details and source locations: "[call failed at file.cpp:12, SQLite code 11]",
  // "(file.cpp:12)", "at file.cpp:12".
  static const QRegularExpression bracketed(
      QStringLiteral(R"(\s*[\[(][^\])]*\.(?:cpp|cc|cxx|h|hpp|cu):\d+[^\])]*[\])])"));
  static const QRegularExpression bare(
      QStringLiteral(R"(\s*(?:at\s+)?[\w./-]+\.(?:cpp|cc|cxx|h|hpp|cu):\d+)"));
  text.remove(bracketed);
  text.remove(bare);
  // A code name left at the front by a caller that used Status::toString().
  const QString prefix = QString::fromLatin1(statusCodeName(status.code())) + QStringLiteral(": ");
  while (text.startsWith(prefix)) text.remove(0, prefix.size());
  text = text.trimmed();
  if (text.isEmpty()) text = QStringLiteral("Unknown error");
  text[0] = text[0].toUpper();
  return text;
}

}  // namespace moewb::gui
