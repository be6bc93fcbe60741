#include "runtime/cuda/transfer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include "runtime/cuda/cuda_check.h"
#include "runtime/host_slices.h"

namespace moewb::engine::cuda {
namespace {

// Whether `bytes` bytes at `data` are all zero; stops at the first that is not, or when `found`
// says another scanner found one.
bool allZeroRange(const unsigned char* p, size_t bytes, const std::atomic<bool>& found) {
  constexpr size_t kCheckEvery = size_t(1) << 20;
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= bytes; i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof word);
    if (word != 0) return false;
    if (i % kCheckEvery == 0 && found.load(std::memory_order_relaxed)) return false;
  }
  for (; i < bytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// allZeroRange over the whole buffer; from 64 MiB on, split into page-aligned slices over up to
// 16 threads (the pages of a never-written host tensor are faulted in as they are read: that, not
// the compare, is the cost, and it scales with threads).
bool allZeroBytes(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::atomic<bool> nonZero{false};
  constexpr size_t kParallelBytes = size_t(64) << 20;
  const unsigned threads =
      bytes < kParallelBytes ? 1u : std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  forEachSliceOnThreads(int64_t(bytes), 4096, threads, [&](int64_t first, int64_t last) {
    if (!allZeroRange(p + first, size_t(last - first), nonZero)) nonZero.store(true);
  });
  return !nonZero.load();
}

}  // namespace

template <typename T>
Status copyToDevice(CudaContext& context, const Tensor<T>& host, DeviceTensor<T>& device) {
  MOEWB_CHECK_EQ(host.numel(), device.numel());
  if (host.numel() == 0) return Status::ok();
  // A fresh run's AdamW moments are zeros (gigabytes on a large model, never touched on the
  // host): a memset on the device instead of a copy through pageable staging.
  if (allZeroBytes(host.data(), size_t(host.bytes()))) {
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(device.data(), 0, size_t(host.bytes()), context.stream()));
    return Status::ok();
  }
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
