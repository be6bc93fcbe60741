// Dense GLU FFN (the shared experts, ops/dense_ffn/dense_ffn.h) on the GPU, built on the
// linear wrappers (ops/linear/linear_cuda.h) and the GLU launchers
// (ops/experts/glu_activation_cuda.h):
//   forward:  g = x Wg^T, u = x Wu^T, h = a(g) c(u), y += h Wd^T
//   backward: dh = dy Wd, (dg, du) = glu backward, dx += dg Wg + du Wu,
//             dWd += dy^T h, dWg += dg^T x, dWu += du^T x
// Precision: x, y, dy, dx, the saved g, u, h and the weight compute copies are bf16; weight
// gradients fp32 (added into); the two dx products are summed in an fp32 workspace and rounded
// to bf16 once. Costs: 6 N D F flops forward, 12 N D F backward, all in cuBLAS GEMMs; the
// backward allocates 2 bf16 [N, F] buffers and one fp32 [N, D] workspace. No host sync.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {

struct DenseFfnWeightsCuda {
  const bf16* gate = nullptr;  // [F, D]
  const bf16* up = nullptr;    // [F, D]
  const bf16* down = nullptr;  // [D, F]
};

struct DenseFfnGradsCuda {
  float* gate = nullptr;  // [F, D], added into
  float* up = nullptr;    // [F, D], added into
  float* down = nullptr;  // [D, F], added into
};

struct DenseFfnSavedCuda {
  DeviceTensor<bf16> gatePre;  // [N, F] g
  DeviceTensor<bf16> upPre;    // [N, F] u
  DeviceTensor<bf16> hidden;   // [N, F] h
};

// y[n, d] += FFN(x[n, d]) with hidden width f; allocates saved's tensors (kActivations).
// Errors: kResourceExhausted, kInternal (cuBLAS), launch errors.
Status denseFfnForwardCuda(CudaContext& context, const bf16* x, const DenseFfnWeightsCuda& weights,
                           const GluParams& activation, DenseFfnSavedCuda& saved, bf16* y,
                           int64_t n, int64_t d, int64_t f);

// dx[n, d] += the input gradient of the FFN given dy[n, d]; adds the weight gradients into
// `grads`. `saved` is what denseFfnForwardCuda kept for the same x.
// Errors: kResourceExhausted (workspace), kInternal (cuBLAS), launch errors.
Status denseFfnBackwardCuda(CudaContext& context, const bf16* dy, const bf16* x,
                            const DenseFfnWeightsCuda& weights, const GluParams& activation,
                            const DenseFfnSavedCuda& saved, const DenseFfnGradsCuda& grads,
                            bf16* dx, int64_t n, int64_t d, int64_t f);

}  // namespace moewb::engine::cuda
