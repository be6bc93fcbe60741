// Aux-loss-free bias bookkeeping (see expert_bias.h).
#include "model/moe/expert_bias.h"

#include <algorithm>

#include "moewb/base/check.h"

namespace moewb::engine {

ExpertBias makeExpertBias(int64_t numExperts) {
  MOEWB_CHECK(numExperts > 0);
  ExpertBias state;
  state.bias.assign(size_t(numExperts), 0.0f);
  state.pendingCounts.assign(size_t(numExperts), 0);
  return state;
}

void accumulateExpertCounts(ExpertBias& state, const std::vector<int64_t>& counts) {
  MOEWB_CHECK(counts.size() == state.pendingCounts.size());
  for (size_t e = 0; e < counts.size(); ++e) state.pendingCounts[e] += counts[e];
}

void updateExpertBias(ExpertBias& state, double rate) {
  const size_t experts = state.bias.size();
  MOEWB_CHECK(state.pendingCounts.size() == experts);
  int64_t total = 0;
  for (int64_t c : state.pendingCounts) total += c;
  if (total > 0) {
    const double mean = double(total) / double(experts);
    for (size_t e = 0; e < experts; ++e) {
      const double gap = mean - double(state.pendingCounts[e]);
      const double sign = gap > 0 ? 1.0 : (gap < 0 ? -1.0 : 0.0);
      state.bias[e] += float(rate * sign);
    }
  }
  std::fill(state.pendingCounts.begin(), state.pendingCounts.end(), 0);
}

}  // namespace moewb::engine
