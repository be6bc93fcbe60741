// Summaries of the GPU activity in a trace, for `moewb info` and the GUI: per-kernel totals and
// the GPU's idle time inside the training steps. Both read the trace through TraceReader (any
// implementation) and cost one pass over the slices.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

// Kernel time against step time.
struct KernelSummary {
  int64_t kernelCount = 0;            // kernel slices in the file
  int64_t kernelTotalNs = 0;          // sum of their durations (overlaps counted twice)
  int64_t stepTotalNs = 0;            // sum of the durations of the step slices
  std::vector<PhaseTotal> topKernels; // per kernel name, largest total first
  double meanNs() const { return kernelCount ? double(kernelTotalNs) / double(kernelCount) : 0.0; }
  // Share of all step time (0 without steps).
  double shareOfSteps(int64_t ns) const {
    return stepTotalNs > 0 ? double(ns) / double(stepTotalNs) : 0.0;
  }
};

// Returns the totals of kernel slices and the `top` kernel names by total time (all names for
// top < 0). Errors: read errors of the reader.
Result<KernelSummary> kernelSummary(TraceReader& reader, int top);

// Where the GPU did nothing during the steps. Busy time is the union of the kernel, memcpy and
// memset slices (every stream and device together) clipped to each step slice; a gap is a
// maximal idle interval inside a step, including the stretch from the step's start to its first
// GPU work and from its last to the step's end.
struct GpuIdleSummary {
  int64_t steps = 0;                 // step slices with at least one GPU slice inside
  int64_t stepNs = 0;                // their total duration
  int64_t busyNs = 0;
  int64_t idleNs = 0;                // stepNs - busyNs
  int64_t gapCount = 0;
  int64_t largestGapNs = 0;
  int64_t largestGapStep = -1;
  int64_t largestGapStartNs = 0;
  // Gap counts by length: < 10 us, < 100 us, < 1 ms, >= 1 ms.
  std::array<int64_t, 4> gapsByLength{};
  double idleShare() const { return stepNs > 0 ? double(idleNs) / double(stepNs) : 0.0; }
};

// Computes the idle summary; all zeros for a trace without GPU slices. Only the step slices of
// the lowest-numbered track that has step slices count (rank 0's trainer thread).
// Errors: read errors of the reader. Cost: one pass over the slices, memory O(GPU slices).
Result<GpuIdleSummary> gpuIdleSummary(TraceReader& reader);

}  // namespace moewb::storage
