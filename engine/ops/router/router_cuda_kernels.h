// Private to ops/router: launchers over raw device pointers for the router parts that allocate
// (their allocation lives in router_cuda.cpp, host code, because nvcc cannot compile
// DeviceTensor::create's `return tensor;` into a Result).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moewb/base/status.h"
#include "ops/router/router.h"

namespace moewb::engine::cuda {

constexpr int64_t kRouterMaxExperts = 4096;  // (E + 2 G) floats of one row fit 48 KiB
constexpr int kRouterMaxTopK = 32;           // one lane per chosen expert

// Routing of logits [n, e] into the preallocated outputs (scores only for the sigmoid router).
// Errors: kInvalidArgument when a row does not fit shared memory; launch errors.
Status routerForwardLaunch(cudaStream_t stream, const float* logits, int64_t n, int32_t e,
                           const RouterConfig& config, const float* bias, float* probs,
                           float* scores, int32_t* topExpert, float* topWeight);

// Rows of the [rows, e] fp32 column-sum workspace of auxLossLaunch.
int64_t auxLossPartialRows(int64_t n, int64_t seqLen);

// counts [n / seqLen, e] (zeroed here) and loss [1] of the (sequence) aux loss.
Status auxLossLaunch(cudaStream_t stream, const int32_t* topExpert, const float* probs, int64_t n,
                     int32_t e, int32_t k, int64_t seqLen, double alpha, float* partial,
                     int32_t* counts, float* loss);

// loss [1] = coef mean lse^2; lse is an fp32 workspace of n.
Status zLossForwardLaunch(cudaStream_t stream, const float* logits, int64_t n, int32_t e,
                          double coef, float* lse, float* loss);

}  // namespace moewb::engine::cuda
