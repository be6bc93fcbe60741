// CudaContext: what every CUDA op needs to run on one device for one rank: the device, the
// stream all of the rank's work is queued on, its caching allocator and a cuBLAS handle bound to
// that stream (with a workspace for cuBLASLt heuristics).
//
// Operations: create (fails with a clear Status when there is no usable device), synchronize
// (waits for the stream and returns any asynchronous error), newTensor helpers.
// Thread-safety: one context per rank thread; not shared.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/device_tensor.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;              // "NVIDIA H200"
  int computeMajor = 0;
  int computeMinor = 0;
  int multiprocessors = 0;
  int64_t totalMemoryBytes = 0;
  int driverCudaVersion = 0;  // the CUDA version the driver supports, e.g. 13000 for 13.0
  std::string driverRelease;  // the NVIDIA driver's release, "580.95.05" ("" when unknown)
};

// Number of CUDA devices this process can use (0 when the driver is missing or finds none).
int deviceCount();

// Properties of device `ordinal`. Errors: kNotFound when there is no such device.
Result<DeviceInfo> deviceInfo(int ordinal);

class CudaContext {
 public:
  // Makes `ordinal` current on the calling thread, creates a non-blocking stream, the allocator
  // (`allocatorLimitBytes` as in CachingAllocator) and a cuBLAS handle. Errors: kNotFound (no
  // device), kFailedPrecondition (compute capability below 8.0: bf16 tensor cores needed),
  // kInternal (a CUDA call failed).
  static Result<std::unique_ptr<CudaContext>> create(int ordinal, int64_t allocatorLimitBytes = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const DeviceInfo& device() const { return m_device; }
  cudaStream_t stream() const { return m_stream; }
  cublasHandle_t cublas() const { return m_cublas; }
  CachingAllocator& allocator() { return m_allocator; }

  // A second non-blocking stream on the same device, created on first use (the expert-parallel
  // all-to-alls run on it next to the expert compute). Its work must be ordered against stream()
  // with events; memory it touches comes from allocator() and must stay alive until stream() has
  // waited for it. Errors: kInternal.
  Result<cudaStream_t> sideStream();

  // Waits for all queued work (both streams); returns the first asynchronous error.
  Status synchronize();

  // A tensor from this context's allocator. Errors: kResourceExhausted.
  template <typename T>
  Result<DeviceTensor<T>> newTensor(const std::vector<int64_t>& shape, MemoryCategory category) {
    return DeviceTensor<T>::create(m_allocator, shape, category);
  }

 private:
  explicit CudaContext(int64_t allocatorLimitBytes) : m_allocator(allocatorLimitBytes) {}

  DeviceInfo m_device;
  cudaStream_t m_stream = nullptr;
  cudaStream_t m_sideStream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  CachingAllocator m_allocator;
  void* m_cublasWorkspace = nullptr;
};

}  // namespace moewb::engine::cuda
