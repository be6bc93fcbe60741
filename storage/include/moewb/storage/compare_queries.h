// A/B comparison of two samples of training steps: two traces, or two step ranges of one trace
// (before and after a live config change, config_change rows). `moewb diff` and the workbench's
// Compare window both print what these functions compute; neither decides anything itself.
//
// Operations:
//  - sampleTrace(): reads one sample (a step range of one trace) into a TraceSample: per name of
//    host phase (categories step, phase, collective) and per name of GPU work (kernel, memcpy,
//    memset), the time per step; step time, tokens/s and loss per step; expert imbalance per
//    layer per step. Cost: one read of the step rows; for the SQLite reader one sequential scan
//    of the slice table on a connection of its own (a range of less than half the steps: only
//    its time window, through the slice(start_ns) index), for other readers a forEachSlice pass
//    that stops after the range; expert_load in ranges of 2048 steps. Memory O(names * steps in
//    the range). At 10M slices and 208k steps (1.3 GB): ~20 s per half of the steps, 90 MB.
//  - compareSamples(): a pure function of two TraceSamples: per name and per summary metric the
//    delta B - A, the ratio B / A, the noise and whether the delta is significant (the rule is
//    at compareMetric and in docs/CLI.md, "moewb diff").
//  - parseCompareRange(), findPatchSplit(): the step ranges a user asks for.
//
// The time of a name in a step is the sum of the durations of its slices with that step on the
// sample's rank (the lowest rank of the step rows, as `moewb info` reads loss and step time), so
// "experts.fwd" of a 2-layer model is both layers' forward experts time of that step. Steps of
// the range without a slice of the name count as 0 (a phase that stopped running shows as a
// drop to 0), except that GPU names are sampled over the steps with GPU work only (a trace that
// captured every N-th step compares its captured steps).
// Spread is the sample standard deviation over steps (n - 1 in the denominator); p50 the median.
// Thread-safety: the functions share no state; sampleTrace uses the reader it is given (one
// reader per thread, as TraceReader requires).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/base/step_range.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

// Steps [first, end) (moewb/base/step_range.h); end = kOpenEnd reaches the last step.
inline constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();
// Every step.
inline constexpr StepRange kAllSteps{0, kOpenEnd};

// Parses what moewb::parseStepRange accepts ("A:B", steps A..B-1, or one step "A") and the open
// forms "A:" (A to the last step) and ":B" (the first step to B-1). Errors: kInvalidArgument
// naming `option`, the text and the accepted forms.
Result<StepRange> parseCompareRange(const std::string& text, const std::string& option);
// The range as parseCompareRange reads it: "A:B", "A:" or ":B" ("0:" for every step).
std::string formatStepRange(const StepRange& range);

// Summary of one quantity over the steps of a sample.
struct MetricStats {
  int64_t n = 0;  // steps sampled
  double mean = 0;
  double p50 = 0;     // median (mean of the middle two for even n)
  double stddev = 0;  // sample standard deviation over steps (0 for n < 2)
  double min = 0;
  double max = 0;
  bool operator==(const MetricStats&) const = default;
};

// Computes MetricStats of `values` (any order; empty gives all zeros).
MetricStats summarize(std::vector<double> values);

// What a compared name is.
enum class CompareKind : uint8_t {
  kPhase,   // host slices: step, passes, phases, collectives
  kKernel,  // GPU work: kernels, copies, memsets (by demangled name)
};

// Time per step of one name in one sample.
struct NameStats {
  std::string name;
  CompareKind kind = CompareKind::kPhase;
  MetricStats perStepNs;     // ns per step, over the sample's steps (see the header)
  double slicesPerStep = 0;  // mean slices of the name per sampled step
};

// Imbalance of one MoE layer: per step, max over experts / mean over experts of the tokens
// routed to them (summed over ranks; 1.0 = balanced); steps where the layer routed nothing are
// left out.
struct LayerImbalanceStats {
  int32_t layer = 0;
  MetricStats maxOverMean;
};

// One point per sampled step, for overlaid charts.
struct SampleStep {
  int64_t step = 0;
  double loss = 0;
  int64_t stepNs = 0;
};

// Which steps of a trace sampleTrace reads: the committed steps in `range`, less the trace's
// first `warmupSteps` committed steps (one-time set-up: allocations, first touch), whatever the
// range.
struct SampleOptions {
  StepRange range = kAllSteps;
  int64_t warmupSteps = 1;
};

// One sample of a trace: a step range and what the steps in it did.
struct TraceSample {
  std::string path;
  std::string runName;
  StepRange range;        // as asked
  int64_t firstStep = 0;  // first and last committed step sampled
  int64_t lastStep = 0;
  int32_t rank = 0;  // rank whose step rows and slices are sampled
  int32_t worldSize = 1;
  MetricStats stepNs;            // step duration (step row end - start)
  MetricStats tokensPerSecond;   // per step, summed over ranks
  MetricStats loss;              // over every sampled step
  MetricStats lossEnd;           // over the last tenth of the sampled steps (at least 1): "loss at
                                 // the end", compared between runs that trained as long
  int64_t phaseSteps = 0;        // steps sampled for phase names (every step in the range)
  int64_t gpuSteps = 0;          // steps sampled for GPU names (those with GPU work)
  std::vector<NameStats> names;  // phases by name, then GPU work by name
  std::vector<LayerImbalanceStats> layers;  // by layer; empty without expert_load rows
  MetricStats imbalance;                    // per step, the mean over layers of max/mean
  std::vector<SampleStep> series;           // by step
};

// Reads the sample of `options` from `reader` (its file's first run). Errors: kInvalidArgument
// naming the file and the range when no committed step falls in it (with the steps the trace
// has), also for a trace with no committed steps; read errors of the reader.
Result<TraceSample> sampleTrace(TraceReader& reader, const SampleOptions& options = {});

// The first config change of the trace at or after step `after`: its step and a one-line
// description ("moe.top_k 2 -> 1 (cli)", several keys of one step joined with "; ").
struct PatchSplit {
  int64_t step = 0;  // first step that ran with the new values
  std::string description;
  std::optional<int64_t> nextStep;  // the next change's step, if there is one
};
// Errors: kInvalidArgument naming the file when it has no config change (at or after `after`);
// read errors.
Result<PatchSplit> findPatchSplit(TraceReader& reader, int64_t after = 0);

// A compared quantity: the two samples' stats, delta = b.mean - a.mean, ratio = b.mean / a.mean
// (0 when a.mean is 0), noise and the significance flag (compareMetric).
struct MetricDelta {
  MetricStats a;
  MetricStats b;
  double delta = 0;
  double ratio = 0;
  double noise = 0;
  bool significant = false;
};

// noise = 2 * sqrt(a.stddev^2 / a.n + b.stddev^2 / b.n): two standard errors of the difference of
// the means (Welch; about a 95% interval for steps that vary independently). significant = both
// sides have at least 2 steps, |delta| > noise and |delta| >= kMinRelativeDelta * max(|a.mean|,
// |b.mean|), so a real but negligible change (under 1%) is not flagged.
MetricDelta compareMetric(const MetricStats& a, const MetricStats& b);
inline constexpr double kMinRelativeDelta = 0.01;

struct NameDelta {
  std::string name;
  CompareKind kind = CompareKind::kPhase;
  MetricDelta perStepNs;
  bool inA = true;  // the name occurs in sample A (else its A side is all zeros)
  bool inB = true;
};

struct LayerDelta {
  int32_t layer = 0;
  MetricDelta maxOverMean;
};

struct SampleComparison {
  std::vector<NameDelta> names;  // ordered by |delta| descending, then name
  MetricDelta stepNs;
  MetricDelta tokensPerSecond;
  MetricDelta loss;
  MetricDelta lossEnd;
  MetricDelta imbalance;
  std::vector<LayerDelta> layers;  // layers of either sample, by layer
};

// Compares B against A (pure; no I/O). Names are matched by (kind, name); a name in one sample
// only is compared against zero time in each step the other sample sampled for its kind
// (phaseSteps / gpuSteps), so a phase that appeared or vanished is flagged like any change.
// Cost: O(names log names + layers).
SampleComparison compareSamples(const TraceSample& a, const TraceSample& b);

}  // namespace moewb::storage
