// Global Switch-loss statistics on the GPU (see cuda_global_router.h): the counts and probability
// column sums of this rank go into one device buffer, one device all-reduce sums them over the
// ranks, and one small kernel turns the sums into the loss and the backward's counts, all in
// stream order (no host synchronisation).
#include "model/cuda/cuda_global_router.h"

#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;

// stats[e] = counts[e], stats[E + e] = sum over the N rows of probs[t, e] (double accumulation in
// a fixed order), stats[2E] = N. One block per expert column.
__global__ void global_router_pack_kernel(const float* probs, const int32_t* counts, int64_t n,
                                          int32_t e, float* stats) {
  __shared__ double partial[kThreads];
  const int32_t column = int32_t(blockIdx.x);
  double sum = 0;
  for (int64_t t = threadIdx.x; t < n; t += kThreads) sum += double(probs[t * e + column]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[column] = float(counts[column]);
    stats[e + column] = float(partial[0]);
    if (column == 0) stats[2 * e] = float(n);
  }
}

// From the summed stats: loss[0] = alpha E sum_e f_e P_e with f_e = C_e / (k N), P_e = S_e / N,
// and gradCounts[e] = C_e (exact: float holds integers up to 2^24).
__global__ void global_router_loss_kernel(const float* stats, int32_t e, int32_t k, double alpha,
                                          float* loss, int32_t* gradCounts) {
  const double tokens = double(stats[2 * e]);
  double sum = 0;
  for (int32_t j = 0; j < e; ++j) {
    const double count = double(stats[j]);
    sum += count / (double(k) * tokens) * double(stats[e + j]) / tokens;
    gradCounts[j] = int32_t(count + 0.5);
  }
  loss[0] = float(alpha * double(e) * sum);
}

}  // namespace

Status globalizeSwitchLossCuda(CudaContext& context, Communicator& world, double alpha,
                               const DeviceRouterOutput& route, DeviceAuxLoss& aux) {
  const int64_t n = route.probs.dim(0), e = route.probs.dim(1), k = route.topExpert.dim(1);
  if (n == 0 || e == 0) return Status::ok();
  cudaStream_t stream = context.stream();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> stats,
                         context.newTensor<float>({2 * e + 1}, MemoryCategory::kWorkspace));
  global_router_pack_kernel<<<unsigned(e), kThreads, 0, stream>>>(
      route.probs.data(), aux.counts.data(), n, int32_t(e), stats.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  MOEWB_RETURN_IF_ERROR(world.allReduceDevice(stats.data(), stats.numel(), CommDataType::kFloat32,
                                              ReduceOp::kSum, stream));
  MOEWB_ASSIGN_OR_RETURN(aux.gradCounts,
                         context.newTensor<int32_t>({1, e}, MemoryCategory::kActivations));
  global_router_loss_kernel<<<1, 1, 0, stream>>>(stats.data(), int32_t(e), int32_t(k), alpha,
                                                 aux.loss.data(), aux.gradCounts.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  // Every rank routes the same number of tokens (data.batch_size is a multiple of the ranks).
  aux.gradCountScale = 1.0 / double(world.worldSize());
  return Status::ok();
}

}  // namespace moewb::engine::cuda
