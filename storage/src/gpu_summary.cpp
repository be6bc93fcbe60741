// Kernel and GPU idle-gap summaries (see moewb/storage/gpu_summary.h).
#include "moewb/storage/gpu_summary.h"

#include <algorithm>
#include <utility>

#include "moewb/storage/gpu_rows.h"
#include "sqlite_trace_reader.h"

namespace moewb::storage {

namespace {

struct Interval {
  int64_t startNs = 0;
  int64_t endNs = 0;
};

constexpr int64_t kGapBucketLimitsNs[3] = {10'000, 100'000, 1'000'000};

void countGap(GpuIdleSummary& summary, int64_t step, int64_t startNs, int64_t durNs) {
  if (durNs <= 0) return;
  summary.gapCount++;
  size_t bucket = 0;
  while (bucket < 3 && durNs >= kGapBucketLimitsNs[bucket]) ++bucket;
  summary.gapsByLength[bucket]++;
  if (durNs > summary.largestGapNs) {
    summary.largestGapNs = durNs;
    summary.largestGapStep = step;
    summary.largestGapStartNs = startNs;
  }
}

// Adds one step: `work` holds the GPU intervals sorted by start; `first` is the first interval
// that may overlap the step (advanced past intervals that end before it).
void addStep(GpuIdleSummary& summary, const SliceRow& step, const std::vector<Interval>& work,
             size_t& first) {
  // Times and sums come from the file: ends and totals saturate instead of overflowing (the
  // reader counts clamps in its stats; a summary of a hostile file only has to stay defined).
  const int64_t stepStart = step.startNs, stepEnd = detail::saturatingAdd(step.startNs, step.durNs);
  while (first < work.size() && work[first].endNs <= stepStart && work[first].startNs < stepStart)
    ++first;
  int64_t cursor = stepStart;  // end of the busy union so far
  int64_t busy = 0;
  bool any = false;
  for (size_t i = first; i < work.size() && work[i].startNs < stepEnd; ++i) {
    const int64_t start = std::max(work[i].startNs, stepStart);
    const int64_t end = std::min(work[i].endNs, stepEnd);
    if (end <= start) continue;
    any = true;
    if (start > cursor) countGap(summary, step.step, cursor, start - cursor);
    if (end > cursor) {
      busy += end - std::max(start, cursor);
      cursor = end;
    }
  }
  if (!any) return;
  countGap(summary, step.step, cursor, stepEnd - cursor);
  summary.steps++;
  summary.stepNs = detail::saturatingAdd(summary.stepNs, step.durNs);
  summary.busyNs = detail::saturatingAdd(summary.busyNs, busy);
  summary.idleNs = detail::saturatingAdd(summary.idleNs, step.durNs - busy);
}

}  // namespace

Result<KernelSummary> kernelSummary(TraceReader& reader, int top) {
  KernelSummary summary;
  MOEWB_ASSIGN_OR_RETURN(std::vector<PhaseTotal> kernels, reader.phaseTotals(kCategoryKernel));
  MOEWB_ASSIGN_OR_RETURN(std::vector<PhaseTotal> steps, reader.phaseTotals(kCategoryStep));
  for (const PhaseTotal& k : kernels) {
    summary.kernelCount = detail::saturatingAdd(summary.kernelCount, k.count);
    summary.kernelTotalNs = detail::saturatingAdd(summary.kernelTotalNs, k.totalNs);
  }
  for (const PhaseTotal& s : steps) {
    summary.stepTotalNs = detail::saturatingAdd(summary.stepTotalNs, s.totalNs);
  }
  if (top >= 0 && kernels.size() > size_t(top)) kernels.resize(size_t(top));
  summary.topKernels = std::move(kernels);
  return summary;
}

Result<GpuIdleSummary> gpuIdleSummary(TraceReader& reader) {
  std::vector<SliceRow> steps;
  std::vector<Interval> work;  // in start order (forEachSlice order)
  MOEWB_RETURN_IF_ERROR(reader.forEachSlice([&](const SliceRow& s) {
    if (s.category == kCategoryStep) {
      steps.push_back(s);
    } else if (isGpuWorkCategory(s.category) && s.durNs > 0) {
      work.push_back({s.startNs, detail::saturatingAdd(s.startNs, s.durNs)});
    }
    return true;
  }));
  GpuIdleSummary summary;
  if (work.empty() || steps.empty()) return summary;
  TrackId stepTrack = steps.front().track;
  for (const SliceRow& s : steps) stepTrack = std::min(stepTrack, s.track);
  // Intervals sorted by start; `first` only moves forward because steps are in start order and
  // do not overlap on one track. Long intervals that span a step boundary stay reachable because
  // `first` skips only intervals that end before the step.
  size_t first = 0;
  for (const SliceRow& s : steps) {
    if (s.track == stepTrack) addStep(summary, s, work, first);
  }
  return summary;
}

}  // namespace moewb::storage
