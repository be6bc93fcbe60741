// MoE unpermute + weighted combine on the GPU (ENGINE-MATH §5.9), mirroring ops/combine/combine.h:
//   y[t] = sum_j w[t, j] yPerm[slotRow[t, j]]                 (kept slots, slot order, fp32)
// Backward: dYPerm[slotRow[t, j]] = bf16(w[t, j] dy[t]) and dTopWeight[t, j] = <dy[t], yPerm[row]>
// (fp32 dot, fixed-order tree reduction); dropped slots (slotRow = -1) get dTopWeight = 0.
// combineSumForwardCuda is the combine when the experts already applied the weights
// (ExpertsIo::rowWeight). slotsToRowsCuda / rowsToSlotsCuda move per-pair fp32 values between
// [N, k] and the permuted rows [N k] (only r < R defined).
// Every kernel is a gather by token (or by row), so no two threads write the same element:
// deterministic, no atomics. Activations bf16, routing weights and their gradients fp32.
// Costs: O(N k D) bytes each way, one launch; grids sized by N (or N k) with early exit.
#pragma once

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "ops/permute/permute_cuda.h"

namespace moewb::engine::cuda {

// y[N, D] (preallocated, fully written) from yPerm [N k, D] and topWeight [N, k].
Status combineForwardCuda(CudaContext& context, const DeviceTensor<bf16>& yPerm /*[N k, D]*/,
                          const DeviceTensor<float>& topWeight /*[N, k]*/,
                          const DeviceDispatch& plan, DeviceTensor<bf16>& y /*[N, D]*/);

// Writes dYPerm [N k, D] (rows r < R) and dTopWeight [N, k] (fully written).
Status combineBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy /*[N, D]*/,
                           const DeviceTensor<bf16>& yPerm /*[N k, D]*/,
                           const DeviceTensor<float>& topWeight /*[N, k]*/,
                           const DeviceDispatch& plan, DeviceTensor<bf16>& dYPerm /*[N k, D]*/,
                           DeviceTensor<float>& dTopWeight /*[N, k]*/);

// y[t] = sum over kept slots j of yPermWeighted[slotRow[t, j]] (slot order, fp32).
Status combineSumForwardCuda(CudaContext& context,
                             const DeviceTensor<bf16>& yPermWeighted /*[N k, D]*/,
                             const DeviceDispatch& plan, DeviceTensor<bf16>& y /*[N, D]*/);

// out[r] = perSlot[rowToken[r], rowSlot[r]] for r < R (out is [N k]).
Status slotsToRowsCuda(CudaContext& context, const DeviceTensor<float>& perSlot /*[N, k]*/,
                       const DeviceDispatch& plan, DeviceTensor<float>& out /*[N k]*/);

// out[t, j] = perRow[slotRow[t, j]], 0 for dropped slots (fully written).
Status rowsToSlotsCuda(CudaContext& context, const DeviceTensor<float>& perRow /*[N k]*/,
                       const DeviceDispatch& plan, DeviceTensor<float>& out /*[N, k]*/);

}  // namespace moewb::engine::cuda
