// Timeline flows: the link between a CUDA API call (cudaLaunchKernel, cudaMemcpyAsync, ...) on a
// host thread's API lane and the GPU work it launched (a kernel, copy or memset) on a stream lane,
// as Nsight Systems and Perfetto draw it when one of the two is selected.
//
// findFlow reads one flow from a trace by CUPTI correlation id, within one rank (correlation ids
// are per process, so a merged trace never links ranks): TraceReader::gpuSliceDetails, a few
// primary-key probes and one probe of the partial index slice_correlation_idx. Slices with
// correlation id 0, API calls that launched no captured work (syncs, cudaMalloc), work whose
// launch was not captured, NVTX ranges and folded runs have no flow.
//
// The rest are pure value computations for the timeline view (no widgets, no I/O, any thread):
// layoutFlowArrow places the arrow from the launch's start to the work's start on the pixels of
// a TimelineGeometry and clips it to the plot, telling which end is off-screen (the view then
// draws it to the edge); flowArrowDistance hit-tests it; flowJumpRange is the window that shows
// the other end (and both ends when they fit); flowDelayText is the queueing delay in words.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moewb/base/ids.h"
#include "moewb/base/status.h"
#include "moewb/gui/timeline_geometry.h"

namespace moewb::storage {
class TraceReader;
}

namespace moewb::gui {

// One end of a flow: an API call or a GPU work slice.
struct FlowEnd {
  SliceId slice;
  TrackId track;         // the API thread's track (kind cuda_api) or the stream's (kind stream)
  int64_t startNs = 0;   // slice start, ns
  int64_t endNs = 0;     // slice end, ns
  std::string name;      // "cudaLaunchKernel"; the kernel's demangled name; "memcpy HtoD"
  std::string category;  // api; kernel, memcpy, memset
  int64_t step = -1;     // -1 outside a step
  bool operator==(const FlowEnd&) const = default;
};

// A launch and the work it launched (same correlation id, same rank).
struct TimelineFlow {
  int64_t correlationId = 0;  // CUPTI's, != 0
  int32_t rank = 0;           // of both ends
  FlowEnd launch;             // the API call
  FlowEnd work;               // the kernel, copy or memset

  // Launch start to work start (the queueing delay; negative only in a trace whose clocks
  // disagree), saturated to the int64 range.
  int64_t queueDelayNs() const;
  // Whether `slice` is one of the two ends.
  bool touches(SliceId slice) const { return slice == launch.slice || slice == work.slice; }
  // The end that is not `slice` (the work when `slice` is neither).
  const FlowEnd& partnerOf(SliceId slice) const { return slice == work.slice ? launch : work; }
  bool operator==(const TimelineFlow&) const = default;
};

// The flow through `selected` (an API call or GPU work slice of a lane), read from `reader`.
// For an API call: the first captured kernel, copy or memset with its correlation id on its rank
// (a graph launch's first kernel); for work: the API call that launched it. nullopt when there
// is none (see the file comment) or `selected` is not such a slice. `selected` needs only its
// slice id; its other fields stand in for the launch when the file holds two API calls with the
// same correlation id (an untrusted trace: the arrow leaves the call that was clicked).
// Errors: the reader's. Not thread-safe with other uses of `reader`.
Result<std::optional<TimelineFlow>> findFlow(storage::TraceReader& reader, const FlowEnd& selected);

// Which side of the plot an end lies on.
enum class FlowSide { kInside, kLeft, kRight };

// Where the flow arrow goes, in plot pixels (x from the window start, y as given).
struct FlowArrow {
  bool visible = false;   // false: both ends beyond the same edge (nothing to draw)
  double x0 = 0, y0 = 0;  // the launch end, clipped to [0, widthPx]
  double x1 = 0, y1 = 0;  // the work end (the arrow head), clipped likewise
  FlowSide launchSide = FlowSide::kInside;  // where the launch's start really is
  FlowSide workSide = FlowSide::kInside;    // where the work's start really is
};

// The arrow of `flow` on `g` from (xOf(launch.startNs), launchY) to (xOf(work.startNs), workY),
// clipped to the plot's x range with its direction kept (an end off-screen is moved along the
// line to the edge). O(1).
FlowArrow layoutFlowArrow(const TimelineFlow& flow, const TimelineGeometry& g, double launchY,
                          double workY);

// Distance in px from (x, y) to the drawn segment of `arrow`; infinity when it is not visible.
double flowArrowDistance(const FlowArrow& arrow, double x, double y);

// The window to show after jumping from one end of `flow` to `target` (either end): `g`'s window
// when both ends are already inside it; else, when both ends fit in 80% of its length, `g`'s
// length centred on the two ends; else both ends with 10% margin on each side, unless that zooms
// out more than kFlowMaxJumpZoomOut times: then `g`'s length with `target`'s start (where the
// arrow ends or leaves) at its centre, the arrow running to the edge. The caller clamps it to
// the data.
inline constexpr double kFlowMaxJumpZoomOut = 16;
TimeRange flowJumpRange(const TimelineFlow& flow, const FlowEnd& target, const TimelineGeometry& g);

// "launched 1.84 ms before it started" (or, delay < 0, "started 3.00 us before its launch call
// (the clocks disagree)").
std::string flowDelayText(const TimelineFlow& flow);

}  // namespace moewb::gui
