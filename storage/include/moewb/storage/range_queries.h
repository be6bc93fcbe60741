// Range queries for the GUI's range selection (the "Selection" dock): what GPU work ran inside a
// time window, grouped by name, as Nsight Systems' and Perfetto's range aggregates show it.
//
// gpuWorkInRange opens its own read-only connection to the trace (hardened like TraceReader's),
// so a worker thread can run it while the GUI thread keeps the document's reader; the
// connection is closed before it returns. Clipping rule (the same as the GUI's host-slice
// aggregate): a slice counts when it overlaps [start, end) (start < end && start + dur > start
// of the window), and only its part inside the window counts towards the total and the maximum.
// Cost: one index range scan of slice(track, start_ns) per stream track over [window.start -
// longest slice, window.end) with a row lookup each, summed per (name, category) in C++
// (O(groups) memory), plus a few primary-key probes per group for the names: about 1.2 s for a
// full-range selection of 1M kernels on the 2-core machine, so the GUI runs it on a worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/base/status.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

// The GPU work of one name inside a window.
struct RangeNameTotal {
  std::string name;            // slice name (kernels: the demangled name)
  std::string shortName;       // kernels: the base name from gpu_kernel; else ""
  std::string category;        // kernel, memcpy, memset
  int64_t count = 0;           // slices overlapping the window
  int64_t totalNs = 0;         // sum of their durations clipped to the window, ns
  int64_t maxNs = 0;           // largest clipped duration, ns
  SliceId longest;             // the slice with that duration
  int64_t longestStartNs = 0;  // its start and end (not clipped), ns
  int64_t longestEndNs = 0;
  bool operator==(const RangeNameTotal&) const = default;
};

// Kernels, copies and memsets (slices on tracks of kind "stream") overlapping `window`, grouped by
// (name, category), ordered by total descending, then name. Empty for an empty window or a trace
// without stream tracks. Errors: the file cannot be opened or read (the Status names the file).
// Thread-safety: any thread; opens and closes its own connection.
Result<std::vector<RangeNameTotal>> gpuWorkInRange(const std::string& path, TimeWindow window);

}  // namespace moewb::storage
