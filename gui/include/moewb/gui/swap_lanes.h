// Swap lanes of the timeline: each rank with swap rows gets two lanes, "swap D2H" (offloads) and
// "swap H2D" (reloads), one bar per copy of a swapped activation (storage::SwapEventRow), laid
// out on the pixels of a TimelineGeometry. A copy that compute waited for (stallNs > 0) is late:
// a reload whose consumer waited (stall span neededNs -> end) or an offload compute waited for
// at its free-lag point to free its memory (wait span neededNs -> neededNs + stallNs). It is
// drawn red and its span, clipped to the bar, is marked. Lanes of a
// trace whose swap rows are simulated (CPU backend: the plan's moves on the measured phases) are
// labelled "(simulated)".
//
// layoutSwapItems places the copies: x0/x1 are the bar's edges in plot pixels, clipped to a pixel
// beyond the plot on either side and at least 1 px wide; copies that fall within the pixel of
// the previous bar of their lane fold into it (count > 1, late when any is late), so the number
// of items is bounded by the pixels. swapItemAt hit-tests by binary search. Pure value
// computations, O(events) or O(log items); no widgets, any thread.
#pragma once

#include <QColor>
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/swap_queries.h"

namespace moewb::gui {

// One swap bar to paint.
struct SwapDrawItem {
  int32_t lane = 0;      // 2 * (index of the rank in the lane ranks) + (0 D2H, 1 H2D)
  int32_t event = 0;     // index into the events it was laid out from (folded: the first)
  int32_t count = 1;     // copies covered; > 1 means folded
  double x0 = 0;         // left edge, plot px
  double x1 = 0;         // right edge, plot px (x1 - x0 >= 1)
  bool late = false;     // a copy with stall > 0, either direction (folded: any of them)
  double stallX0 = 0;    // late only: the stall or wait span, plot px, inside [x0, x1]
  double stallX1 = 0;
  bool isFolded() const { return count > 1; }
  bool operator==(const SwapDrawItem&) const = default;
};

// The ranks that get swap lanes (ascending, duplicates removed) from the ranks of a trace's swap
// steps, plans and events.
std::vector<int32_t> swapLaneRanks(std::vector<int32_t> ranks);

// Lane index of `event` among lanes of `ranks` (see SwapDrawItem::lane), or -1 when its rank has
// no lanes.
int32_t swapLaneOf(const std::vector<int32_t>& ranks, const storage::SwapEventRow& event);

// Lays out `events` (any order) on `g`; events outside the window or of ranks without lanes are
// dropped. Result ordered by lane, then x0.
std::vector<SwapDrawItem> layoutSwapItems(const std::vector<int32_t>& ranks,
                                          const std::vector<storage::SwapEventRow>& events,
                                          const TimelineGeometry& g);

// The item of `items` in `lane` covering plot x (x0 <= x < x1), or nullptr. O(log items).
const SwapDrawItem* swapItemAt(const std::vector<SwapDrawItem>& items, int32_t lane, double x);

// Gutter label of lane `lane`: "swap D2H", "rank 1 · swap H2D", with " (simulated)" appended
// when `simulated`.
std::string swapLaneLabel(const std::vector<int32_t>& ranks, int32_t lane, bool simulated);

// Text on a bar: "L3 expert_fc1"; "N copies" for a folded one.
std::string swapItemLabel(const storage::SwapEventRow& event, int32_t count = 1);

// Effective rate of a copy in GB/s (1e9 bytes per second); 0 for a zero duration.
double swapCopyGbps(int64_t bytes, int64_t durNs);

// Tooltip lines of a copy: what (layer, op, direction), bytes, duration, GB/s, and for reloads
// the consumer's stall ("late: compute waited 1.20 ms") or "on time"; for an offload with a wait
// "compute waited 1.20 ms for this copy to free its memory".
std::vector<std::string> swapTooltipLines(const storage::SwapEventRow& event);

// Whether compute waited for `event` (a reload stall or an offload wait): drawn as late.
bool swapCopyLate(const storage::SwapEventRow& event);

// Bar colours: offloads teal, reloads blue, late copies red (the stall span a darker red).
QColor swapItemColor(bool toHost, bool late);
QColor swapStallColor();

}  // namespace moewb::gui
