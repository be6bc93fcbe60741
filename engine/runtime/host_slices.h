// Splitting a host-side loop over contiguous slices on short-lived threads, for one-off bulk
// passes over large host buffers (page faulting, scanning) outside the CPU backend's ThreadPool.
#pragma once

#include <cstdint>
#include <functional>

namespace moewb::engine {

// Calls fn(first, last) on contiguous slices that cover [0, count) exactly once, at most
// `maxThreads` slices (and no more than count), each slice on its own thread with the first on
// the caller's; a thread that cannot be started runs its slice on the caller's. The slice bounds
// are multiples of `grain` (>= 1) except the last. Returns once every slice is done. count <= 0
// does nothing. fn must be safe to call concurrently on disjoint slices.
void forEachSliceOnThreads(int64_t count, int64_t grain, unsigned maxThreads,
                           const std::function<void(int64_t first, int64_t last)>& fn);

}  // namespace moewb::engine
