// Global Switch-loss statistics over every rank (see global_router_stats.h).
#include "model/parallel/global_router_stats.h"

#include "model/parallel/collective_error.h"

namespace moewb::engine {

void globalizeSwitchLoss(Communicator& world, double alpha, MoeSaved<float>& saved) {
  const RouterOutput<float>& route = saved.route;
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  std::vector<int64_t> counts = saved.switchAux.counts;  // [E], then [tokens, E sums] below
  counts.push_back(n);
  throwIfFailed(world.allReduce(std::span<int64_t>(counts)));
  const int64_t globalTokens = counts.back();
  std::vector<double> probSum(size_t(e), 0.0);  // [E] sum over local tokens of p[t, e]
  for (int64_t t = 0; t < n; ++t) {
    const float* p = route.probs.row(t);
    for (int64_t j = 0; j < e; ++j) probSum[size_t(j)] += double(p[j]);
  }
  std::vector<float> probSumF(probSum.begin(), probSum.end());
  throwIfFailed(world.allReduce(std::span<float>(probSumF)));
  double sum = 0;
  for (int64_t j = 0; j < e; ++j) {
    const double f = double(counts[size_t(j)]) / double(k * globalTokens);
    saved.switchAux.fraction[size_t(j)] = f;
    sum += f * double(probSumF[size_t(j)]) / double(globalTokens);
  }
  const double loss = alpha * double(e) * sum;
  saved.aux.loss += loss - saved.switchAux.loss;
  saved.switchAux.loss = loss;
  saved.aux.switchLoss = loss;
}

}  // namespace moewb::engine
