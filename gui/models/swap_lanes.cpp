// Swap lanes: layout of the copies on the timeline's pixels, hit testing, labels and tooltips.
#include "moewb/gui/swap_lanes.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "moewb/base/units.h"

namespace moewb::gui {

std::vector<int32_t> swapLaneRanks(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

int32_t swapLaneOf(const std::vector<int32_t>& ranks, const storage::SwapEventRow& event) {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), event.rank);
  if (it == ranks.end() || *it != event.rank) return -1;
  return int32_t(it - ranks.begin()) * 2 + (event.toHost ? 0 : 1);
}

namespace {

// The bar of event `e` (lane `lane`) on `g`, before folding.
SwapDrawItem placeItem(const storage::SwapEventRow& e, int32_t lane, int32_t index,
                       const TimelineGeometry& g) {
  const double right = g.widthPx + 1.0;
  SwapDrawItem item;
  item.lane = lane;
  item.event = index;
  item.x0 = std::max(g.xOf(e.startNs), -1.0);
  item.x1 = std::min(g.xOf(e.endNs), right);
  if (item.x1 - item.x0 < 1.0) item.x1 = item.x0 + 1.0;
  item.late = swapCopyLate(e);
  if (item.late && !e.toHost) {
    const int64_t from = std::clamp(e.neededNs, e.startNs, e.endNs);
    item.stallX0 = std::clamp(g.xOf(from), item.x0, item.x1);
    item.stallX1 = item.x1;
  } else if (item.late) {
    // Compute waited from neededNs for stallNs (it ends when the copy does, or later when the
    // memory is freed behind the wait): the part over the bar is marked.
    const int64_t from = std::clamp(e.neededNs, e.startNs, e.endNs);
    int64_t to = 0;
    if (__builtin_add_overflow(e.neededNs, e.stallNs, &to)) to = e.endNs;
    to = std::clamp(to, from, e.endNs);
    item.stallX0 = std::clamp(g.xOf(from), item.x0, item.x1);
    item.stallX1 = std::clamp(g.xOf(to), item.stallX0, item.x1);
  }
  return item;
}

}  // namespace

std::vector<SwapDrawItem> layoutSwapItems(const std::vector<int32_t>& ranks,
                                          const std::vector<storage::SwapEventRow>& events,
                                          const TimelineGeometry& g) {
  std::vector<int32_t> lanes(events.size());
  std::vector<int32_t> order;
  order.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    lanes[i] = swapLaneOf(ranks, events[i]);
    const auto& e = events[i];
    if (lanes[i] < 0 || e.endNs <= g.startNs || e.startNs >= g.endNs) continue;
    order.push_back(int32_t(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (lanes[size_t(a)] != lanes[size_t(b)]) return lanes[size_t(a)] < lanes[size_t(b)];
    return events[size_t(a)].startNs < events[size_t(b)].startNs;
  });
  std::vector<SwapDrawItem> out;
  for (int32_t i : order) {
    SwapDrawItem item = placeItem(events[size_t(i)], lanes[size_t(i)], i, g);
    // A bar that starts inside the last pixel of the previous narrow bar of its lane folds in.
    if (!out.empty() && out.back().lane == item.lane && item.x1 - item.x0 < 1.5 &&
        out.back().x1 - out.back().x0 < 1.5 * out.back().count + 1.0 &&
        item.x0 < out.back().x1 + 0.5) {
      SwapDrawItem& prev = out.back();
      prev.x1 = std::max(prev.x1, item.x1);
      ++prev.count;
      if (item.late) {
        if (!prev.late) prev.stallX0 = item.stallX0;
        prev.late = true;
        prev.stallX1 = prev.x1;
      }
      continue;
    }
    out.push_back(item);
  }
  return out;
}

const SwapDrawItem* swapItemAt(const std::vector<SwapDrawItem>& items, int32_t lane, double x) {
  auto first = std::lower_bound(items.begin(), items.end(), lane,
                                [](const SwapDrawItem& d, int32_t l) { return d.lane < l; });
  auto last = std::upper_bound(first, items.end(), lane,
                               [](int32_t l, const SwapDrawItem& d) { return l < d.lane; });
  auto it =
      std::upper_bound(first, last, x, [](double v, const SwapDrawItem& d) { return v < d.x0; });
  // Copies of one direction share one stream and rarely overlap; check the two before x.
  for (int back = 0; back < 2 && it != first; ++back) {
    --it;
    if (x < it->x1) return &*it;
  }
  return nullptr;
}

std::string swapLaneLabel(const std::vector<int32_t>& ranks, int32_t lane, bool simulated) {
  if (lane < 0 || size_t(lane / 2) >= ranks.size()) return {};
  const int32_t rank = ranks[size_t(lane / 2)];
  std::string label = rank > 0 ? "rank " + std::to_string(rank) + " · " : "";
  label += lane % 2 == 0 ? "swap D2H" : "swap H2D";
  if (simulated) label += " (simulated)";
  return label;
}

std::string swapItemLabel(const storage::SwapEventRow& event, int32_t count) {
  if (count > 1) return std::to_string(count) + " copies";
  return "L" + std::to_string(event.layer) + " " + event.op;
}

double swapCopyGbps(int64_t bytes, int64_t durNs) {
  return durNs > 0 ? double(bytes) / double(durNs) : 0.0;  // bytes/ns = GB/s
}

std::vector<std::string> swapTooltipLines(const storage::SwapEventRow& e) {
  std::vector<std::string> lines;
  lines.push_back("layer " + std::to_string(e.layer) + " " + e.op + (e.toHost
                                                                         ? " · offload D2H"
                                                                         : " · reload H2D"));
  const int64_t durNs = e.endNs - e.startNs;
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.1f GB/s", swapCopyGbps(e.bytes, durNs));
  lines.push_back(formatBytes(e.bytes) + " in " + formatDurationNs(durNs) + " · " + rate);
  lines.push_back("step " + std::to_string(e.step) + (e.rank > 0 ? " · rank " +
                                                                       std::to_string(e.rank)
                                                                 : std::string()));
  if (!e.toHost) {
    lines.push_back(e.stallNs > 0 ? "late: compute waited " + formatDurationNs(e.stallNs)
                                  : std::string("on time (no stall)"));
  } else if (e.stallNs > 0) {
    lines.push_back("compute waited " + formatDurationNs(e.stallNs) +
                    " for this copy to free its memory");
  }
  if (e.simulated) lines.push_back("simulated (CPU backend bandwidth model)");
  return lines;
}

bool swapCopyLate(const storage::SwapEventRow& event) { return event.stallNs > 0; }

QColor swapItemColor(bool toHost, bool late) {
  if (late) return QColor::fromRgb(0xe15759);
  return toHost ? QColor::fromRgb(0x76b7b2) : QColor::fromRgb(0x4e79a7);
}

QColor swapStallColor() { return QColor::fromRgb(0x8b1e1e); }

}  // namespace moewb::gui
