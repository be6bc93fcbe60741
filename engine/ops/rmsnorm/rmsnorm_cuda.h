// RMSNorm over the last dimension on the GPU (ops/rmsnorm/rmsnorm.h):
//   y = x * rstd * gain,  rstd = 1/sqrt(mean(x^2) + eps)
// Backward, with xhat = x * rstd and g = dy * gain:
//   dx = rstd * (g - xhat * mean(g * xhat)),   dGain += sum_rows dy * xhat.
//
// Precision: x, y, dy, dx and the gain compute copy are bf16; rstd and every sum are fp32; dGain
// is the fp32 weight gradient (added into).
// Determinism: dGain is reduced without float atomics: fixed row chunks (a function of N only)
// write fp32 partial sums to a workspace, and a second kernel adds them in chunk order, so the
// result is bitwise reproducible.
// Costs: one block per row for the row kernels (O(N D)); the dGain pass reads dy, x again.
// No host synchronisation.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// y[n, d] and rstd[n] (fp32) from x[n, d] and gain[d]; y must not alias x.
// Errors: launch errors.
Status rmsNormForwardCuda(cudaStream_t stream, const bf16* x, const bf16* gain, float eps, bf16* y,
                          float* rstd, int64_t n, int64_t d);

// dx[n, d] (written, or added into when accumulate: dx = bf16(dx + grad)) and dGain[d] += ...
// from dy, x, gain, rstd; dx must not alias dy or x. Allocates an fp32 workspace of at most
// 256 * d floats.
// Errors: kResourceExhausted (workspace), launch errors.
Status rmsNormBackwardCuda(CudaContext& context, const bf16* dy, const bf16* x, const bf16* gain,
                           const float* rstd, bf16* dx, float* dGain, int64_t n, int64_t d,
                           bool accumulate = false);

}  // namespace moewb::engine::cuda
