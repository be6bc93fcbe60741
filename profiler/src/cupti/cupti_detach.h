// Detaching CUPTI from the process between capture windows, as Kineto does when a profiling
// session ends: with every activity kind disabled CUPTI still keeps its hooks in the CUDA runtime
// and driver, and the steps after a window stayed slower than before it (bench/RESULTS.md,
// "Third round": 5.7-7.0 ms against 3.9 ms untraced for small.toml). cuptiFinalize removes the
// hooks; any later CUPTI call attaches CUPTI again (lazy initialisation).
#pragma once

#include "moewb/base/status.h"

namespace moewb::profiler::cupti {

// Detaches CUPTI. The caller has disabled every activity kind, flushed and parsed every buffer,
// and makes no other CUPTI call until this returns (nor any after it until it wants CUPTI back:
// each call re-attaches). cuptiFinalize runs, as CUPTI's documentation advises, at the exit
// callsite of a CUDA runtime call: this function subscribes a callback, then makes cheap runtime
// calls (cudaGetDevice) on this thread until the callback on some thread has detached CUPTI.
// Errors: kInternal naming the failed CUPTI or CUDA call, or when no callback came.
Status detachCupti();

}  // namespace moewb::profiler::cupti
