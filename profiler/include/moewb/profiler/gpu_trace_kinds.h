// GpuTraceKinds: which kinds of GPU activity a capture records (`moewb run --gpu-trace-kinds`,
// like nsys --trace), one bit per kind, each mapped to a CUPTI activity kind by the capture:
//   kernel  kernels (CONCURRENT_KERNEL)        memcpy  copies (MEMCPY)
//   memset  memsets (MEMSET)                   memory  device allocations/frees (MEMORY2)
//   sync    synchronisations (SYNCHRONIZATION) runtime CUDA runtime API calls (RUNTIME)
//   driver  CUDA driver API calls (DRIVER)     nvtx    NVTX ranges and markers (MARKER)
//   launch_api  only the runtime and driver calls that put work on the GPU, move, set,
//           allocate or free memory, load modules, or wait (isLaunchApiName): what attribution
//           needs, without the calls that launch nothing (cudaGetLastError, cudaGetDevice,
//           cudaEventRecord, ...), about a quarter of the API records of a training step.
//           Redundant next to runtime and driver; not part of "all".
// Named sets: "all" (the first eight kinds) and "launches" (every device kind, nvtx and
// launch_api: every record attributed, at the lowest API cost).
// Attribution: a kernel, copy, memset, allocation or sync is tied to its step, layer and phase
// through the API call that launched it (same correlation id) and the NVTX range around that
// call. So without runtime and driver records no device record can be attributed (it keeps only
// the step its GPU time falls in); kernels that libraries launch through the driver API (cuBLAS)
// need driver; without nvtx the API calls and their work get phase "step" and no layer.
// Costs: every kind adds CUPTI work per event; API kinds add it to every CUDA call on the
// engine's thread (bench/trace_overhead_cuda_bench measures each set). Plain bit arithmetic,
// no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moewb/base/status.h"

namespace moewb::profiler {

enum class GpuTraceKind : uint32_t {
  kKernel = 1u << 0,
  kMemcpy = 1u << 1,
  kMemset = 1u << 2,
  kMemory = 1u << 3,
  kSync = 1u << 4,
  kRuntime = 1u << 5,
  kDriver = 1u << 6,
  kNvtx = 1u << 7,
  kLaunchApi = 1u << 8,
};

class GpuTraceKinds {
 public:
  // Every kind (the default of a capture).
  static constexpr GpuTraceKinds all() { return GpuTraceKinds(0xffu); }
  static constexpr GpuTraceKinds none() { return GpuTraceKinds(0u); }
  // Every device kind, nvtx and launch_api (the "launches" set).
  static constexpr GpuTraceKinds launches() { return GpuTraceKinds(0x19fu); }

  // The kinds of a bit mask (as bits() returns it).
  static constexpr GpuTraceKinds fromBits(uint32_t bits) { return GpuTraceKinds(bits); }

  constexpr GpuTraceKinds() : m_bits(0xffu) {}
  constexpr bool has(GpuTraceKind kind) const { return (m_bits & uint32_t(kind)) != 0; }
  constexpr GpuTraceKinds with(GpuTraceKind kind) const {
    return GpuTraceKinds(m_bits | uint32_t(kind));
  }
  constexpr bool empty() const { return m_bits == 0; }
  constexpr uint32_t bits() const { return m_bits; }
  constexpr bool operator==(const GpuTraceKinds&) const = default;
  // True when device records can be tied to the API call that launched them (runtime, driver or
  // launch_api).
  constexpr bool canAttribute() const {
    return has(GpuTraceKind::kRuntime) || has(GpuTraceKind::kDriver) ||
           has(GpuTraceKind::kLaunchApi);
  }

  // "kernel,memcpy,runtime" in the canonical order of kGpuTraceKindNames; "all" and "launches"
  // for those sets, "none" for no kind.
  std::string describe() const;
  // One sentence on what attribution these kinds allow (shown in `moewb info` via the stats
  // table): which records keep their step, layer and phase and which do not.
  std::string attributionNote() const;

 private:
  explicit constexpr GpuTraceKinds(uint32_t bits) : m_bits(bits) {}
  uint32_t m_bits;
};

// The names in canonical order, comma-separated, for messages and help texts.
inline constexpr const char* kGpuTraceKindNames =
    "kernel, memcpy, memset, memory, sync, runtime, driver, nvtx, launch_api";

// True for the CUDA runtime or driver API function names that launch_api records: names with
// Launch, Memcpy, Memset, Malloc, MemAlloc, Free, Load, GetKernel, GetFunction, Synchronize or
// StreamWaitEvent in them ("cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cuMemFree_v2",
// "cuLibraryLoadData").
bool isLaunchApiName(std::string_view name);

// Parses a comma-separated list of kind names and set names ("all", "launches"; spaces around
// names ignored, repeats allowed). Errors: kInvalidArgument naming the bad entry (or an empty
// list) and the accepted names; the message does not name the option (callers add it).
Result<GpuTraceKinds> parseGpuTraceKinds(const std::string& list);

}  // namespace moewb::profiler
