// The pure half of compare_queries.h: step ranges, per-step statistics and the A/B comparison
// (no I/O; every function here is a function of its arguments).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "moewb/storage/compare_queries.h"

namespace moewb::storage {
namespace {

double median(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

// The stats of a name absent from a sample: zero time in each of its `steps` steps.
MetricStats zeros(int64_t steps) {
  MetricStats s;
  s.n = steps;
  return s;
}

}  // namespace

Result<StepRange> parseCompareRange(const std::string& text, const std::string& option) {
  const size_t colon = text.find(':');
  const bool openEnd = colon != std::string::npos && colon + 1 == text.size() && colon > 0;
  const bool openStart = colon == 0 && text.size() > 1;
  if (!openEnd && !openStart) return parseStepRange(text, option);
  const auto bad = [&] {
    return invalidArgument(option + " '" + text + "' is not a step range; accepted: A:B with " +
                           "0 <= A < B (steps A..B-1), A: (A to the last step), :B (the first " +
                           "step to B-1) or a single step A");
  };
  auto number = parseStepNumber(openEnd ? text.substr(0, colon) : text.substr(1));
  if (!number.isOk()) return bad();
  if (openEnd) return StepRange{*number, kOpenEnd};
  if (*number == 0) return bad();
  return StepRange{0, *number};
}

std::string formatStepRange(const StepRange& range) {
  if (range.end == kOpenEnd) return std::to_string(range.first) + ":";
  if (range.first == 0) return ":" + std::to_string(range.end);
  return std::to_string(range.first) + ":" + std::to_string(range.end);
}

MetricStats summarize(std::vector<double> values) {
  MetricStats s;
  s.n = int64_t(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / double(values.size());
  s.p50 = median(values);
  s.min = values.front();
  s.max = values.back();
  if (values.size() >= 2) {
    double squares = 0;
    for (double v : values) squares += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(squares / double(values.size() - 1));
  }
  return s;
}

MetricDelta compareMetric(const MetricStats& a, const MetricStats& b) {
  MetricDelta d;
  d.a = a;
  d.b = b;
  d.delta = b.mean - a.mean;
  d.ratio = a.mean != 0 ? b.mean / a.mean : 0.0;
  double variance = 0;
  if (a.n > 0) variance += a.stddev * a.stddev / double(a.n);
  if (b.n > 0) variance += b.stddev * b.stddev / double(b.n);
  d.noise = 2.0 * std::sqrt(variance);
  const double scale = std::max(std::fabs(a.mean), std::fabs(b.mean));
  d.significant = a.n >= 2 && b.n >= 2 && std::fabs(d.delta) > d.noise &&
                  std::fabs(d.delta) >= kMinRelativeDelta * scale;
  return d;
}

SampleComparison compareSamples(const TraceSample& a, const TraceSample& b) {
  SampleComparison out;
  // (kind, name) -> the name's stats in A and in B.
  std::map<std::pair<CompareKind, std::string>, std::pair<const NameStats*, const NameStats*>>
      byName;
  for (const NameStats& s : a.names) byName[{s.kind, s.name}].first = &s;
  for (const NameStats& s : b.names) byName[{s.kind, s.name}].second = &s;
  for (const auto& [key, pair] : byName) {
    const bool gpu = key.first == CompareKind::kKernel;
    NameDelta row;
    row.kind = key.first;
    row.name = key.second;
    row.inA = pair.first != nullptr;
    row.inB = pair.second != nullptr;
    const MetricStats sa = row.inA ? pair.first->perStepNs : zeros(gpu ? a.gpuSteps : a.phaseSteps);
    const MetricStats sb =
        row.inB ? pair.second->perStepNs : zeros(gpu ? b.gpuSteps : b.phaseSteps);
    row.perStepNs = compareMetric(sa, sb);
    out.names.push_back(std::move(row));
  }
  std::stable_sort(out.names.begin(), out.names.end(), [](const NameDelta& x, const NameDelta& y) {
    return std::fabs(x.perStepNs.delta) > std::fabs(y.perStepNs.delta);
  });
  out.stepNs = compareMetric(a.stepNs, b.stepNs);
  out.tokensPerSecond = compareMetric(a.tokensPerSecond, b.tokensPerSecond);
  out.loss = compareMetric(a.loss, b.loss);
  out.lossEnd = compareMetric(a.lossEnd, b.lossEnd);
  out.imbalance = compareMetric(a.imbalance, b.imbalance);
  std::map<int32_t, std::pair<MetricStats, MetricStats>> layers;
  for (const LayerImbalanceStats& l : a.layers) layers[l.layer].first = l.maxOverMean;
  for (const LayerImbalanceStats& l : b.layers) layers[l.layer].second = l.maxOverMean;
  for (const auto& [layer, pair] : layers) {
    out.layers.push_back({layer, compareMetric(pair.first, pair.second)});
  }
  return out;
}

}  // namespace moewb::storage
