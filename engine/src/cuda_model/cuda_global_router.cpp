// Global Switch-loss statistics on the GPU (see cuda_global_router.h).
#include "cuda_model/cuda_global_router.h"

#include <vector>

#include "cuda/transfer.h"

namespace moewb::engine::cuda {

Status globalizeSwitchLossCuda(CudaContext& context, Communicator& world, double alpha,
                               const DeviceRouterOutput& route, DeviceAuxLoss& aux) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  MOEWB_ASSIGN_OR_RETURN(Tensor<int32_t> localCounts, toHost(context, aux.counts));
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> probs, toHost(context, route.probs));
  std::vector<int64_t> counts(size_t(e + 1));  // [E] counts, then the token count
  for (int64_t j = 0; j < e; ++j) counts[size_t(j)] = localCounts[j];
  counts[size_t(e)] = n;
  MOEWB_RETURN_IF_ERROR(world.allReduce(std::span<int64_t>(counts)));
  const int64_t globalTokens = counts[size_t(e)];
  std::vector<double> probSum(size_t(e), 0.0);  // sum over local tokens of p[t, e]
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < e; ++j) probSum[size_t(j)] += double(probs[t * e + j]);
  }
  std::vector<float> probSumF(probSum.begin(), probSum.end());
  MOEWB_RETURN_IF_ERROR(world.allReduce(std::span<float>(probSumF)));
  double sum = 0;
  Tensor<int32_t> globalCounts({1, e});
  for (int64_t j = 0; j < e; ++j) {
    const double f = double(counts[size_t(j)]) / double(k * globalTokens);
    sum += f * double(probSumF[size_t(j)]) / double(globalTokens);
    globalCounts[j] = int32_t(counts[size_t(j)]);
  }
  Tensor<float> loss({1});
  loss[0] = float(alpha * double(e) * sum);
  MOEWB_RETURN_IF_ERROR(copyToDevice(context, loss, aux.loss));
  MOEWB_ASSIGN_OR_RETURN(aux.gradCounts,
                         toDevice(context, globalCounts, MemoryCategory::kActivations));
  aux.gradCountScale = double(n) / double(globalTokens);
  return Status::ok();
}

}  // namespace moewb::engine::cuda
