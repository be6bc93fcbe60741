// SwapModel: the swap rows of a trace for the timeline's swap lanes and the Swap dock.
#include "moewb/gui/swap_model.h"

#include <algorithm>
#include <map>

#include "moewb/gui/swap_lanes.h"
#include "moewb/gui/trace_document.h"
#include "moewb/storage/gpu_rows.h"

namespace moewb::gui {

SwapStepSeries swapStepSeries(const std::vector<storage::SwapStepRow>& steps) {
  struct Acc {
    int64_t hbm = 0, noSwap = 0, pinned = 0, capacity = 0;
    double movedBytes = 0, copyMs = 0;
  };
  std::map<int64_t, Acc> bySteps;
  for (const storage::SwapStepRow& s : steps) {
    Acc& a = bySteps[s.step];
    a.hbm = std::max(a.hbm, s.hbmPeakBytes);
    a.noSwap = std::max(a.noSwap, s.hbmPeakNoSwapBytes);
    a.pinned = std::max(a.pinned, s.pinnedPeakBytes);
    a.capacity = std::max(a.capacity, s.pinnedCapacityBytes);
    if (s.offloads > 0) {
      a.movedBytes += double(s.swappedBytes) * double(s.offloads + s.reloads) / double(s.offloads);
    }
    a.copyMs += s.copyMs;
  }
  SwapStepSeries out;
  for (const auto& [step, a] : bySteps) {
    const double x = double(step);
    out.hbmPeakGb.emplace_back(x, double(a.hbm) / 1e9);
    out.hbmPeakNoSwapGb.emplace_back(x, double(a.noSwap) / 1e9);
    out.pinnedPeakGb.emplace_back(x, double(a.pinned) / 1e9);
    out.pinnedCapacityGb.emplace_back(x, double(a.capacity) / 1e9);
    if (a.copyMs > 0 && a.movedBytes > 0) {
      out.copyGbps.emplace_back(x, a.movedBytes / (a.copyMs * 1e6));  // bytes/ms / 1e6 = GB/s
    }
  }
  return out;
}

SwapModel::SwapModel(QObject* parent) : QObject(parent) {}

SwapModel::~SwapModel() = default;

void SwapModel::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  close();
  if (!m_document) return;
  connect(m_document, &TraceDocument::opened, this,
          [this](const QString& path) { (void)open(path); });
  connect(m_document, &TraceDocument::refreshed, this, [this] { (void)refresh(); });
  connect(m_document, &TraceDocument::closed, this, &SwapModel::close);
  // A new file replaces the document before it is loaded: drop the old file's rows at once.
  connect(m_document, &TraceDocument::opening, this, &SwapModel::close);
  if (m_document->isOpen() && !m_document->isLoading()) (void)open(m_document->path());
}

Status SwapModel::fail(const Status& status) {
  emit failed(userMessage(status));
  return status;
}

Status SwapModel::open(const QString& path) {
  close();
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return fail(reader.status());
  m_reader = std::move(reader).value();
  return refresh(true);
}

void SwapModel::close() {
  m_reader.reset();
  m_steps.clear();
  m_plans.clear();
  m_ranks.clear();
  m_hasSwap = false;
  m_simulated = false;
  m_layers.setRows({});
  m_whatIf.clear();
  emit changed();
}

Status SwapModel::refresh(bool force) {
  if (!isOpen()) return Status::ok();
  auto steps = m_reader->swapSteps();
  if (!steps.isOk()) return fail(steps.status());
  if (!force && steps->size() == m_steps.size()) return Status::ok();
  m_steps = std::move(steps).value();
  const Status status = reload();
  emit changed();
  return status;
}

Status SwapModel::reload() {
  auto plans = m_reader->swapPlans();
  if (!plans.isOk()) return fail(plans.status());
  auto layers = m_reader->swapLayerSummary();
  if (!layers.isOk()) return fail(layers.status());
  m_plans = std::move(plans).value();
  std::vector<int32_t> ranks;
  m_simulated = false;
  for (const auto& s : m_steps) {
    ranks.push_back(s.rank);
    m_simulated = m_simulated || s.simulated;
  }
  for (const auto& p : m_plans) ranks.push_back(p.rank);
  for (const auto& l : *layers) ranks.push_back(l.rank);
  m_ranks = swapLaneRanks(std::move(ranks));
  m_hasSwap = !m_steps.empty() || !m_plans.empty() || !layers->empty();
  m_layers.setRows(std::move(layers).value());
  // The what-if works on the newest plan (the last one, by step then rank).
  if (m_plans.empty()) {
    m_whatIf.clear();
    return Status::ok();
  }
  const Status status = m_whatIf.setPlan(m_plans.back());
  return status.isOk() ? status : fail(status);
}

Result<std::vector<storage::SwapEventRow>> SwapModel::events(TimeRange window) {
  if (!isOpen() || !m_hasSwap) return std::vector<storage::SwapEventRow>{};
  return m_reader->swapEvents({window.startNs, window.endNs});
}

Result<SwapWaiter> SwapModel::waiterOf(const storage::SwapEventRow& event) {
  if (!isOpen() || (event.toHost && !swapCopyLate(event))) return SwapWaiter{};
  MOEWB_ASSIGN_OR_RETURN(auto tracks, m_reader->tracks());
  std::vector<storage::TrackRow> streams, hosts;
  for (auto& t : tracks) {
    if (t.rank != event.rank) continue;
    if (t.kind == storage::kTrackKindStream) {
      streams.push_back(t);
    } else if (t.kind != storage::kTrackKindCudaApi && t.kind != storage::kTrackKindMemory &&
               t.kind != "counter") {
      hosts.push_back(t);
    }
  }
  if (!streams.empty()) {
    MOEWB_ASSIGN_OR_RETURN(SwapWaiter kernel, kernelAfter(streams, event.neededNs));
    if (kernel.kind != SwapWaiter::kNone) return kernel;
  }
  return phaseAt(hosts, event.neededNs);
}

Result<SwapWaiter> SwapModel::kernelAfter(const std::vector<storage::TrackRow>& streams,
                                          int64_t neededNs) {
  // Look ahead 2 ms, then 8x further each round up to 4 s, until some stream ran a kernel.
  for (int64_t aheadNs = 2'000'000; aheadNs <= 4'096'000'000; aheadNs *= 8) {
    const storage::SliceRow* best = nullptr;
    size_t bestCount = 0;
    std::vector<std::vector<storage::SliceRow>> perStream;
    perStream.reserve(streams.size());
    for (const auto& stream : streams) {
      MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->slices({neededNs, neededNs + aheadNs},
                                                         stream.id));
      std::erase_if(rows, [&](const storage::SliceRow& r) {
        return r.category != storage::kCategoryKernel || r.startNs < neededNs;
      });
      perStream.push_back(std::move(rows));
    }
    for (const auto& rows : perStream) {
      if (rows.size() > bestCount) {  // ties: the lower track id (streams are in id order)
        bestCount = rows.size();
        best = &rows.front();
      }
    }
    if (best) {
      SwapWaiter w;
      w.kind = SwapWaiter::kKernel;
      w.slice = best->id;
      w.track = best->track;
      w.startNs = best->startNs;
      w.durNs = best->durNs;
      w.step = best->step;
      w.name = best->name;
      return w;
    }
  }
  return SwapWaiter{};
}

Result<SwapWaiter> SwapModel::phaseAt(const std::vector<storage::TrackRow>& hostTracks,
                                      int64_t neededNs) {
  SwapWaiter w;
  int32_t bestDepth = -1;
  for (const auto& track : hostTracks) {
    MOEWB_ASSIGN_OR_RETURN(auto rows, m_reader->slices({neededNs, neededNs + 1}, track.id));
    for (const auto& r : rows) {
      if (r.category != storage::kCategoryPhase) continue;
      if (r.startNs > neededNs || r.startNs + r.durNs <= neededNs || r.depth <= bestDepth) {
        continue;
      }
      bestDepth = r.depth;
      w.kind = SwapWaiter::kPhase;
      w.slice = r.id;
      w.track = r.track;
      w.startNs = r.startNs;
      w.durNs = r.durNs;
      w.step = r.step;
      w.name = r.name;
    }
  }
  return w;
}

}  // namespace moewb::gui
