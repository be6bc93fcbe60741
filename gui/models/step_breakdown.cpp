// Per-step time breakdown: the category mapping, the priority sweep and the pixel-column layout
// (see moewb/gui/step_breakdown.h; the reader is in step_breakdown_read.cpp).
#include "moewb/gui/step_breakdown.h"

#include <algorithm>
#include <cctype>
#include <cmath>

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
