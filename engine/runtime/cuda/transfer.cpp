#include "runtime/cuda/transfer.h"

#include <cstdint>

#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {

template <typename T>
Status copyToDevice(CudaContext& context, const Tensor<T>& host, DeviceTensor<T>& device) {
  MOEWB_CHECK_EQ(host.numel(), device.numel());
  if (host.numel() == 0) return Status::ok();
  // cudaMemcpyAsync from pageable memory returns once the source has been staged, so the host
  // tensor may change afterwards.
  MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device.data(), host.data(), size_t(host.bytes()),
                                             cudaMemcpyHostToDevice, context.stream()));
  return Status::ok();
}

template <typename T>
Result<DeviceTensor<T>> toDevice(CudaContext& context, const Tensor<T>& host,
                                 MemoryCategory category) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<T> device, context.newTensor<T>(host.shape(), category));
  MOEWB_RETURN_IF_ERROR(copyToDevice(context, host, device));
  return device;
}

Result<DeviceTensor<bf16>> toDeviceBf16(CudaContext& context, const Tensor<float>& host,
                                        MemoryCategory category) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> staged,
                         toDevice(context, host, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> device, context.newTensor<bf16>(host.shape(), category));
  MOEWB_RETURN_IF_ERROR(
      castFloatToBf16(context.stream(), staged.data(), device.data(), device.numel()));
  return device;
}

template <typename T>
Result<Tensor<T>> toHost(CudaContext& context, const DeviceTensor<T>& device) {
  Tensor<T> host(device.shape());
  if (device.numel() > 0) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), device.data(), size_t(device.bytes()),
                                               cudaMemcpyDeviceToHost, context.stream()));
  }
  MOEWB_RETURN_IF_ERROR(context.synchronize());
  return host;
}

Result<Tensor<float>> toHostFloat(CudaContext& context, const DeviceTensor<bf16>& device) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> widened,
                         context.newTensor<float>(device.shape(), MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(
      castBf16ToFloat(context.stream(), device.data(), widened.data(), device.numel()));
  return toHost(context, widened);
}

#define MOEWB_INSTANTIATE_TRANSFER(T)                                                          \
  template Status copyToDevice<T>(CudaContext&, const Tensor<T>&, DeviceTensor<T>&);           \
  template Result<DeviceTensor<T>> toDevice<T>(CudaContext&, const Tensor<T>&, MemoryCategory); \
  template Result<Tensor<T>> toHost<T>(CudaContext&, const DeviceTensor<T>&);
MOEWB_INSTANTIATE_TRANSFER(float)
MOEWB_INSTANTIATE_TRANSFER(int32_t)
MOEWB_INSTANTIATE_TRANSFER(uint8_t)
#undef MOEWB_INSTANTIATE_TRANSFER

}  // namespace moewb::engine::cuda
