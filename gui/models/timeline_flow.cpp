// Timeline flows: reading an API call's link to its GPU work, and the arrow's geometry.
#include "moewb/gui/timeline_flow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "moewb/base/units.h"
#include "moewb/storage/gpu_queries.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

namespace {

// a - b in double (times come from the file and their difference may leave int64), saturated.
int64_t saturatingDiff(int64_t a, int64_t b) {
  const double d = double(a) - double(b);
  if (d >= 9.2e18) return std::numeric_limits<int64_t>::max();
  if (d <= -9.2e18) return std::numeric_limits<int64_t>::min();
  return a - b;
}

FlowEnd endOf(const storage::SliceRow& row) {
  FlowEnd end;
  end.slice = row.id;
  end.track = row.track;
  end.startNs = row.startNs;
  // A duration that would overflow the end (an untrusted file) ends the slice at int64 max.
  end.endNs = row.durNs > 0 && row.startNs > std::numeric_limits<int64_t>::max() - row.durNs
                  ? std::numeric_limits<int64_t>::max()
                  : row.startNs + std::max<int64_t>(row.durNs, 0);
  end.name = row.name;
  end.category = row.category;
  end.step = row.step;
  return end;
}

FlowSide sideOf(double x, double widthPx) {
  if (x < 0) return FlowSide::kLeft;
  if (x > widthPx) return FlowSide::kRight;
  return FlowSide::kInside;
}

}  // namespace

int64_t TimelineFlow::queueDelayNs() const {
  return saturatingDiff(work.startNs, launch.startNs);
}

Result<std::optional<TimelineFlow>> findFlow(storage::TraceReader& reader,
                                             const FlowEnd& selected) {
  std::optional<TimelineFlow> none;
  MOEWB_ASSIGN_OR_RETURN(std::optional<storage::GpuSliceDetails> details,
                         reader.gpuSliceDetails(selected.slice));
  if (!details || !details->apiCall || details->slice.correlationId == 0) return none;
  TimelineFlow flow;
  flow.correlationId = details->slice.correlationId;
  flow.rank = details->track.rank;
  flow.work = endOf(details->slice);
  flow.launch = endOf(*details->apiCall);
  if (selected.slice == flow.work.slice || selected.slice == flow.launch.slice) {
    return std::optional<TimelineFlow>(std::move(flow));
  }
  // An API call that shares its correlation id with an earlier one (the reader found the work it
  // launched, then that work's first launch): the arrow leaves the call that was selected.
  if (selected.category != storage::kCategoryApi) return none;
  flow.launch = selected;
  return std::optional<TimelineFlow>(std::move(flow));
}

FlowArrow layoutFlowArrow(const TimelineFlow& flow, const TimelineGeometry& g, double launchY,
                          double workY) {
  FlowArrow arrow;
  const double w = g.widthPx;
  double x0 = g.xOf(flow.launch.startNs), x1 = g.xOf(flow.work.startNs);
  double y0 = launchY, y1 = workY;
  arrow.launchSide = sideOf(x0, w);
  arrow.workSide = sideOf(x1, w);
  if (!std::isfinite(x0) || !std::isfinite(x1)) return arrow;
  if (arrow.launchSide != FlowSide::kInside && arrow.launchSide == arrow.workSide) return arrow;
  // Clip the segment's x to [0, w] along the line (parameter t from the launch end).
  auto at = [&](double x) {
    const double t = (x - x0) / (x1 - x0);
    return y0 + t * (y1 - y0);
  };
  const double ox0 = x0, ox1 = x1;
  if (ox0 < 0) {
    y0 = at(0);
    x0 = 0;
  } else if (ox0 > w) {
    y0 = at(w);
    x0 = w;
  }
  if (ox1 < 0) {
    y1 = y0 + (0 - x0) / (ox1 - x0) * (workY - y0);
    x1 = 0;
  } else if (ox1 > w) {
    y1 = y0 + (w - x0) / (ox1 - x0) * (workY - y0);
    x1 = w;
  }
  arrow.visible = true;
  arrow.x0 = x0;
  arrow.y0 = y0;
  arrow.x1 = x1;
  arrow.y1 = y1;
  return arrow;
}

double flowArrowDistance(const FlowArrow& arrow, double x, double y) {
  if (!arrow.visible) return std::numeric_limits<double>::infinity();
  const double dx = arrow.x1 - arrow.x0, dy = arrow.y1 - arrow.y0;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((x - arrow.x0) * dx + (y - arrow.y0) * dy) / len2 : 0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(x - (arrow.x0 + t * dx), y - (arrow.y0 + t * dy));
}

TimeRange flowJumpRange(const TimelineFlow& flow, const FlowEnd& target,
                        const TimelineGeometry& g) {
  const int64_t lo = std::min(flow.launch.startNs, flow.work.startNs);
  const int64_t hi = std::max(flow.launch.endNs, flow.work.endNs);
  const double windowNs = double(g.durNs());
  if (lo >= g.startNs && hi <= g.endNs) return {g.startNs, g.endNs};
  const double spanNs = double(hi) - double(lo);
  auto centred = [&](double midNs, double lengthNs) {
    const double start = midNs - lengthNs / 2;
    const double end = start + lengthNs;
    constexpr double kMax = 9.2e18;
    return TimeRange{int64_t(std::clamp(start, -kMax, kMax)),
                     int64_t(std::clamp(end, -kMax, kMax))};
  };
  if (spanNs <= 0.8 * windowNs) return centred(double(lo) + spanNs / 2, windowNs);
  if (spanNs * 1.2 <= kFlowMaxJumpZoomOut * windowNs) {
    return centred(double(lo) + spanNs / 2, spanNs * 1.2);
  }
  return centred(double(target.startNs), windowNs);
}

std::string flowDelayText(const TimelineFlow& flow) {
  const int64_t delayNs = flow.queueDelayNs();
  if (delayNs >= 0) return "launched " + formatDurationNs(delayNs) + " before it started";
  const int64_t earlyNs = delayNs == std::numeric_limits<int64_t>::min()
                              ? std::numeric_limits<int64_t>::max()
                              : -delayNs;
  return "started " + formatDurationNs(earlyNs) + " before its launch call (the clocks disagree)";
}

}  // namespace moewb::gui
