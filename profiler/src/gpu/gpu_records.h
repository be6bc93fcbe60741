// Plain GPU activity records: what the CUPTI parser (profiler/src/cupti/) turns each activity
// record into, and what GpuTraceBuilder attributes and writes. They carry no CUPTI types, so the
// attribution is built and tested without the CUDA toolkit. Times are already in the host
// steady-clock domain (ClockCalibration), in ns. Enumerations keep CUPTI's values (gpu_rows.h).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace moewb::profiler::gpu {

// A CUDA runtime or driver API call.
struct ApiCall {
  uint32_t correlationId = 0;  // links the call to the work it queued
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint32_t threadId = 0;       // OS thread id (gettid)
  bool driver = false;         // false: runtime API
  uint32_t cbid = 0;
  std::string name;            // "cudaLaunchKernel" (version suffix removed)
  uint32_t returnValue = 0;
};

// One NVTX marker record: a range push (kStart), its pop (kEnd, same id, no name) or an instant.
struct NvtxMarker {
  enum class Kind : uint8_t { kStart, kEnd, kInstant };
  Kind kind = Kind::kInstant;
  uint32_t id = 0;
  int64_t tsNs = 0;
  uint32_t threadId = 0;
  std::string name;            // set on kStart / kInstant
  std::string domain;          // "" = default domain
};

struct KernelActivity {
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint32_t deviceId = 0;
  uint32_t streamId = 0;
  uint32_t correlationId = 0;
  int32_t grid[3] = {1, 1, 1};
  int32_t block[3] = {1, 1, 1};
  int32_t registersPerThread = 0;
  int32_t staticSharedBytes = 0;
  int32_t dynamicSharedBytes = 0;
  std::string name;            // demangled
  std::string mangledName;
};

struct MemcpyActivity {
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint32_t deviceId = 0;
  uint32_t streamId = 0;
  uint32_t correlationId = 0;
  int32_t copyKind = 0;
  int32_t srcKind = 0;
  int32_t dstKind = 0;
  int64_t bytes = 0;
};

struct MemsetActivity {
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint32_t deviceId = 0;
  uint32_t streamId = 0;
  uint32_t correlationId = 0;
  int64_t bytes = 0;
  int32_t value = 0;
  int32_t memoryKind = 0;
};

struct MemoryActivity {
  int64_t tsNs = 0;
  uint32_t deviceId = 0;
  uint32_t streamId = 0;
  uint32_t correlationId = 0;
  bool isAllocation = true;
  int32_t memoryKind = 0;
  int64_t bytes = 0;
  uint64_t address = 0;
};

struct SyncActivity {
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint32_t correlationId = 0;
  int64_t streamId = -1;
  int32_t syncType = 0;
  int64_t cudaEventId = 0;
};

using Record = std::variant<ApiCall, NvtxMarker, KernelActivity, MemcpyActivity, MemsetActivity,
                            MemoryActivity, SyncActivity>;

// Names as Nsight Systems shows them.
// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel".
std::string apiShortName(const std::string& callbackName);
// The Itanium-demangled name, or `mangled` itself when it is not a mangled C++ name.
std::string demangle(const std::string& mangled);
// A kernel's base name: no return type, scope, template arguments or parameter list
// ("void moe::experts_fwd_kernel<bf16, 64>(int, float*)" -> "experts_fwd_kernel").
std::string kernelShortName(const std::string& demangled);

}  // namespace moewb::profiler::gpu
