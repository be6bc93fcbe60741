// Multimodal patch embedding on the GPU (the CPU reference is Model::embedForward /
// embedBackward in engine/model/cpu/model.cpp): the image patches of each sequence (features
// [B*P, patchDim], ops/patchify.h order) are projected by the patch weight W [D, patchDim] (a
// linear, y = x W^T) plus the bias [D], and ADDED into the first P rows (the image positions) of
// every sequence of the embedded sequence h [B*T, D] (whose token embedding there is zero).
//
// Forward: one bf16 tensor-core GEMM (fp32 accumulation, fp32 workspace [B*P, D]), then one kernel
// h[s T + i] = bf16(h[s T + i] + proj[s P + i] + bias), rounded once.
// Backward: the image rows of dh are gathered into a bf16 workspace [B*P, D]; dW += dProj^T
// patches (one GEMM, fp32 accumulation into the fp32 gradient); dBias += column sums of dProj
// (fixed order: bitwise reproducible). dh itself is not changed (the token embedding backward
// reads it too; image positions carry negative ids and get no token gradient).
// Costs: 2 B P D patchDim flops each way; O(B P D) element-wise work. No host synchronisation.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// h[s*seqLen + i, :] += patches[s*P + i, :] W^T + bias for s < batch, i < P (= imagePatches).
// patches: bf16 [batch*P, patchDim] (keep it for the backward); weight: bf16 [d, patchDim];
// bias: bf16 [d]; h: bf16 [batch*seqLen, d]. P == 0 or batch == 0 is a no-op.
// Errors: kInvalidArgument (P > seqLen, negative sizes, patchDim < 1), kResourceExhausted
// (workspace), kInternal (cuBLAS, launch).
Status patchEmbedForwardCuda(CudaContext& context, const bf16* patches, const bf16* weight,
                             const bf16* bias, int64_t batch, int64_t seqLen, int64_t imagePatches,
                             int64_t patchDim, int64_t d, bf16* h);

// dWeight [d, patchDim] += sum over image rows of dh_row^T patches_row; dBias [d] += sum over
// image rows of dh_row (both fp32, added into). dh: bf16 [batch*seqLen, d]; patches as in the
// forward. Errors: as patchEmbedForwardCuda.
Status patchEmbedBackwardCuda(CudaContext& context, const bf16* dh, const bf16* patches,
                              int64_t batch, int64_t seqLen, int64_t imagePatches, int64_t patchDim,
                              int64_t d, float* dWeight, float* dBias);

}  // namespace moewb::engine::cuda
