// MoE router and its balancing losses on the GPU (ENGINE-MATH §5.1, §5.2), mirroring
// ops/router/router.h: same score functions (softmax top-k after / sigmoid + normalise), route
// scale, selection-only bias b[E], group-limited selection, and the same top-k order (descending
// selection value, ties to the lower expert id; groups likewise). Starts at the fp32 router
// logits z [N, E] (the router GEMM is a plain linear with an fp32 output).
//
// Kernels: one warp per token row; the row's selection values live in shared memory and the k
// winners are found by k warp arg-max reductions (value, then lower id), so selection equals the
// reference whenever the fp32 selection values do (softmax: z + b exactly; sigmoid: expf may
// differ from the host's by an ulp, which only matters for near ties). All statistics fp32.
// Losses stay on the device: each forward writes its value into a one-element fp32 tensor the
// caller reads once per step; counts per (sequence, expert) come from per-block shared-memory
// histograms added into the [S, E] result (integer atomics: exact and order-independent);
// column means use fixed chunks and a one-block fixed-order reduction (deterministic).
// The Switch loss is the sequence loss with one sequence of N tokens (S = 1), so its counts are
// the per-expert assignment counts [E] the trainer copies back once per step (call
// auxLossForwardCuda with alpha = 0 to get the counts alone).
// Backward functions ADD into dLogits [N, E] fp32 (like the reference).
// Limits: 1 <= k <= 32, E <= 4096 (a row's selection values and group scores in shared memory).
// Costs: O(N E k / 32) per warp-row for routing, O(N E) per loss, a few launches each, no host
// synchronisation.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "ops/router/router.h"

namespace moewb::engine::cuda {

struct DeviceRouterOutput {
  DeviceTensor<float> probs;        // [N, E] p over all experts (softmax, or s / sum s)
  DeviceTensor<float> scores;       // [N, E] s = sigmoid(z) (sigmoid router only, else empty)
  DeviceTensor<int32_t> topExpert;  // [N, k] chosen expert ids, best first
  DeviceTensor<float> topWeight;    // [N, k] routing weights (rows sum to routeScale)
  RouterScore score = RouterScore::kSoftmax;
  double routeScale = 1.0;
};

// Losses of one forward, on the device.
struct DeviceAuxLoss {
  int64_t seqLen = 0;            // tokens per sequence (N for the Switch loss)
  DeviceTensor<int32_t> counts;  // [S, E] (token, expert) assignments per sequence and expert
  DeviceTensor<float> loss;      // [1] the loss value
  // Global statistics over several ranks (model/cuda/cuda_global_router.h): when set, the
  // backward reads these counts [S, E] times gradCountScale instead of `counts`.
  DeviceTensor<int32_t> gradCounts;
  double gradCountScale = 1.0;
};

// Routes every row of logits [N, E] with `config`. `bias` ([E] fp32 on the device, or null) is
// the selection-only balancing bias. Allocates the outputs (kActivations).
// Errors: kInvalidArgument (config out of range as in the reference's checks, k > 32,
// E > 4096), kResourceExhausted, kInternal.
Result<DeviceRouterOutput> routerForwardCuda(CudaContext& context,
                                             const DeviceTensor<float>& logits /*[N, E]*/,
                                             const RouterConfig& config,
                                             const float* bias = nullptr /*[E] device*/);

// dLogits[N, E] += gradient of the selected weights given dTopWeight[N, k]; either router.
Status routerTopKBackwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                              const DeviceTensor<float>& dTopWeight /*[N, k]*/,
                              DeviceTensor<float>& dLogits /*[N, E]*/);

// Counts [1, E] and the Switch aux loss alpha E sum_e f_e P_e.
Result<DeviceAuxLoss> auxLossForwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                                         double alpha);

// Sequence-level aux loss; N must be a multiple of seqLen (> 0). Counts are [N / seqLen, E].
Result<DeviceAuxLoss> seqAuxLossForwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                                            double alpha, int64_t seqLen);

// dLogits[N, E] += gradient of the loss of `stats` (Switch or sequence: stats.seqLen says which).
Status auxLossBackwardCuda(CudaContext& context, const DeviceRouterOutput& route,
                           const DeviceAuxLoss& stats, double alpha,
                           DeviceTensor<float>& dLogits /*[N, E]*/);

// Router z-loss c mean_t lse_t(z)^2 as a [1] device tensor.
Result<DeviceTensor<float>> zLossForwardCuda(CudaContext& context,
                                             const DeviceTensor<float>& logits /*[N, E]*/,
                                             double coef);

// dLogits[N, E] += c (2 / N) lse_t softmax(z_t).
Status zLossBackwardCuda(CudaContext& context, const DeviceTensor<float>& logits /*[N, E]*/,
                         double coef, DeviceTensor<float>& dLogits /*[N, E]*/);

}  // namespace moewb::engine::cuda
