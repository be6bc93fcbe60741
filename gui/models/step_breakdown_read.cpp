// Per-step time breakdown: the one-pass reader with one sweep per rank, the slowest rank per step
// and the shown view of a parallel trace (see moewb/gui/step_breakdown.h).
#include <algorithm>
#include <map>

#include "moewb/gui/step_breakdown.h"
#include "moewb/storage/gpu_rows.h"

namespace moewb::gui {

namespace {

// The GPU work row's engine phase ("" for other slices).
std::string_view workPhase(const storage::GpuWorkRow* gpu) {
  if (!gpu) return {};
  if (gpu->kernel) return gpu->kernel->phase;
  if (gpu->memcpy) return gpu->memcpy->phase;
  if (gpu->memset) return gpu->memset->phase;
  return {};
}

// Accumulates one rank's slices, in start order, into the steps they overlap; a step is
// attributed as soon as a slice starts after its end (nothing later can overlap it).
class StepSweep {
 public:
  StepSweep(std::vector<storage::StepRow> steps, BreakdownSource source)
      : m_steps(std::move(steps)), m_work(m_steps.size()), m_source(source) {
    m_out.reserve(m_steps.size());
  }

  void add(int64_t startNs, int64_t endNs, TimeCategory category) {
    while (m_first < m_steps.size() && m_steps[m_first].endNs <= startNs) finish(m_first++);
    for (size_t i = m_first; i < m_steps.size() && m_steps[i].startNs < endNs; ++i) {
      if (m_steps[i].endNs > startNs) m_work[i].push_back({startNs, endNs, category});
    }
  }

  std::vector<StepBreakdown> done() {
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
    b.rank = row.rank;
    m_out.push_back(b);
    std::vector<WorkInterval>().swap(m_work[i]);
  }

  std::vector<storage::StepRow> m_steps;  // one rank's, in start order
  std::vector<std::vector<WorkInterval>> m_work;
  BreakdownSource m_source;
  size_t m_first = 0;  // steps before it are attributed
  std::vector<StepBreakdown> m_out;
};

// The first run's step rows grouped by rank (ascending), each in start order.
Result<std::map<int32_t, std::vector<storage::StepRow>>> stepsByRank(
    storage::TraceReader& reader) {
  std::map<int32_t, std::vector<storage::StepRow>> out;
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::RunRow> runs, reader.runs());
  if (runs.empty()) return out;
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::StepRow> all, reader.steps(runs.front().id));
  for (storage::StepRow& r : all) out[r.rank].push_back(std::move(r));
  for (auto& [rank, rows] : out) {
    std::sort(rows.begin(), rows.end(), [](const storage::StepRow& a, const storage::StepRow& b) {
      return a.startNs < b.startNs;
    });
  }
  return out;
}

}  // namespace

Result<StepBreakdownSet> readStepBreakdowns(storage::TraceReader& reader,
                                            const std::atomic<bool>* cancel) {
  MOEWB_ASSIGN_OR_RETURN(auto stepRows, stepsByRank(reader));
  if (stepRows.empty()) return StepBreakdownSet{};
  MOEWB_ASSIGN_OR_RETURN(std::vector<storage::TrackRow> tracks, reader.tracks());
  bool gpu = false;
  for (const storage::TrackRow& t : tracks) gpu = gpu || t.kind == storage::kTrackKindStream;
  const BreakdownSource source =
      gpu ? BreakdownSource::kGpuKernels : BreakdownSource::kHostPhases;
  // One sweep per rank with steps; each track feeds its rank's sweep (null: a rank without
  // steps, whose slices are skipped).
  std::vector<int32_t> ranks;
  std::vector<StepSweep> sweeps;
  sweeps.reserve(stepRows.size());
  for (auto& [rank, rows] : stepRows) {
    ranks.push_back(rank);
    sweeps.emplace_back(std::move(rows), source);
  }
  std::map<int64_t, StepSweep*> sweepOf;
  for (const storage::TrackRow& t : tracks) {
    auto it = std::lower_bound(ranks.begin(), ranks.end(), t.rank);
    if (it == ranks.end() || *it != t.rank) continue;
    sweepOf[t.id.value] = &sweeps[size_t(it - ranks.begin())];
  }
  bool stopped = false;
  auto visit = [&](const storage::SliceRow& s, const storage::GpuWorkRow* work) {
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      stopped = true;
      return false;
    }
    auto sweep = sweepOf.find(s.track.value);
    if (sweep == sweepOf.end() || s.durNs <= 0) return true;
    if (gpu) {
      if (!storage::isGpuWorkCategory(s.category)) return true;
    } else if (s.category == storage::kCategoryPhase) {
      // Phases (depth 2) and the optimizer pass; the forward/backward passes only contain them.
      if (s.depth < 2 && s.name != "optimizer") return true;
    } else if (s.category != storage::kCategoryCollective) {
      return true;
    }
    sweep->second->add(s.startNs, s.startNs + s.durNs,
                       classifyWork(s.name, s.category, workPhase(work)));
    return true;
  };
  if (gpu) {
    MOEWB_RETURN_IF_ERROR(reader.forEachSliceWithGpuWork(visit));
  } else {
    MOEWB_RETURN_IF_ERROR(
        reader.forEachSlice([&](const storage::SliceRow& s) { return visit(s, nullptr); }));
  }
  if (stopped) return cancelled("the step breakdown was cancelled");
  StepBreakdownSet out;
  out.source = source;
  if (sweeps.size() == 1) {
    out.steps = sweeps.front().done();
    return out;
  }
  out.ranks = std::move(ranks);
  for (StepSweep& sweep : sweeps) out.byRank.push_back(sweep.done());
  out.steps = slowestPerStep(out.byRank);
  return out;
}

std::vector<StepBreakdown> slowestPerStep(const std::vector<std::vector<StepBreakdown>>& byRank) {
  // step -> the ranks' breakdowns of it (one per rank: the first in start order).
  std::map<int64_t, std::vector<const StepBreakdown*>> of;
  size_t ranks = 0;
  for (const std::vector<StepBreakdown>& steps : byRank) {
    if (steps.empty()) continue;
    ++ranks;
    for (const StepBreakdown& b : steps) {
      auto& list = of[b.step];
      if (list.empty() || list.back()->rank != b.rank) list.push_back(&b);
    }
  }
  std::vector<StepBreakdown> out;
  std::vector<const StepBreakdown*> sorted;
  for (auto& [step, list] : of) {
    if (list.size() != ranks) continue;  // not committed by every rank yet
    sorted = list;
    // Ascending duration, ties by rank: the last is the slowest (ties: the lowest rank).
    std::sort(sorted.begin(), sorted.end(), [](const StepBreakdown* a, const StepBreakdown* b) {
      return a->durNs != b->durNs ? a->durNs < b->durNs : a->rank > b->rank;
    });
    StepBreakdown slowest = *sorted.back();
    const StepBreakdown* median = sorted[(sorted.size() - 1) / 2];
    slowest.rankCount = int32_t(sorted.size());
    slowest.medianRank = median->rank;
    slowest.medianDurNs = median->durNs;
    out.push_back(slowest);
  }
  return out;
}

StepBreakdownSet shownBreakdown(const StepBreakdownSet& all, std::optional<int32_t> rank) {
  StepBreakdownSet out;
  out.source = all.source;
  out.ranks = all.ranks;
  out.steps = all.steps;
  out.shownRank = all.shownRank;
  if (!all.isParallel() || all.byRank.empty()) return out;
  if (!rank) {
    if (all.shownRank) out.steps = slowestPerStep(all.byRank);
    out.shownRank.reset();
    return out;
  }
  auto it = std::find(all.ranks.begin(), all.ranks.end(), *rank);
  if (it == all.ranks.end() || size_t(it - all.ranks.begin()) >= all.byRank.size()) return out;
  out.steps = all.byRank[size_t(it - all.ranks.begin())];
  out.shownRank = *rank;
  return out;
}

}  // namespace moewb::gui
