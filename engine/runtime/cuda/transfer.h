// Host <-> device copies between the engine's Tensor<T> and DeviceTensor<T>, with the bf16
// casts of mixed precision. Every call is synchronous with respect to the host data (the host
// tensor may be reused when it returns) and queues the device side on the context's stream.
// Errors: kResourceExhausted (allocation), kInternal (a CUDA call failed).
#pragma once

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::cuda {

// A device copy of `host` (same dtype, same shape). T: float, int32_t, uint8_t.
template <typename T>
Result<DeviceTensor<T>> toDevice(CudaContext& context, const Tensor<T>& host, MemoryCategory category);

// A bf16 device copy of an fp32 host tensor (rounded to nearest even).
Result<DeviceTensor<bf16>> toDeviceBf16(CudaContext& context, const Tensor<float>& host,
                                        MemoryCategory category);

// Copies `host` into an existing device tensor of the same numel (an all-zero `host` becomes a
// memset on the device: the host data is scanned up to its first non-zero byte).
template <typename T>
Status copyToDevice(CudaContext& context, const Tensor<T>& host, DeviceTensor<T>& device);

// A host copy (waits for the stream). T: float, int32_t, uint8_t.
template <typename T>
Result<Tensor<T>> toHost(CudaContext& context, const DeviceTensor<T>& device);

// A host fp32 copy of a bf16 device tensor (waits for the stream).
Result<Tensor<float>> toHostFloat(CudaContext& context, const DeviceTensor<bf16>& device);

}  // namespace moewb::engine::cuda
