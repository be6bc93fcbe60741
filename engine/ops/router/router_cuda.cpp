// Host side of the GPU router: checks and allocation of the outputs (see router_cuda.h); the
// kernels are in router_cuda.cu.
#include "ops/router/router_cuda.h"

#include <string>
#include <utility>

#include "ops/router/router_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

Status checkConfig(const RouterConfig& config, int64_t e) {
  const std::string where = "routerForwardCuda: ";
  if (e < 1 || e > kRouterMaxExperts) {
    return invalidArgument(where + "E = " + std::to_string(e) + ", accepted 1.." +
                           std::to_string(kRouterMaxExperts));
  }
  const int64_t maxK = e < kRouterMaxTopK ? e : kRouterMaxTopK;
  if (config.topK < 1 || config.topK > maxK) {
    return invalidArgument(where + "topK = " + std::to_string(config.topK) + ", accepted 1.." +
                           std::to_string(maxK));
  }
  if (config.numGroups < 1 || e % config.numGroups != 0) {
    return invalidArgument(where + "numGroups = " + std::to_string(config.numGroups) +
                           " must divide E = " + std::to_string(e));
  }
  if (config.numGroups > 1 &&
      (config.topKGroups < 1 || config.topKGroups > config.numGroups ||
       int64_t(config.topK) > int64_t(config.topKGroups) * (e / config.numGroups))) {
    return invalidArgument(where + "topKGroups = " + std::to_string(config.topKGroups) +
                           " out of range for " + std::to_string(config.numGroups) +
                           " groups and topK = " + std::to_string(config.topK));
  }
  return Status::ok();
}

Result<DeviceAuxLoss> auxLoss(CudaContext& context, const DeviceRouterOutput& route, double alpha,
                              int64_t seqLen) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  DeviceAuxLoss out;
  out.seqLen = seqLen;
  MOEWB_ASSIGN_OR_RETURN(out.counts,
                         context.newTensor<int32_t>({n / seqLen, e}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(out.loss, context.newTensor<float>({1}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<float> partial,
      context.newTensor<float>({auxLossPartialRows(n, seqLen), e}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(auxLossLaunch(context.stream(), route.topExpert.data(), route.probs.data(),
                                      n, int32_t(e), int32_t(k), seqLen, alpha, partial.data(),
                                      out.counts.data(), out.loss.data()));
  return Result<DeviceAuxLoss>(std::move(out));
}

}  // namespace

Result<DeviceRouterOutput> routerForwardCuda(CudaContext& context,
                                             const DeviceTensor<float>& logits,
                                             const RouterConfig& config, const float* bias) {
  if (logits.rank() != 2) {
    return invalidArgument("routerForwardCuda: logits must be [N, E], got " + logits.shapeString());
  }
  const int64_t n = logits.dim(0), e = logits.dim(1);
  MOEWB_RETURN_IF_ERROR(checkConfig(config, e));
  const int64_t k = config.topK;
  DeviceRouterOutput out;
  out.score = config.score;
  out.routeScale = config.routeScale;
  const MemoryCategory kept = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(out.probs, context.newTensor<float>({n, e}, kept));
  const bool sigmoid = config.score == RouterScore::kSigmoid;
  if (sigmoid) {
    MOEWB_ASSIGN_OR_RETURN(out.scores, context.newTensor<float>({n, e}, kept));
  }
  MOEWB_ASSIGN_OR_RETURN(out.topExpert, context.newTensor<int32_t>({n, k}, kept));
  MOEWB_ASSIGN_OR_RETURN(out.topWeight, context.newTensor<float>({n, k}, kept));
  MOEWB_RETURN_IF_ERROR(routerForwardLaunch(
      context.stream(), logits.data(), n, int32_t(e), config, bias, out.probs.data(),
      sigmoid ? out.scores.data() : nullptr, out.topExpert.data(), out.topWeight.data()));
  return Result<DeviceRouterOutput>(std::move(out));
}

Result<DeviceAuxLoss> auxLossForwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                                         double alpha) {
  const int64_t n = route.probs.dim(0);
  return auxLoss(context, route, alpha, n > 0 ? n : 1);
}

Result<DeviceAuxLoss> seqAuxLossForwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                                            double alpha, int64_t seqLen) {
  const int64_t n = route.probs.dim(0);
  if (seqLen <= 0 || n % seqLen != 0) {
    return invalidArgument("seqAuxLossForwardCuda: seqLen = " + std::to_string(seqLen) +
                           " must be > 0 and divide N = " + std::to_string(n));
  }
  return auxLoss(context, route, alpha, seqLen);
}

Result<DeviceTensor<float>> zLossForwardCuda(CudaContext& context,
                                             const DeviceTensor<float>& logits, double coef) {
  if (logits.rank() != 2 || logits.dim(1) < 1) {
    return invalidArgument("zLossForwardCuda: logits must be [N, E], got " + logits.shapeString());
  }
  const int64_t n = logits.dim(0), e = logits.dim(1);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> loss,
                         context.newTensor<float>({1}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> lse,
                         context.newTensor<float>({n}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(zLossForwardLaunch(context.stream(), logits.data(), n, int32_t(e), coef,
                                           lse.data(), loss.data()));
  return Result<DeviceTensor<float>>(std::move(loss));
}

}  // namespace moewb::engine::cuda
