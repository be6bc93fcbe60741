// The robust y range of step charts: which far-out points an axis may clip.
#include "moewb/gui/chart_range.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moewb::gui {

namespace {

// The nearest-rank p-th percentile (0 < p <= 100) of `v` (non-empty); reorders `v`.
double percentile(std::vector<double>& v, double p) {
  const double rank = std::ceil(p / 100.0 * double(v.size()));
  const size_t k = size_t(std::clamp(rank, 1.0, double(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

}  // namespace

RobustRange robustRange(std::span<const double> values, size_t firstIndex,
                        const RobustRangeRule& rule) {
  // Finite values in order, and how many of the leading ones are the run's first steps.
  std::vector<double> finite;
  finite.reserve(values.size());
  size_t warmup = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    if (firstIndex + i < rule.warmupPoints && warmup == finite.size()) ++warmup;
    finite.push_back(values[i]);
  }
  RobustRange r;
  r.count = finite.size();
  if (finite.empty()) return r;
  r.lo = *std::min_element(finite.begin(), finite.end());
  r.hi = r.fullHi = *std::max_element(finite.begin(), finite.end());
  const size_t n = finite.size();
  if (n < 3) return r;
  // Candidates: the warm-up values (leaving at least two others) and the largest `share` of the
  // remaining ones, moved to the end of `rest`.
  warmup = std::min(warmup, n - 2);
  std::vector<double> rest(finite.begin() + std::ptrdiff_t(warmup), finite.end());
  const size_t share = std::min(size_t(std::floor(double(n) * rule.clipShare)), rest.size() - 2);
  const auto split = rest.end() - std::ptrdiff_t(share);
  std::nth_element(rest.begin(), split, rest.end());
  std::vector<double> others(rest.begin(), split);
  const double top = *std::max_element(others.begin(), others.end());
  const double high = percentile(others, 99), low = percentile(others, 1);
  const double cut = std::max({rule.factor * high, high + rule.factor * (high - low), top});
  if (!(rule.factor * high > high || high - low > 0)) return r;  // a flat rest at or below 0
  // Clip the candidates above the cut; the axis covers everything else.
  double hi = top;
  size_t clipped = 0;
  auto judge = [&](double v) {
    if (v > cut) {
      ++clipped;
    } else {
      hi = std::max(hi, v);
    }
  };
  for (size_t i = 0; i < warmup; ++i) judge(finite[i]);
  for (auto it = split; it != rest.end(); ++it) judge(*it);
  if (clipped == 0) return r;
  r.clipped = clipped;
  r.hi = hi;
  r.clipAbove = hi;
  return r;
}

RobustRange mergeRanges(const RobustRange& a, const RobustRange& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  RobustRange r;
  r.count = a.count + b.count;
  r.clipped = a.clipped + b.clipped;
  r.lo = std::min(a.lo, b.lo);
  r.hi = std::max(a.hi, b.hi);
  r.fullHi = std::max(a.fullHi, b.fullHi);
  if (r.clipped > 0) r.clipAbove = r.hi;
  return r;
}

}  // namespace moewb::gui
