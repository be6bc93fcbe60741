// Per-step time breakdown: the category mapping, the priority sweep and the one-pass reader
// (see moewb/gui/step_breakdown.h).
#include "moewb/gui/step_breakdown.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "moewb/gui/palette.h"
#include "moewb/storage/gpu_rows.h"

namespace moewb::gui {

namespace {

bool containsNoCase(std::string_view text, std::string_view word) {
  if (word.size() > text.size()) return false;
  for (size_t i = 0; i + word.size() <= text.size(); ++i) {
    size_t k = 0;
    while (k < word.size() &&
           std::tolower(static_cast<unsigned char>(text[i + k])) == word[k]) {
      ++k;
    }
    if (k == word.size()) return true;
  }
  return false;
}

// "experts.fwd" -> "experts"; "dispatch.bwd" -> "dispatch"; "optimizer" -> "optimizer".
std::string_view phaseBase(std::string_view phase) {
  for (std::string_view suffix : {std::string_view(".fwd"), std::string_view(".bwd")}) {
    if (phase.size() > suffix.size() && phase.substr(phase.size() - suffix.size()) == suffix) {
      return phase.substr(0, phase.size() - suffix.size());
    }
  }
  return phase;
}

TimeCategory categoryOfPhase(std::string_view phase) {
  const std::string_view base = phaseBase(phase);
  for (std::string_view m : {"attention", "kda", "sparse_attention", "mixer", "indexer"}) {
    if (base == m) return TimeCategory::kMixer;
  }
  for (std::string_view e : {"router", "permute", "dispatch", "experts", "combine",
                             "unpermute", "shared_experts", "moe"}) {
    if (base == e) return TimeCategory::kExperts;
  }
  if (base == "optimizer") return TimeCategory::kOptimizer;
  if (base == "loss") return TimeCategory::kLoss;
  return TimeCategory::kOther;
}

// Priority of each category per source: index 0 wins.
constexpr std::array<TimeCategory, 7> kHostPriority = {
    TimeCategory::kAllToAll, TimeCategory::kCollective, TimeCategory::kMixer,
    TimeCategory::kExperts,  TimeCategory::kLoss,       TimeCategory::kOptimizer,
    TimeCategory::kOther};
constexpr std::array<TimeCategory, 7> kGpuPriority = {
    TimeCategory::kMixer, TimeCategory::kExperts,  TimeCategory::kLoss,
    TimeCategory::kOptimizer, TimeCategory::kOther, TimeCategory::kAllToAll,
    TimeCategory::kCollective};

}  // namespace

const char* timeCategoryName(TimeCategory category) {
  switch (category) {
    case TimeCategory::kMixer: return "mixers";
    case TimeCategory::kExperts: return "experts";
    case TimeCategory::kAllToAll: return "all-to-all";
    case TimeCategory::kCollective: return "other collectives";
    case TimeCategory::kOptimizer: return "optimizer";
    case TimeCategory::kLoss: return "loss";
    case TimeCategory::kOther: return "other";
    case TimeCategory::kGpuIdle: return "GPU idle";
  }
  return "other";
}

QColor timeCategoryColor(TimeCategory category) {
  switch (category) {
    case TimeCategory::kMixer: return phaseColor("attention.fwd");
    case TimeCategory::kExperts: return phaseColor("experts.fwd");
    case TimeCategory::kAllToAll: return QColor::fromRgb(0xff9da7);
    case TimeCategory::kCollective: return QColor::fromRgb(0x9c755f);
    case TimeCategory::kOptimizer: return phaseColor("optimizer");
    case TimeCategory::kLoss: return phaseColor("loss.fwd");
    case TimeCategory::kOther: return QColor::fromRgb(0x6b7280);
    case TimeCategory::kGpuIdle: return QColor::fromRgb(0x30343b);
  }
  return QColor::fromRgb(0x6b7280);
}

TimeCategory classifyWork(std::string_view name, std::string_view sliceCategory,
                          std::string_view phase) {
  if (sliceCategory == storage::kCategoryCollective) {
    const bool a2a = containsNoCase(name, "all_to_all") || containsNoCase(name, "alltoall");
    return a2a ? TimeCategory::kAllToAll : TimeCategory::kCollective;
  }
  const bool gpu = storage::isGpuCaptureCategory(std::string(sliceCategory));
  if (gpu && containsNoCase(name, "nccl")) {
    const std::string_view base = phaseBase(phase);
    const bool a2a = containsNoCase(name, "sendrecv") || containsNoCase(name, "alltoall") ||
                     containsNoCase(name, "all_to_all") || base == "dispatch" ||
                     base == "combine";
    return a2a ? TimeCategory::kAllToAll : TimeCategory::kCollective;
  }
  return categoryOfPhase(gpu ? phase : name);
}

CategoryNs attributeStep(const std::vector<WorkInterval>& work, int64_t startNs, int64_t endNs,
                         BreakdownSource source) {
  CategoryNs out{};
  if (endNs <= startNs) return out;
  // Events: +1 at a clipped start, -1 at a clipped end; swept in time order.
  struct Event {
    int64_t tNs;
    int delta;
    int category;
  };
  std::vector<Event> events;
  events.reserve(work.size() * 2);
  for (const WorkInterval& w : work) {
    const int64_t s = std::max(w.startNs, startNs), e = std::min(w.endNs, endNs);
    if (e <= s) continue;
    events.push_back({s, +1, int(w.category)});
    events.push_back({e, -1, int(w.category)});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.tNs < b.tNs; });
  const auto& priority = source == BreakdownSource::kGpuKernels ? kGpuPriority : kHostPriority;
  const TimeCategory uncovered =
      source == BreakdownSource::kGpuKernels ? TimeCategory::kGpuIdle : TimeCategory::kOther;
  std::array<int, kTimeCategoryCount> active{};
  int64_t t = startNs;
  size_t i = 0;
  while (t < endNs) {
    while (i < events.size() && events[i].tNs <= t) {
      active[size_t(events[i].category)] += events[i].delta;
      ++i;
    }
    const int64_t next = i < events.size() ? events[i].tNs : endNs;
    TimeCategory owner = uncovered;
    for (TimeCategory c : priority) {
      if (active[size_t(c)] > 0) {
        owner = c;
        break;
      }
    }
    out[size_t(owner)] += next - t;
    t = next;
  }
  return out;
}

namespace {

// The GPU work row's engine phase ("" for other slices).
std::string_view workPhase(const storage::GpuWorkRow* gpu) {
  if (!gpu) return {};
  if (gpu->kernel) return gpu->kernel->phase;
  if (gpu->memcpy) return gpu->memcpy->phase;
  if (gpu->memset) return gpu->memset->phase;
  return {};
}

// Accumulates slices, in start order, into the steps they overlap; a step is attributed as soon
// as a slice starts after its end (nothing later can overlap it).
class StepSweep {
 public:
  StepSweep(std::vector<storage::StepRow> steps, BreakdownSource source)
      : m_steps(std::move(steps)), m_work(m_steps.size()), m_source(source) {
    m_out.source = source;
    m_out.steps.reserve(m_steps.size());
  }

  void add(int64_t startNs, int64_t endNs, TimeCategory category) {
    while (m_first < m_steps.size() && m_steps[m_first].endNs <= startNs) finish(m_first++);
    for (size_t i = m_first; i < m_steps.size() && m_steps[i].startNs < endNs; ++i) {
      if (m_steps[i].endNs > startNs) m_work[i].push_back({startNs, endNs, category});
    }
  }

  StepBreakdownSet done() {
    while (m_first < m_steps.size()) finish(m_first++);
    return std::move(m_out);
  }

 private:
  void finish(size_t i) {
    const storage::StepRow& row = m_steps[i];
    StepBreakdown b;
    b.step = row.step;
    b.startNs = row.startNs;
    b.durNs = std::max<int64_t>(0, row.endNs - row.startNs);
    b.ns = attributeStep(m_work[i], row.startNs, row.endNs, m_source);
    m_out.steps.push_back(b);
    std::vector<WorkInterval>().swap(m_work[i]);
  }

  std::vector<storage::StepRow> m_steps;  // rank 0's, in start order
  std::vector<std::vector<WorkInterval>> m_work;
  BreakdownSource m_source;
  size_t m_first = 0;  // steps before it are attributed
  StepBreakdownSet m_out;
};

}  // namespace

Result<StepBreakdownSet> readStepBreakdowns(storage::TraceReader& reader,
                                            const std::atomic<bool>* cancel) {
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::RunRow> runs, reader.runs());
  if (runs.empty()) return StepBreakdownSet{};
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::StepRow> all, reader.steps(runs.front().id));
  std::vector<storage::StepRow> steps;
  for (storage::StepRow& r : all) {
    if (r.rank == 0) steps.push_back(std::move(r));
  }
  std::sort(steps.begin(), steps.end(), [](const storage::StepRow& a, const storage::StepRow& b) {
    return a.startNs < b.startNs;
  });
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::TrackRow> tracks, reader.tracks());
  std::map<int64_t, int32_t> rankOf;
  bool gpu = false;
  for (const storage::TrackRow& t : tracks) {
    rankOf[t.id.value] = t.rank;
    gpu = gpu || (t.rank == 0 && t.kind == storage::kTrackKindStream);
  }
  const BreakdownSource source =
      gpu ? BreakdownSource::kGpuKernels : BreakdownSource::kHostPhases;
  StepSweep sweep(std::move(steps), source);
  bool stopped = false;
  auto visit = [&](const storage::SliceRow& s, const storage::GpuWorkRow* work) {
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      stopped = true;
      return false;
    }
    auto rank = rankOf.find(s.track.value);
    if (rank == rankOf.end() || rank->second != 0 || s.durNs <= 0) return true;
    if (gpu) {
      if (!storage::isGpuWorkCategory(s.category)) return true;
    } else if (s.category == storage::kCategoryPhase) {
      // Phases (depth 2) and the optimizer pass; the forward/backward passes only contain them.
      if (s.depth < 2 && s.name != "optimizer") return true;
    } else if (s.category != storage::kCategoryCollective) {
      return true;
    }
    sweep.add(s.startNs, s.startNs + s.durNs, classifyWork(s.name, s.category, workPhase(work)));
    return true;
  };
  if (gpu) {
    MOEWB_RETURN_IF_ERROR(reader.forEachSliceWithGpuWork(visit));
  } else {
    MOEWB_RETURN_IF_ERROR(
        reader.forEachSlice([&](const storage::SliceRow& s) { return visit(s, nullptr); }));
  }
  if (stopped) return cancelled("the step breakdown was cancelled");
  return sweep.done();
}

std::vector<BreakdownColumn> columnsOf(const std::vector<StepBreakdown>& steps, size_t first,
                                       size_t last, double widthPx) {
  std::vector<BreakdownColumn> out;
  if (steps.empty() || first > last || last >= steps.size() || widthPx < 1) return out;
  const size_t n = last - first + 1;
  const size_t columns = std::max<size_t>(1, size_t(std::floor(widthPx)));
  const bool perStep = n <= columns;
  const size_t bars = perStep ? n : columns;
  const double barPx = widthPx / double(bars);
  out.reserve(bars);
  for (size_t c = 0; c < bars; ++c) {
    const size_t a = first + (perStep ? c : c * n / bars);
    const size_t b = first + (perStep ? c : (c + 1) * n / bars - 1);
    BreakdownColumn col;
    col.x0 = double(c) * barPx;
    col.x1 = double(c + 1) * barPx;
    col.first = a;
    col.last = b;
    col.slowest = a;
    for (size_t i = a; i <= b; ++i) {
      for (size_t k = 0; k < size_t(kTimeCategoryCount); ++k) {
        col.meanNs[k] += double(steps[i].ns[k]);
      }
      if (double(steps[i].durNs) > col.maxDurNs) {
        col.maxDurNs = double(steps[i].durNs);
        col.slowest = i;
      }
    }
    for (double& v : col.meanNs) v /= double(b - a + 1);
    out.push_back(col);
  }
  return out;
}

std::optional<StepWindow> lastStepsWindow(const std::vector<storage::StepRow>& rows, int count) {
  std::vector<const storage::StepRow*> rank0;
  for (auto it = rows.rbegin(); it != rows.rend() && int(rank0.size()) < std::max(count, 1);
       ++it) {
    if (it->rank == 0) rank0.push_back(&*it);
  }
  if (rank0.empty()) return std::nullopt;
  StepWindow w;
  w.lastStep = rank0.front()->step;
  w.firstStep = rank0.back()->step;
  w.startNs = rank0.back()->startNs;
  w.endNs = rank0.front()->endNs;
  for (const storage::StepRow* r : rank0) {
    w.startNs = std::min(w.startNs, r->startNs);
    w.endNs = std::max(w.endNs, r->endNs);
  }
  return w;
}

}  // namespace moewb::gui
