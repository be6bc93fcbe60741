// Result types of the GPU queries of TraceReader, for the GUI's stream lanes and kernel details:
// the slices of the CUDA stream tracks in a time window (downsampled for drawing), the launch
// details of one GPU slice (its detail row and the API call that launched it), and the expert
// load of one (step, layer) so a kernel can be joined with the routing it ran under.
// Plain values; the queries and their costs are documented on TraceReader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/rows.h"

namespace moewb::storage {

// One item of a stream lane: a kernel, memcpy or memset slice, or (count > 1) a run of
// neighbouring slices each shorter than one bucket, folded into one item.
struct GpuLaneItem {
  SliceId id;             // the slice; for a folded item its first slice
  TrackId track;          // a track of kind kTrackKindStream
  int64_t startNs = 0;    // start of the slice (folded: of its first slice)
  int64_t endNs = 0;      // end (folded: the latest end among its slices)
  std::string name;       // slice name (kernels: the demangled name); "" when folded
  std::string shortName;  // kernels: the base name from gpu_kernel; else ""
  std::string category;   // kernel, memcpy, memset, api, sync; folded: theirs when all agree,
                          // else "mixed"
  int64_t step = -1;      // folded: of the first slice
  int32_t layer = -1;     // folded: of the first slice
  int64_t correlationId = 0;
  int32_t count = 1;  // slices covered; > 1 means folded

  bool isFolded() const { return count > 1; }
  int64_t durNs() const { return endNs - startNs; }
  bool operator==(const GpuLaneItem&) const = default;
};

// The slices of one stream or CUDA API track in a window (see TraceReader::gpuLanes).
struct GpuLane {
  TrackRow track;                  // kind kTrackKindStream or kTrackKindCudaApi
  std::vector<GpuLaneItem> items;  // by start; stream items do not overlap, API calls may nest
};

// Everything known about one GPU slice: the slice, its detail row (the one that matches its
// category) and the CUDA API call with the same correlation id, when captured.
struct GpuSliceDetails {
  SliceRow slice;
  TrackRow track;                        // the stream track it ran on
  std::optional<GpuKernelRow> kernel;    // category kernel
  std::optional<GpuMemcpyRow> memcpy;    // category memcpy
  std::optional<GpuMemsetRow> memset;    // category memset
  std::optional<SliceRow> apiCall;       // the launching call (cudaLaunchKernel, ...)
  std::optional<CudaApiRow> apiDetails;  // its cuda_api row
  std::string phase() const;             // the detail row's phase, "" without one
};

// The detail row of a GPU work slice (exactly one of the three is set), as
// TraceReader::forEachSliceWithGpuWork streams it. Kernel names are on the slice; the kernel
// row's mangledName and shortName stay empty.
struct GpuWorkRow {
  std::optional<GpuKernelRow> kernel;
  std::optional<GpuMemcpyRow> memcpy;
  std::optional<GpuMemsetRow> memset;
};

// Expert load of one (step, layer), tokens summed over ranks, experts 0..n-1 dense (an expert
// without a row counts 0 tokens).
struct LayerLoad {
  int64_t step = 0;
  int32_t layer = 0;
  std::vector<int64_t> tokens;   // [expert] (token, expert) assignments routed
  std::vector<int64_t> dropped;  // [expert] assignments dropped by capacity
  int64_t totalTokens = 0;
  int32_t hottestExpert = 0;  // most tokens (lowest index on ties)
  double maxOverMean = 0;     // max_e tokens / mean_e tokens; 0 when no tokens
};

}  // namespace moewb::storage
