// LoRA adapters on the GPU (ENGINE-MATH §5.10; CPU reference ops/lora/lora.h): the
// per-step materialisation of the effective weight W' = W + s B A into the bf16 compute copy
// that the ops read, and the conversion of the gradient dW' (which the ops leave in the frozen
// base weight's fp32 gradient) into the adapters' gradients, dB += s dW' A^T, dA += s B^T dW'.
//
// Shapes: a weight W [m, n] takes A [r, n], B [m, r]; an expert tensor W [E, m, n] takes
// A [E, r, n], B [E, m, r] (one product per expert: strided batched GEMMs, no per-expert launches).
// Precision: W, A, B are the fp32 master values and dW', dA, dB fp32 gradients, so every product
// here is an fp32 GEMM through cuda/gemm.h (fp32 operands, fp32 accumulation: the rank r is
// small, so these GEMMs are bound by reading W / dW', not by the arithmetic); only the merged
// weight is rounded, once, to bf16.
// Merge: per chunk of experts, W is copied into an fp32 workspace, s B A is added by the GEMM
// (beta = 1) and the sum is cast to bf16; the workspace is bounded by `workspaceElements` (at
// least one expert's m n). Costs: 2 E m n r flops and ~3 E m n fp32 reads/writes per merge;
// 4 E m n r flops per gradient conversion. Queues on the context's stream; no host sync.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

inline constexpr int64_t kLoraMergeWorkspaceElements = int64_t(1) << 24;  // 64 MiB of fp32

// out = bf16(w + scale * B A) per expert (out overwritten, same shape as w). w: rank 2 or 3;
// a, b: loraAShape / loraBShape of w's shape. Errors: kInvalidArgument (shapes),
// kResourceExhausted (workspace), kInternal (cuBLAS, launch).
Status loraMergeCuda(CudaContext& context, const DeviceTensor<float>& w,
                     const DeviceTensor<float>& a, const DeviceTensor<float>& b, double scale,
                     DeviceTensor<bf16>& out,
                     int64_t workspaceElements = kLoraMergeWorkspaceElements);

// dA += scale * B^T dW, dB += scale * dW A^T (per expert), for dW the gradient of W' (shape of w).
// dW is left as it is: the caller zeroes it (the base weight is frozen). Errors: kInvalidArgument
// (shapes), kInternal (cuBLAS).
Status loraBackwardCuda(CudaContext& context, const DeviceTensor<float>& dW,
                        const DeviceTensor<float>& a, const DeviceTensor<float>& b, double scale,
                        DeviceTensor<float>& dA, DeviceTensor<float>& dB);

}  // namespace moewb::engine::cuda
