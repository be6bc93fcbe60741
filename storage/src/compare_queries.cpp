// The reading half of compare_queries.h: one sample of a trace (sampleTrace) and the step of a
// live config change to split a trace at (findPatchSplit). Reads through TraceReader only.
#include "moewb/storage/compare_queries.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "moewb/storage/gpu_rows.h"
#include "sqlite_trace_reader.h"
#include "sqlite_util.h"
#include "trace_open.h"

namespace moewb::storage {
namespace {

std::string stepList(const std::vector<int64_t>& steps) {
  return std::to_string(steps.front()) + ".." + std::to_string(steps.back());
}

// The sampled steps: the lowest rank's committed steps inside the range (options or warm-up).
struct StepSelection {
  int32_t rank = 0;
  StepRange range;
  std::vector<const StepRow*> rows;                 // the rank's rows in range, by step
  std::unordered_map<int64_t, size_t> indexOfStep;  // step -> index into rows
  // Slices start in time order: none of a sampled step starts after the end of the rank's next
  // committed step (its GPU work included), so the pass over the slices stops there.
  int64_t stopAfterNs = std::numeric_limits<int64_t>::max();
  // Nor before the start of the rank's committed step before the first sampled one.
  int64_t startAfterNs = std::numeric_limits<int64_t>::min();
  size_t committedSteps = 0;  // the rank's committed steps in the file
};

Result<StepSelection> selectSteps(const std::string& path, const std::vector<StepRow>& steps,
                                  const SampleOptions& options) {
  if (steps.empty()) {
    return invalidArgument(path + " has no committed steps to compare");
  }
  StepSelection sel;
  sel.rank = steps.front().rank;
  for (const StepRow& s : steps) sel.rank = std::min(sel.rank, s.rank);
  std::vector<const StepRow*> all;
  for (const StepRow& s : steps) {
    if (s.rank == sel.rank) all.push_back(&s);
  }
  std::sort(all.begin(), all.end(), [](auto* x, auto* y) { return x->step < y->step; });
  std::vector<int64_t> numbers;
  for (const StepRow* s : all) numbers.push_back(s->step);
  sel.range = options.range;
  const int64_t warmup = std::max<int64_t>(options.warmupSteps, 0);
  if (warmup >= int64_t(all.size())) {
    return invalidArgument(path + " has " + std::to_string(all.size()) + " committed step(s) (" +
                           stepList(numbers) + "), all inside the " + std::to_string(warmup) +
                           "-step warm-up that is left out; set the warm-up to 0 steps");
  }
  const int64_t firstAfterWarmup = all[size_t(warmup)]->step;
  for (const StepRow* s : all) {
    const bool inRange = s->step >= sel.range.first && s->step < sel.range.end;
    if (!inRange || s->step < firstAfterWarmup) continue;
    sel.indexOfStep[s->step] = sel.rows.size();
    sel.rows.push_back(s);
  }
  sel.committedSteps = all.size();
  for (const StepRow* s : all) {
    if (!sel.rows.empty() && s->step < sel.rows.front()->step) sel.startAfterNs = s->startNs;
    if (!sel.rows.empty() && s->step > sel.rows.back()->step) {
      sel.stopAfterNs = s->endNs;
      break;
    }
  }
  if (sel.rows.empty()) {
    return invalidArgument(path + " has no committed step in steps " + formatStepRange(sel.range) +
                           " (it has steps " + stepList(numbers) +
                           (warmup > 0
                                ? ", the first " + std::to_string(warmup) + " left out as warm-up"
                                : std::string()) +
                           ")");
  }
  return sel;
}

// Per name, its time in each sampled step.
struct NameAccumulator {
  CompareKind kind = CompareKind::kPhase;
  std::vector<int64_t> ns;  // [sampled steps]
  int64_t slices = 0;
};

struct SliceTotals {
  std::map<std::string, NameAccumulator> phases;
  std::map<std::string, NameAccumulator> gpu;
  std::vector<bool> stepHasGpuWork;  // [sampled steps]
};

Result<SliceTotals> readSliceTotals(TraceReader& reader, const StepSelection& sel) {
  MOEWB_ASSIGN_OR_RETURN(const auto tracks, reader.tracks());
  std::unordered_map<int64_t, int32_t> rankOfTrack;
  for (const TrackRow& t : tracks) rankOfTrack[t.id.value] = t.rank;
  SliceTotals totals;
  totals.stepHasGpuWork.assign(sel.rows.size(), false);
  MOEWB_RETURN_IF_ERROR(reader.forEachSlice([&](const SliceRow& s) {
    if (s.startNs > sel.stopAfterNs) return false;
    if (s.startNs < sel.startAfterNs) return true;
    auto step = sel.indexOfStep.find(s.step);
    if (step == sel.indexOfStep.end()) return true;
    auto rank = rankOfTrack.find(s.track.value);
    if (rank == rankOfTrack.end() || rank->second != sel.rank) return true;
    const bool gpu = isGpuWorkCategory(s.category);
    if (!gpu && isGpuCaptureCategory(s.category)) return true;  // API calls, syncs, NVTX
    auto& byName = gpu ? totals.gpu : totals.phases;
    NameAccumulator& acc = byName[s.name];
    if (acc.ns.empty()) {
      acc.kind = gpu ? CompareKind::kKernel : CompareKind::kPhase;
      acc.ns.assign(sel.rows.size(), 0);
    }
    acc.ns[step->second] += std::max<int64_t>(s.durNs, 0);
    acc.slices += 1;
    if (gpu) totals.stepHasGpuWork[step->second] = true;
    return true;
  }));
  return totals;
}

// The same totals from an SQLite trace in one sequential scan of `slice` on a read-only
// connection of its own (no sort by time and string ids instead of texts per row: about 5x
// faster than forEachSlice at 10M slices). A sample of less than half the steps reads only its
// time window through the slice(start_ns) index (the bounds of StepSelection). Rows are grouped
// by (name id, category id) and the texts read once per group at the end.
Result<SliceTotals> scanSliceTotals(const std::string& path, const StepSelection& sel) {
  MOEWB_ASSIGN_OR_RETURN(detail::UntrustedTrace trace,
                         detail::openUntrustedTrace(path, ReaderOptions{}.queryTimeLimit));
  const bool windowed = sel.rows.size() * 2 < sel.committedSteps;
  std::string sql =
      "SELECT step, name, category, dur_ns FROM slice WHERE step BETWEEN ?1 AND ?2 AND track "
      "IN (SELECT id FROM track WHERE rank = ?3)";
  if (windowed) sql += " AND start_ns BETWEEN ?4 AND ?5";
  MOEWB_ASSIGN_OR_RETURN(detail::Statement q, detail::Statement::prepare(trace.db, sql));
  MOEWB_RETURN_IF_ERROR(q.bindAll(sel.rows.front()->step, sel.rows.back()->step, sel.rank));
  if (windowed) {
    MOEWB_RETURN_IF_ERROR(q.bindInt(4, sel.startAfterNs));
    MOEWB_RETURN_IF_ERROR(q.bindInt(5, sel.stopAfterNs));
  }
  struct Group {
    std::vector<int64_t> ns;       // [sampled steps]
    std::vector<uint8_t> present;  // [sampled steps]: the group has a slice in the step
    int64_t slices = 0;
  };
  std::map<std::pair<int64_t, int64_t>, Group> groups;  // (name id, category id)
  std::pair<int64_t, int64_t> lastKey{-1, -1};
  Group* last = nullptr;
  MOEWB_RETURN_IF_ERROR(detail::forEachRow(q, [&](const detail::Statement& s) {
    auto step = sel.indexOfStep.find(s.columnInt(0));
    if (step == sel.indexOfStep.end()) return;
    const std::pair<int64_t, int64_t> key{s.columnInt(1), s.columnInt(2)};
    if (last == nullptr || key != lastKey) {
      last = &groups[key];
      lastKey = key;
      if (last->ns.empty()) {
        last->ns.assign(sel.rows.size(), 0);
        last->present.assign(sel.rows.size(), 0);
      }
    }
    last->ns[step->second] += std::max<int64_t>(s.columnInt(3), 0);
    last->present[step->second] = 1;
    last->slices += 1;
  }));
  MOEWB_ASSIGN_OR_RETURN(
      detail::Statement text,
      detail::Statement::prepare(trace.db, "SELECT text FROM string WHERE id = ?1"));
  auto textOf = [&](int64_t id) -> Result<std::string> {
    MOEWB_RETURN_IF_ERROR(text.bindInt(1, id));
    MOEWB_ASSIGN_OR_RETURN(const std::optional<std::string> found,
                           detail::firstRow(text, detail::column0Text));
    return found.value_or(std::string());
  };
  SliceTotals totals;
  totals.stepHasGpuWork.assign(sel.rows.size(), false);
  for (auto& [key, group] : groups) {
    MOEWB_ASSIGN_OR_RETURN(const std::string name, textOf(key.first));
    MOEWB_ASSIGN_OR_RETURN(const std::string category, textOf(key.second));
    const bool gpu = isGpuWorkCategory(category);
    if (!gpu && isGpuCaptureCategory(category)) continue;
    NameAccumulator& acc = (gpu ? totals.gpu : totals.phases)[name];
    if (acc.ns.empty()) {
      acc.kind = gpu ? CompareKind::kKernel : CompareKind::kPhase;
      acc.ns.assign(sel.rows.size(), 0);
    }
    for (size_t i = 0; i < group.ns.size(); ++i) {
      acc.ns[i] += group.ns[i];
      if (gpu && group.present[i]) totals.stepHasGpuWork[i] = true;
    }
    acc.slices += group.slices;
  }
  return totals;
}

void addNames(const std::map<std::string, NameAccumulator>& byName,
              const std::vector<bool>& sampled, int64_t sampledSteps, TraceSample& out) {
  for (const auto& [name, acc] : byName) {
    std::vector<double> values;
    for (size_t i = 0; i < acc.ns.size(); ++i) {
      if (sampled[i]) values.push_back(double(acc.ns[i]));
    }
    NameStats stats;
    stats.name = name;
    stats.kind = acc.kind;
    stats.perStepNs = summarize(std::move(values));
    stats.slicesPerStep = sampledSteps > 0 ? double(acc.slices) / double(sampledSteps) : 0;
    out.names.push_back(std::move(stats));
  }
}

void addStepMetrics(const std::vector<StepRow>& all, const StepSelection& sel, TraceSample& out) {
  std::vector<double> stepNs, loss, rate;
  std::vector<double> ratePerStep(sel.rows.size(), 0.0);
  for (const StepRow& s : all) {
    auto it = sel.indexOfStep.find(s.step);
    if (it != sel.indexOfStep.end()) ratePerStep[it->second] += s.tokensPerSecond;
  }
  for (size_t i = 0; i < sel.rows.size(); ++i) {
    const StepRow& s = *sel.rows[i];
    stepNs.push_back(double(s.endNs - s.startNs));
    loss.push_back(s.loss);
    out.series.push_back({s.step, s.loss, s.endNs - s.startNs});
  }
  const size_t tail = std::max<size_t>(1, (loss.size() + 9) / 10);
  out.lossEnd = summarize(std::vector<double>(loss.end() - ptrdiff_t(tail), loss.end()));
  out.stepNs = summarize(std::move(stepNs));
  out.loss = summarize(std::move(loss));
  out.tokensPerSecond = summarize(std::move(ratePerStep));
}

// Per layer and step: max over experts / mean over the experts the layer has rows for in the
// sample, of tokens summed over ranks. The rows are read in chunks of steps, so memory stays
// O(chunk rows + steps * layers) however long the run.
Status addImbalance(TraceReader& reader, const StepSelection& sel, TraceSample& out) {
  constexpr size_t kStepsPerChunk = 2048;
  struct StepLayer {
    int64_t largest = 0;  // tokens of the busiest expert
    int64_t total = 0;
  };
  std::map<int32_t, std::set<int32_t>> expertsOfLayer;
  std::map<int32_t, std::vector<std::pair<int64_t, StepLayer>>> perLayer;  // layer -> by step
  for (size_t first = 0; first < sel.rows.size(); first += kStepsPerChunk) {
    const size_t last = std::min(first + kStepsPerChunk, sel.rows.size()) - 1;
    MOEWB_ASSIGN_OR_RETURN(const auto rows,
                           reader.expertLoad(sel.rows[first]->step, sel.rows[last]->step));
    // (step, layer) -> expert -> tokens summed over ranks; rows come ordered by step.
    std::map<std::pair<int64_t, int32_t>, std::map<int32_t, int64_t>> tokens;
    for (const ExpertLoadRow& r : rows) {
      if (!sel.indexOfStep.contains(r.step)) continue;
      expertsOfLayer[r.layer].insert(r.expert);
      tokens[{r.step, r.layer}][r.expert] += r.tokens;
    }
    for (const auto& [key, byExpert] : tokens) {
      StepLayer acc;
      for (const auto& [expert, count] : byExpert) {
        acc.total += count;
        acc.largest = std::max(acc.largest, count);
      }
      if (acc.total > 0) perLayer[key.second].push_back({key.first, acc});
    }
  }
  std::map<int64_t, std::pair<double, int>> perStep;  // step -> (sum of ratios, layers)
  for (const auto& [layer, values] : perLayer) {
    const double experts = double(expertsOfLayer[layer].size());
    std::vector<double> ratios;
    for (const auto& [step, acc] : values) {
      const double ratio = double(acc.largest) * experts / double(acc.total);
      ratios.push_back(ratio);
      perStep[step].first += ratio;
      perStep[step].second += 1;
    }
    out.layers.push_back({layer, summarize(std::move(ratios))});
  }
  std::vector<double> stepMeans;
  for (const auto& [step, acc] : perStep) stepMeans.push_back(acc.first / double(acc.second));
  out.imbalance = summarize(std::move(stepMeans));
  return Status::ok();
}

}  // namespace

Result<TraceSample> sampleTrace(TraceReader& reader, const SampleOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(const auto runs, reader.runs());
  if (runs.empty()) return invalidArgument(reader.path() + " has no run to compare");
  MOEWB_ASSIGN_OR_RETURN(const auto steps, reader.steps(runs.front().id));
  MOEWB_ASSIGN_OR_RETURN(const StepSelection sel, selectSteps(reader.path(), steps, options));
  TraceSample out;
  out.path = reader.path();
  out.runName = runs.front().name;
  out.worldSize = runs.front().worldSize;
  out.rank = sel.rank;
  out.range = sel.range;
  out.firstStep = sel.rows.front()->step;
  out.lastStep = sel.rows.back()->step;
  addStepMetrics(steps, sel, out);
  // The SQLite reader's file is scanned directly; other readers go through forEachSlice.
  const bool sqlite = dynamic_cast<detail::SqliteTraceReader*>(&reader) != nullptr;
  MOEWB_ASSIGN_OR_RETURN(const SliceTotals totals, sqlite ? scanSliceTotals(reader.path(), sel)
                                                          : readSliceTotals(reader, sel));
  out.phaseSteps = int64_t(sel.rows.size());
  out.gpuSteps = std::count(totals.stepHasGpuWork.begin(), totals.stepHasGpuWork.end(), true);
  addNames(totals.phases, std::vector<bool>(sel.rows.size(), true), out.phaseSteps, out);
  addNames(totals.gpu, totals.stepHasGpuWork, out.gpuSteps, out);
  MOEWB_RETURN_IF_ERROR(addImbalance(reader, sel, out));
  return out;
}

Result<PatchSplit> findPatchSplit(TraceReader& reader, int64_t after) {
  MOEWB_ASSIGN_OR_RETURN(auto changes, reader.configChanges());
  std::erase_if(changes, [&](const ConfigChangeRow& c) { return c.step < after; });
  if (changes.empty()) {
    return invalidArgument(reader.path() + " has no live config change" +
                           (after > 0 ? " at or after step " + std::to_string(after) : "") +
                           " to split at; give the two step ranges instead");
  }
  std::stable_sort(changes.begin(), changes.end(),
                   [](const auto& x, const auto& y) { return x.step < y.step; });
  PatchSplit split;
  split.step = changes.front().step;
  for (const ConfigChangeRow& c : changes) {
    if (c.step != split.step) {
      split.nextStep = c.step;
      break;
    }
    if (!split.description.empty()) split.description += "; ";
    split.description += c.key + " " + c.oldValue + " -> " + c.newValue + " (" + c.source + ")";
  }
  return split;
}

}  // namespace moewb::storage
