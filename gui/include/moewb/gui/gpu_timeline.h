// GPU lanes of the timeline (each rank's CUDA API threads, then its streams): the reader's
// downsampled lanes (storage::TraceReader::gpuLanes,
// queried for the visible window with one bucket per pixel) laid out on the pixels of a
// TimelineGeometry, hit-tested, coloured by kind and labelled.
//
// layoutGpuItems places every item of every lane: x0/x1 are the item's edges in plot pixels,
// clipped to a pixel beyond the plot on either side and at least 1 px wide, so the narrowest
// kernel stays visible; items of a lane keep the reader's start order. gpuItemAt finds the item
// under (lane, x) by binary search. Colours: kernels blue, memcpy orange, memset green, API calls
// mauve, synchronisations red, mixed runs grey. Labels: a kernel's short name when the capture gave one (the demangled name
// otherwise), "N kernels" for a folded run. Pure value computations, O(items) or O(log items);
// no widgets, any thread.
#pragma once

#include <QColor>
#include <string>
#include <vector>

#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/gpu_queries.h"

namespace moewb::gui {

// One GPU item to paint.
struct GpuDrawItem {
  int32_t lane = 0;  // index into the lanes it was laid out from
  int32_t item = 0;  // index into that lane's items
  double x0 = 0;     // left edge, plot px
  double x1 = 0;     // right edge, plot px (x1 - x0 >= 1)
  bool operator==(const GpuDrawItem&) const = default;
};

// Lays out `lanes` on `g` (see the file comment); items entirely outside the window are dropped.
// Result ordered by lane, then by x0.
std::vector<GpuDrawItem> layoutGpuItems(const std::vector<storage::GpuLane>& lanes,
                                        const TimelineGeometry& g);

// The item of `items` in `lane` covering plot x (x0 <= x < x1), or nullptr; where items overlap,
// the last one drawn (the later start). O(log items).
const GpuDrawItem* gpuItemAt(const std::vector<GpuDrawItem>& items, int32_t lane, double x);

// Fill colour of an item of `category` (kernel, memcpy, memset, api, sync; anything else grey).
QColor gpuCategoryColor(const std::string& category);

// Text drawn on `item` (before eliding to its width).
std::string gpuItemLabel(const storage::GpuLaneItem& item);

// Gutter label of a lane: the track name, prefixed with the rank for ranks > 0.
std::string gpuLaneLabel(const storage::TrackRow& track);

}  // namespace moewb::gui
