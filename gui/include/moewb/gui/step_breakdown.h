// Per-step time breakdown (the "Step breakdown" dock, like the PyTorch profiler's overview): each
// step of each rank split into mixers, experts, all-to-all, other collectives, optimizer, loss,
// other and, for traces with GPU capture, GPU idle. A parallel trace is shown per step as its
// slowest rank's breakdown (slowestPerStep: the rank whose step took longest, with the median
// rank's time beside it) or as one chosen rank's (shownBreakdown).
//
// classifyWork is the one mapping from a slice (name, slice category, engine phase) to a
// TimeCategory; everything that shows a category uses it. attributeStep splits one step's span
// among the categories of the work intervals inside it: each instant goes to the category of
// highest priority active then, and instants with nothing active to "other" (host phases) or
// "GPU idle" (GPU kernels), so a step's parts add up to its duration exactly.
// Two sources: with GPU capture the intervals are the kernels, copies and memsets of the rank's
// streams (attributed by their engine phase; compute has priority over communication, so the
// all-to-all and collective parts are the communication no compute overlapped, and GPU idle is
// the step time with no GPU work, as `moewb info`'s GPU idle); without it they are the rank's
// host phases (depth-2 phase slices, the optimizer pass) and its collectives (communication has
// priority: a host phase's span includes the waits of the collectives it called).
// readStepBreakdowns streams the file once (TraceReader::forEachSlice[WithGpuWork]) into one
// sweep per rank, each keeping only its open steps' intervals, so memory is O(ranks x (steps +
// slices of one step)); about the cost of one pass over the slices (the model runs it on a worker
// thread), plus O(ranks x steps log steps) for the slowest rank per step. columnsOf lays steps
// out in pixel columns (one bar per step, or several steps per column for long runs). Pure
// functions; any thread. The reader is in step_breakdown_read.cpp.
#pragma once

#include <QColor>
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

enum class TimeCategory : int {
  kMixer,       // attention, KDA, sparse attention (the layer's mixer)
  kExperts,     // router, permute / dispatch, expert GEMMs, combine
  kAllToAll,    // EP all-to-all (host collectives or NCCL send/recv kernels)
  kCollective,  // every other collective (all-reduce, all-gather, reduce-scatter, ...)
  kOptimizer,   // the optimizer pass
  kLoss,        // the loss head
  kOther,       // everything else (embedding, glue, host time outside phases)
  kGpuIdle,     // no GPU work (GPU source only)
};
inline constexpr int kTimeCategoryCount = 8;

// Where a breakdown's intervals come from.
enum class BreakdownSource { kHostPhases, kGpuKernels };

// "mixers", "experts", "all-to-all", "other collectives", "optimizer", "loss", "other",
// "GPU idle".
const char* timeCategoryName(TimeCategory category);
// The fill colour of `category` (the timeline's phase colours where there is one).
QColor timeCategoryColor(TimeCategory category);

// The category of a slice: `name` its name (kernels: the demangled name), `sliceCategory` its
// category ("phase", "collective", "kernel", "memcpy", "memset", ...) and `phase` the engine
// phase GPU work ran under ("experts.fwd"; "" for host slices, which are classified by name).
// Collectives: all-to-all by op name, else kCollective; NCCL kernels: all-to-all for send/recv
// and all-to-all kernels or the dispatch/combine phases, else kCollective; other slices by the
// phase (host slices: the name) without its ".fwd"/".bwd" suffix.
TimeCategory classifyWork(std::string_view name, std::string_view sliceCategory,
                          std::string_view phase);

// One interval of work inside a step.
struct WorkInterval {
  int64_t startNs = 0;
  int64_t endNs = 0;  // exclusive
  TimeCategory category = TimeCategory::kOther;
};

// Time per category, ns, indexed by TimeCategory.
using CategoryNs = std::array<int64_t, kTimeCategoryCount>;

// Splits [startNs, endNs) among the categories of `work` (clipped to it; any order) by the
// priority of `source` (see the file comment); the parts sum to endNs - startNs (0 for an empty
// span). O(k log k) for k intervals.
CategoryNs attributeStep(const std::vector<WorkInterval>& work, int64_t startNs, int64_t endNs,
                         BreakdownSource source);

// One step's breakdown on one rank.
struct StepBreakdown {
  int64_t step = 0;
  int64_t startNs = 0;  // the step row's span (of `rank`)
  int64_t durNs = 0;
  CategoryNs ns{};      // parts, summing to durNs
  int32_t rank = 0;     // the rank whose step this is
  // Set by slowestPerStep only (0 / -1 otherwise): the ranks compared and the median one.
  int32_t rankCount = 0;     // ranks that committed this step
  int32_t medianRank = -1;   // the median rank by duration (the lower middle for an even count)
  int64_t medianDurNs = 0;   // its duration
};

struct StepBreakdownSet {
  BreakdownSource source = BreakdownSource::kHostPhases;
  // The steps shown, in step order: a one-rank trace's; for a parallel trace as read, the
  // slowest rank's per step (slowestPerStep); shownBreakdown picks one rank's instead.
  std::vector<StepBreakdown> steps;
  // Parallel traces (ranks.size() > 1) only, else empty: the ranks with step rows, ascending,
  // and each one's committed steps in step order (byRank[i] is ranks[i]'s).
  std::vector<int32_t> ranks;
  std::vector<std::vector<StepBreakdown>> byRank;
  // Which view `steps` holds: nullopt the slowest rank per step, else that rank.
  std::optional<int32_t> shownRank;
  bool isParallel() const { return ranks.size() > 1; }
};

// The breakdown of every committed step of the file's first run, for every rank with step rows.
// GPU source when any rank has stream tracks, host phases otherwise. A one-rank trace fills
// `steps` only; a parallel one fills ranks and byRank, and `steps` with slowestPerStep(byRank).
// `cancel` (may be null) stops the pass early (kCancelled). Errors: read errors of the reader.
Result<StepBreakdownSet> readStepBreakdowns(storage::TraceReader& reader,
                                            const std::atomic<bool>* cancel = nullptr);

// Per step that every non-empty rank of `byRank` committed (in step order): the breakdown of the
// rank whose step took longest (ties: the lowest rank), with rankCount, medianRank and
// medianDurNs set. Empty when `byRank` is. O(R x S log S) for R ranks of S steps; pure.
std::vector<StepBreakdown> slowestPerStep(const std::vector<std::vector<StepBreakdown>>& byRank);

// `all` (as read) showing `rank`'s steps (nullopt: the slowest rank per step), without byRank
// (what the view keeps): steps, source, ranks and shownRank. A rank not in all.ranks, or a
// one-rank trace, or a set without byRank (a view) gives `all` unchanged. O(steps).
StepBreakdownSet shownBreakdown(const StepBreakdownSet& all, std::optional<int32_t> rank);

// Bars of a stacked chart: one per step, or one per pixel column holding several steps.
struct BreakdownColumn {
  double x0 = 0, x1 = 0;   // horizontal extent in plot pixels (x1 > x0)
  size_t first = 0;        // index of its first step in the input
  size_t last = 0;         // index of its last step (inclusive)
  std::array<double, kTimeCategoryCount> meanNs{};  // mean part per step over its steps
  double maxDurNs = 0;     // the longest step's duration
  size_t slowest = 0;      // that step's index
};

// Lays out steps [first, last] (indices into `steps`, inclusive) over `widthPx` pixels: one bar
// per step while there are at most as many steps as whole pixels, else one per pixel column
// with the mean of its steps' parts (and its slowest step, so a spike stays findable). Empty for
// an empty range or widthPx < 1. O(steps in the range).
std::vector<BreakdownColumn> columnsOf(const std::vector<StepBreakdown>& steps, size_t first,
                                       size_t last, double widthPx);

// The last `count` (>= 1) steps of `rows` (rank 0's rows; other ranks are skipped): their first
// and last step and the span [first start, last end]. nullopt when there is no rank-0 row.
struct StepWindow {
  int64_t firstStep = 0;
  int64_t lastStep = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
};
std::optional<StepWindow> lastStepsWindow(const std::vector<storage::StepRow>& rows, int count);

}  // namespace moewb::gui
