// Row types of the GPU activity captured by the profiler (CUPTI): kernels, copies, memsets,
// synchronisations and CUDA API calls are slices (on a track per CUDA stream, or per API thread)
// plus one detail row keyed by the slice; device memory allocations and frees are instant rows
// of their own table. The writer takes a SliceRow and a detail row together
// (TraceWriter::addGpuKernel ...); the SQL is in schema.cpp (tables gpu_kernel, gpu_memcpy,
// gpu_memset, gpu_sync, cuda_api, gpu_memory and the Nsight-Systems-named views over them).
//
// Enumerations are stored as CUPTI's integer values (documented per field), so SQL written for
// Nsight Systems exports (`copyKind = 1`) works unchanged; storage itself does not include CUPTI.
// `phase` is the engine phase the work ran under ("experts.fwd"), "step" for work inside a step
// but outside every phase, "setup" before the first step, "" when unknown.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/ids.h"

namespace moewb::storage {

// Slice categories of GPU activity (SliceRow::category).
inline constexpr const char* kCategoryKernel = "kernel";
inline constexpr const char* kCategoryMemcpy = "memcpy";
inline constexpr const char* kCategoryMemset = "memset";
inline constexpr const char* kCategorySync = "sync";
inline constexpr const char* kCategoryApi = "api";
inline constexpr const char* kCategoryNvtx = "nvtx";

// Track kinds of GPU capture (TrackRow::kind): one per (device, stream), one per API thread.
inline constexpr const char* kTrackKindStream = "stream";
inline constexpr const char* kTrackKindCudaApi = "cuda_api";

// True for the categories of work that occupies a GPU (kernel, memcpy, memset).
bool isGpuWorkCategory(const std::string& category);
// True for every category the GPU capture writes (the above plus sync, api, nvtx).
bool isGpuCaptureCategory(const std::string& category);

// Details of a kernel slice (slice.name is the demangled name).
struct GpuKernelRow {
  int32_t deviceId = 0;
  int64_t streamId = 0;
  int32_t gridX = 1, gridY = 1, gridZ = 1;     // blocks
  int32_t blockX = 1, blockY = 1, blockZ = 1;  // threads per block
  int32_t registersPerThread = 0;
  int32_t staticSharedBytes = 0;               // per block
  int32_t dynamicSharedBytes = 0;              // per block
  std::string mangledName;
  std::string shortName;                       // base name without scope, templates or arguments
  std::string phase;
};

// Details of a memcpy slice.
struct GpuMemcpyRow {
  int32_t deviceId = 0;
  int64_t streamId = 0;
  int32_t copyKind = 0;   // CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 3 HtoA, ..., 8 DtoD, 10 PtoP
  int32_t srcKind = 0;    // CUpti_ActivityMemoryKind: 1 pageable, 2 pinned, 3 device, 4 array,
  int32_t dstKind = 0;    //   5 managed, 6 device static, 7 managed static
  int64_t bytes = 0;
  std::string phase;
};

// Details of a memset slice.
struct GpuMemsetRow {
  int32_t deviceId = 0;
  int64_t streamId = 0;
  int64_t bytes = 0;
  int32_t value = 0;       // the byte value written
  int32_t memoryKind = 0;  // CUpti_ActivityMemoryKind
  std::string phase;
};

// Details of a synchronisation slice (on the API thread track of the call that waited).
struct GpuSyncRow {
  int32_t syncType = 0;    // CUpti_ActivitySynchronizationType: 1 event sync, 2 stream wait event,
                           //   3 stream sync, 4 context (device) sync
  int64_t streamId = 0;    // -1 when not about one stream
  int64_t cudaEventId = 0;
  std::string phase;
};

// Details of a CUDA API call slice (slice.name is the function, e.g. "cudaLaunchKernel").
struct CudaApiRow {
  std::string api;         // "runtime" or "driver"
  int32_t cbid = 0;        // CUPTI callback id of the function
  int64_t threadId = 0;    // OS thread id (gettid)
  int32_t returnValue = 0; // cudaError_t / CUresult
  std::string phase;
};

// One device memory allocation or free seen by CUPTI (cudaMalloc, cudaFree, pool allocations).
struct GpuMemoryRow {
  TrackId track;           // the API thread track of the call (invalid when unknown)
  int64_t tsNs = 0;
  bool isAllocation = true;
  int32_t memoryKind = 0;  // CUpti_ActivityMemoryKind
  int64_t bytes = 0;
  uint64_t address = 0;
  int32_t deviceId = 0;
  int64_t streamId = 0;
  int64_t correlationId = 0;
  int64_t step = -1;
  int32_t layer = -1;
  std::string phase;
};

}  // namespace moewb::storage
