// Trace loading in chunks (any thread), the worker-to-GUI channel and user-facing error text.
#include "moewb/gui/trace_loader.h"

#include <QRegularExpression>
#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "moewb/storage/trace_bulk_reader.h"

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

// Expert loads of the header's steps (all of them for a file without step rows) in one scan of
// the table in file order. While the file holds them in step order (as the writer appends them),
// a chunk ends where a row's step reaches the chunk's first step + options.stepsPerExpertChunk
// and says the steps before are complete; rows out of step order end that (chunks then hold a
// bounded number of rows and say nothing until the last one, which completes every step).
Status streamExpertLoads(storage::BulkTraceReader& bulk, const LoadPlan& plan,
                         const std::function<bool(TraceChunk&&)>& sink,
                         const std::atomic<bool>& cancel, const TraceLoadOptions& options,
                         bool* stopped) {
  const int64_t first = plan.hasSteps ? plan.firstStep : 0;
  const int64_t last = plan.hasSteps ? plan.lastStep : kLastStep;
  const int64_t per = std::max<int64_t>(1, options.stepsPerExpertChunk);
  const size_t unorderedRows = size_t(per) * 256;
  int64_t base = first;
  int64_t previousStep = std::numeric_limits<int64_t>::min();
  bool ordered = true;
  double progress = kHeaderShare + kCounterShare;
  TraceChunk chunk;
  auto handOver = [&](int64_t toStep) {
    chunk.expertLoadsToStep = toStep;
    if (plan.hasSteps && toStep >= first) {
      const double done = double(toStep - first + 1) / double(last - first + 1);
      progress = std::max(progress, kHeaderShare + kCounterShare + kExpertShare * done);
    }
    chunk.progress = progress;
    const bool more = sink(std::move(chunk));
    chunk = TraceChunk();
    if (!more) *stopped = true;
    return more;
  };
  Status status = bulk.forEachExpertLoadInFileOrder(
      first, last, 4096, [&](std::vector<storage::ExpertLoadRow>& rows) {
        if (cancel.load(std::memory_order_relaxed)) {
          *stopped = true;
          return false;
        }
        for (const storage::ExpertLoadRow& row : rows) {
          if (row.step < previousStep) ordered = false;
          previousStep = row.step;
          if (ordered && plan.hasSteps && row.step >= base + per) {
            base += per * ((row.step - base) / per);
            if (!chunk.expertLoads.empty() && !handOver(row.step - 1)) return false;
          } else if ((!ordered || !plan.hasSteps) && chunk.expertLoads.size() >= unorderedRows) {
            if (!handOver(-1)) return false;
          }
          chunk.expertLoads.push_back(row);
        }
        return true;
      });
  MOEWB_RETURN_IF_ERROR(status);
  if (*stopped) return Status::ok();
  progress = kHeaderShare + kCounterShare + kExpertShare;
  (void)handOver(plan.hasSteps ? last : -1);
  return Status::ok();
}

// Gives each string id of the file a name index of the load (0, 1, ... in order of first use),
// resolving its text once.
class NameIndexer {
 public:
  explicit NameIndexer(storage::BulkTraceReader& bulk) : m_bulk(bulk) {}
  // The name index of string `id`; a new one appends its text to *newNames.
  Result<int32_t> indexOf(int64_t id, std::vector<std::string>* newNames) {
    const bool small = id >= 0 && id < kDirect;
    if (small && size_t(id) < m_direct.size() && m_direct[size_t(id)] >= 0) {
      return m_direct[size_t(id)];
    }
    if (!small) {
      if (auto it = m_other.find(id); it != m_other.end()) return it->second;
    }
    MOEWB_ASSIGN_OR_RETURN(std::string text, m_bulk.stringText(id));
    const int32_t index = m_count++;
    newNames->push_back(std::move(text));
    if (small) {
      if (size_t(id) >= m_direct.size()) m_direct.resize(size_t(id) + 1, -1);
      m_direct[size_t(id)] = index;
    } else {
      m_other.emplace(id, index);
    }
    return index;
  }
  // Names indexed so far.
  size_t count() const { return size_t(m_count); }

 private:
  static constexpr int64_t kDirect = 1 << 20;  // ids below this use the flat table
  storage::BulkTraceReader& m_bulk;
  std::vector<int32_t> m_direct;  // by string id: name index, -1 = not seen
  std::unordered_map<int64_t, int32_t> m_other;
  int32_t m_count = 0;
};

// Host slices in start order, options.slicesPerChunk at a time; progress by start time. Each
// slice handed over is also added to `summary` when it is given.
Status streamSlices(storage::BulkTraceReader& bulk, const LoadPlan& plan,
                    const std::function<bool(TraceChunk&&)>& sink, const std::atomic<bool>& cancel,
                    const TraceLoadOptions& options, SummaryBuilder* summary, bool* stopped) {
  const std::unordered_set<int64_t>& skip = plan.gpuTracks;
  const double startNs = double(plan.bounds.startNs);
  const double spanNs = std::max(1.0, double(plan.bounds.endNs - plan.bounds.startNs));
  const double sliceShare = 1.0 - kHeaderShare - kCounterShare - kExpertShare;
  const size_t per = std::max<size_t>(1, options.slicesPerChunk);
  NameIndexer names(bulk);
  std::vector<int32_t> summaryNames;  // by load name index: the summary's name index
  SummaryBuilder* building = summary;  // null once the summary proved inexact
  Status failed;
  TraceChunk chunk;
  chunk.slices.reserve(per);
  auto handOver = [&](double fraction) {
    chunk.progress =
        kHeaderShare + kCounterShare + kExpertShare + sliceShare * std::clamp(fraction, 0.0, 1.0);
    // The summary's buckets that these and earlier slices completed travel with them, so the
    // timeline paints zoomed out from the summary while the load still runs.
    if (building && building->outOfOrder() > 0) {
      chunk.dropSummary = true;  // a lane out of start order: the summary cannot be exact
      building = nullptr;
    } else if (building) {
      chunk.summary = building->takeFinished();
    }
    const bool more = sink(std::move(chunk));
    chunk = TraceChunk();
    chunk.slices.reserve(per);
    if (more && options.sliceChunkDelay.count() > 0) {
      std::this_thread::sleep_for(options.sliceChunkDelay);
    }
    return more;
  };
  auto take = [&](const storage::SliceIdRow& row) {
    LoadedSlice& s = chunk.slices.emplace_back();
    s.startNs = row.startNs;
    s.durNs = row.durNs;
    s.step = row.step;
    s.track = TrackId(row.track);
    s.layer = row.layer;
    s.depth = row.depth;
    Result<int32_t> name = names.indexOf(row.nameId, &chunk.newNames);
    Result<int32_t> category = names.indexOf(row.categoryId, &chunk.newNames);
    if (!name.isOk() || !category.isOk()) {
      failed = name.isOk() ? category.status() : name.status();
      return false;
    }
    s.nameIndex = *name;
    s.categoryIndex = *category;
    if (building) {
      while (summaryNames.size() < names.count()) {
        summaryNames.push_back(building->addName(
            chunk.newNames[chunk.newNames.size() - (names.count() - summaryNames.size())]));
      }
      building->add(s.track, s.depth, s.startNs, s.durNs, summaryNames[size_t(s.nameIndex)]);
    }
    return true;
  };
  Status status = bulk.forEachSliceBatch(per, [&](std::vector<storage::SliceIdRow>& rows) {
    if (cancel.load(std::memory_order_relaxed)) {
      *stopped = true;
      return false;
    }
    for (const storage::SliceIdRow& row : rows) {
      if (!skip.empty() && skip.count(row.track)) continue;
      if (!take(row)) return false;
      if (chunk.slices.size() < per) continue;
      if (!handOver((double(row.startNs) - startNs) / spanNs)) {
        *stopped = true;
        return false;
      }
    }
    return true;
  });
  MOEWB_RETURN_IF_ERROR(status);
  MOEWB_RETURN_IF_ERROR(failed);
  if (!*stopped && !chunk.slices.empty() && !handOver(1.0)) *stopped = true;
  return Status::ok();
}

// Runs a stream on a helper thread, holding its chunks (at most kSideChunks) until the loading
// thread forwards them, so that the sink is only ever called on the loading thread.
class SideStream {
 public:
  using Sink = std::function<bool(TraceChunk&&)>;
  explicit SideStream(const std::atomic<bool>& cancel) : m_cancel(cancel) {}
  ~SideStream() { (void)finish(true); }

  // Starts body(push, &stopped) on the helper thread.
  void start(std::function<Status(const Sink&, bool*)> body) {
    m_thread = std::thread([this, body = std::move(body)] {
      bool stopped = false;
      Status status = body([this](TraceChunk&& chunk) { return push(std::move(chunk)); },
                           &stopped);
      std::lock_guard lock(m_mutex);
      m_status = std::move(status);
      m_stopped = stopped;
      m_done = true;
      m_changed.notify_all();
    });
  }
  // Hands the chunks ready now to `sink`; false when `sink` refused one.
  bool forwardReady(const Sink& sink) { return forward(sink, false); }
  // Hands every chunk to `sink` until the helper is done; false when `sink` refused one.
  bool forwardAll(const Sink& sink) { return forward(sink, true); }
  // Stops the helper when `abandon` (its chunks are dropped), joins it and returns its status.
  Status finish(bool abandon) {
    if (abandon) {
      std::lock_guard lock(m_mutex);
      m_abandoned = true;
      m_changed.notify_all();
    }
    if (m_thread.joinable()) m_thread.join();
    std::lock_guard lock(m_mutex);
    return m_status;
  }
  // Whether the helper's stream stopped early (cancelled).
  bool stopped() {
    std::lock_guard lock(m_mutex);
    return m_stopped;
  }

 private:
  static constexpr size_t kSideChunks = 4;

  bool push(TraceChunk&& chunk) {
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [&] {
      return m_abandoned || m_cancel.load() || m_chunks.size() < kSideChunks;
    });
    if (m_abandoned || m_cancel.load()) return false;
    m_chunks.push_back(std::move(chunk));
    m_changed.notify_all();
    return true;
  }

  bool forward(const Sink& sink, bool untilDone) {
    while (true) {
      std::optional<TraceChunk> chunk;
      {
        std::unique_lock lock(m_mutex);
        if (untilDone) {
          m_changed.wait(lock, [&] { return m_done || !m_chunks.empty() || m_cancel.load(); });
        }
        if (m_chunks.empty()) return true;
        chunk.emplace(std::move(m_chunks.front()));
        m_chunks.pop_front();
        m_changed.notify_all();
      }
      if (!sink(std::move(*chunk))) return false;
    }
  }

  const std::atomic<bool>& m_cancel;
  std::thread m_thread;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::deque<TraceChunk> m_chunks;
  bool m_done = false;
  bool m_stopped = false;
  bool m_abandoned = false;
  Status m_status;
};

// The progress of the two streams of a load as one monotonic fraction: each stream's own
// progress (as its chunks carry it) minus where it starts, added up.
class ProgressMerge {
 public:
  double update(double progress, bool fromSide) {
    const double base = kHeaderShare;
    const double sliceBase = kHeaderShare + kCounterShare + kExpertShare;
    if (fromSide) {
      m_side = std::max(m_side, progress - base);
    } else {
      m_slices = std::max(m_slices, progress - sliceBase);
    }
    return std::min(1.0, base + m_side + m_slices);
  }

 private:
  double m_side = 0;    // counters and expert loads done, as a share of the whole load
  double m_slices = 0;  // slices done, as a share of the whole load
};

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

namespace {

// Whether `path` has a -wal with data beside it: a run still writing it (or one that died), whose
// slices may still change, so no summary of it is kept on disk.
bool hasLiveWal(const std::string& path) {
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path + "-wal", ec);
  return !ec && bytes > 0;
}

// The sidecar summary of the trace, when one belongs to it (anything else is ignored: it is
// rebuilt by the load).
std::unique_ptr<TimelineSummary> readSidecar(const std::string& path,
                                             const std::optional<TraceFingerprint>& fingerprint) {
  if (!fingerprint) return nullptr;
  Result<TimelineSummary> read = readSummaryFile(summaryFilePath(path), *fingerprint);
  if (!read.isOk()) return nullptr;
  return std::make_unique<TimelineSummary>(std::move(read).value());
}

// Hands the last part of `builder`'s summary to `sink` (as a slice chunk: all slices are in) and
// keeps the whole beside the trace when `fingerprint` allows it. False when `sink` refused it.
bool finishSummary(SummaryBuilder& builder, const std::string& path,
                   const std::optional<TraceFingerprint>& fingerprint,
                   const std::function<bool(TraceChunk&&)>& sink) {
  TraceChunk last;
  builder.close();
  last.summary = builder.takeFinished();
  if (fingerprint) {
    // A directory that cannot be written (read-only media) keeps no sidecar: nothing lost but
    // the rebuild next time.
    (void)writeSummaryFile(summaryFilePath(path), builder.all(), *fingerprint);
  }
  last.progress = 1.0;  // the slices' own progress: all of them are in
  return sink(std::move(last));
}

}  // namespace

Result<std::unique_ptr<storage::TraceReader>> loadTrace(
    const std::string& path, const std::function<bool(TraceChunk&&)>& sink,
    const std::atomic<bool>& cancel, const TraceLoadOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(path));
  const Status stoppedStatus = cancelled("loading " + path + " was cancelled");
  if (cancel.load()) return stoppedStatus;
  // Two more connections for the bulk tables, opened once the file proved to be a trace.
  MOEWB_ASSIGN_OR_RETURN(auto sliceBulk, storage::BulkTraceReader::open(path));
  MOEWB_ASSIGN_OR_RETURN(auto loadBulk, storage::BulkTraceReader::open(path));
  MOEWB_ASSIGN_OR_RETURN(auto header, readHeader(*reader));
  const LoadPlan plan = planOf(*header, options);
  // The per-level summary: from its sidecar when one belongs to this state of the file, else
  // built while the slices stream (and kept beside the trace unless a run is writing it).
  // A run still writing the file (a -wal with data) may add slices past the bounds read above:
  // its timeline paints from the slices, without a summary.
  const bool live = hasLiveWal(path);
  std::optional<TraceFingerprint> fingerprint;
  if (options.summaryFile && !live) {
    MOEWB_ASSIGN_OR_RETURN(const int64_t maxSliceId, sliceBulk->maxSliceId());
    if (auto f = traceFingerprint(path, maxSliceId); f.isOk()) fingerprint = *f;
  }
  TraceChunk first;
  first.summary = readSidecar(path, fingerprint);
  std::optional<SummaryBuilder> builder;
  if (!first.summary && !live) builder.emplace(TimeRange{plan.bounds.startNs, plan.bounds.endNs});
  first.header = std::move(header);
  first.progress = kHeaderShare;
  if (!sink(std::move(first))) return stoppedStatus;
  // The counters and expert loads are read on a helper thread while this one reads the slices
  // (two cores: the two biggest tables at once); their chunks reach `sink` on this thread.
  SideStream side(cancel);
  side.start([&](const std::function<bool(TraceChunk&&)>& push, bool* stopped) {
    MOEWB_RETURN_IF_ERROR(streamCounters(*reader, plan, push, cancel, stopped));
    if (*stopped) return Status::ok();
    return streamExpertLoads(*loadBulk, plan, push, cancel, options, stopped);
  });
  ProgressMerge merge;
  bool stopped = false;
  auto forward = [&](TraceChunk&& chunk, bool fromSide) {
    if (cancel.load(std::memory_order_relaxed)) return false;  // nothing more once cancelled
    chunk.progress = merge.update(chunk.progress, fromSide);
    return sink(std::move(chunk));
  };
  Status status = streamSlices(
      *sliceBulk, plan,
      [&](TraceChunk&& chunk) {
        if (!side.forwardReady([&](TraceChunk&& c) { return forward(std::move(c), true); })) {
          return false;
        }
        return forward(std::move(chunk), false);
      },
      cancel, options, builder ? &*builder : nullptr, &stopped);
  if (status.isOk() && !stopped && builder && builder->outOfOrder() == 0) {
    stopped = !finishSummary(*builder, path, fingerprint,
                             [&](TraceChunk&& c) { return forward(std::move(c), false); });
  }
  if (status.isOk() && !stopped) {
    stopped = !side.forwardAll([&](TraceChunk&& c) { return forward(std::move(c), true); });
  }
  const Status sideStatus = side.finish(stopped || !status.isOk());
  MOEWB_RETURN_IF_ERROR(status);
  MOEWB_RETURN_IF_ERROR(sideStatus);
  if (stopped || side.stopped()) return stoppedStatus;
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
