#include "runtime/host_slices.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace moewb::engine {

void forEachSliceOnThreads(int64_t count, int64_t grain, unsigned maxThreads,
                           const std::function<void(int64_t first, int64_t last)>& fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t grains = (count + grain - 1) / grain;
  const int64_t slices = std::clamp<int64_t>(int64_t(maxThreads), 1, grains);
  // Slice s holds grains [grains * s / slices, grains * (s + 1) / slices).
  auto bound = [&](int64_t s) { return std::min(count, grains * s / slices * grain); };
  std::vector<std::thread> workers;
  for (int64_t s = 1; s < slices; ++s) {
    const int64_t first = bound(s), last = bound(s + 1);
    try {
      workers.emplace_back(fn, first, last);
    } catch (const std::system_error&) {
      fn(first, last);  // no thread to be had: this slice on the caller's
    }
  }
  fn(0, bound(1));
  for (std::thread& worker : workers) worker.join();
}

}  // namespace moewb::engine
