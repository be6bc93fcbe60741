// Launchers of the GLU activations (glu_activation_cuda.cuh) over [rows, cols] bf16 arrays with
// row strides, so that g and u may be two column blocks of one fused gate|up GEMM output
// ([rows, 2F] with ld 2F) or two separate [rows, F] arrays (ld F).
// Precision: bf16 in and out, fp32 inside. Costs: O(rows cols), one grid-stride kernel each.
// Compiled from ops/experts/cuda_sources.cmake (the dense FFN, ops/dense_ffn, uses them too).
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {

// h[r, c] = a(g[r, c]) c(u[r, c]); g, u read with row stride ldIn, h written with ldOut.
// Errors: launch errors.
Status gluForwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                      int64_t ldIn, bf16* h, int64_t ldOut, int64_t rows, int64_t cols);

// dg[r, c] = dh c(u) a'(g), du[r, c] = dh a(g) c'(u); g, u with stride ldIn, dh with ldDh, dg and
// du with ldGrad. dg/du may alias g/u (each element is read before it is written) but must not
// overlap dh unless equal to it element for element. Errors: launch errors.
Status gluBackwardCuda(cudaStream_t stream, const GluParams& params, const bf16* g, const bf16* u,
                       int64_t ldIn, const bf16* dh, int64_t ldDh, bf16* dg, bf16* du,
                       int64_t ldGrad, int64_t rows, int64_t cols);

}  // namespace moewb::engine::cuda
