// GPU lanes (CUDA API threads and streams): layout on the timeline's pixels, hit testing,
// colours and labels.
#include "moewb/gui/gpu_timeline.h"

#include <algorithm>

namespace moewb::gui {

std::vector<GpuDrawItem> layoutGpuItems(const std::vector<storage::GpuLane>& lanes,
                                        const TimelineGeometry& g) {
  std::vector<GpuDrawItem> out;
  const double right = g.widthPx + 1.0;
  for (size_t l = 0; l < lanes.size(); ++l) {
    const auto& items = lanes[l].items;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].endNs <= g.startNs || items[i].startNs >= g.endNs) continue;
      double x0 = std::max(g.xOf(items[i].startNs), -1.0);
      double x1 = std::min(g.xOf(items[i].endNs), right);
      if (x1 - x0 < 1.0) x1 = x0 + 1.0;
      out.push_back({int32_t(l), int32_t(i), x0, x1});
    }
  }
  return out;
}

const GpuDrawItem* gpuItemAt(const std::vector<GpuDrawItem>& items, int32_t lane, double x) {
  // Items of `lane` are contiguous; within it x0 is non-decreasing.
  auto first = std::lower_bound(items.begin(), items.end(), lane,
                                [](const GpuDrawItem& d, int32_t l) { return d.lane < l; });
  auto last = std::upper_bound(first, items.end(), lane,
                               [](int32_t l, const GpuDrawItem& d) { return l < d.lane; });
  // The last item starting at or before x, else the one before it (a stream's items rarely
  // overlap; when a 1 px widened item covers its successor's first pixel, both are checked).
  auto it =
      std::upper_bound(first, last, x, [](double v, const GpuDrawItem& d) { return v < d.x0; });
  for (int back = 0; back < 2 && it != first; ++back) {
    --it;
    if (x < it->x1) return &*it;
  }
  return nullptr;
}

QColor gpuCategoryColor(const std::string& category) {
  if (category == storage::kCategoryKernel) return QColor::fromRgb(0x4e79a7);
  if (category == storage::kCategoryMemcpy) return QColor::fromRgb(0xf28e2b);
  if (category == storage::kCategoryMemset) return QColor::fromRgb(0x59a14f);
  if (category == storage::kCategoryApi) return QColor::fromRgb(0xb07aa1);
  if (category == storage::kCategorySync) return QColor::fromRgb(0xe15759);
  return QColor::fromRgb(0x8c8c8c);
}

std::string gpuItemLabel(const storage::GpuLaneItem& item) {
  if (item.isFolded()) {
    const std::string what = item.category == storage::kCategoryKernel   ? " kernels"
                             : item.category == storage::kCategoryMemcpy ? " copies"
                             : item.category == storage::kCategoryMemset ? " memsets"
                             : item.category == storage::kCategoryApi    ? " API calls"
                                                                         : " GPU slices";
    return std::to_string(item.count) + what;
  }
  return item.shortName.empty() ? item.name : item.shortName;
}

std::string gpuLaneLabel(const storage::TrackRow& track) {
  return track.rank > 0 ? "rank " + std::to_string(track.rank) + " · " + track.name : track.name;
}

}  // namespace moewb::gui
