// TimelineData: the slices of a trace arranged for drawing, and the draw-list builder.
//
// Slices are grouped into lanes, one per (track, depth); each lane holds packed slices sorted by
// start time plus a running maximum of their end times, so the slices visible in a window are
// found by two binary searches (O(log n)) and never by a scan. Names are interned once.
// addSlices appends rows as a live trace grows: rows already present (same lane, start, duration
// and name) are skipped, so a refresh may safely re-read an overlapping window; rows arriving out
// of order are inserted in place.
//
// buildDrawList turns the data and a TimelineGeometry into the items a view paints: one item per
// visible slice at least minWidthPx wide, and runs of narrower neighbouring slices folded into one
// merged item (Tracy's approach), so the number of items is bounded by the pixels, not the slices.
// Folded runs are not drawn as anonymous grey: per pixel column of a run, dominantSpans picks the
// slice name with the most busy time there (Perfetto / Nsight Systems colour zoomed-out bands
// so), and adjacent columns with the same name merge into one span painted in that name's colour;
// where the data holds a per-level summary (timeline_summary.h) whose level fits the zoom, the
// columns are read from its buckets instead of the slices (O(columns) per run).
// It runs outside the paint path (when the window or data change). Cost: O(lanes * (log n +
// items)) plus, for folded runs, O(columns * (log n + kMaxSlicesPerColumn)): a column holding
// more slices than that is judged on an evenly spaced sample of them. Thread-safety: a
// TimelineData is a plain value; build draw lists from a const reference while nobody mutates it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/rows.h"

namespace moewb::gui {

struct TimelineSummary;

// One slice as the timeline keeps it (40 bytes; names interned).
struct TimelineSlice {
  int64_t startNs = 0;  // ns
  int64_t durNs = 0;    // ns
  int64_t step = -1;    // optimizer step, -1 = none
  int32_t nameId = 0;   // index into TimelineData::name()
  int32_t layer = -1;   // decoder layer, -1 = whole model

  int64_t endNs() const { return startNs + durNs; }
};

// One host slice as a trace load hands it over (no heap memory): its name and category are
// indexes into the load's list of names (TraceChunk::newNames), mapped to interned name ids by
// the receiver.
struct LoadedSlice {
  int64_t startNs = 0;        // ns
  int64_t durNs = 0;          // ns
  int64_t step = -1;          // optimizer step, -1 = none
  TrackId track;              // the slice's track
  int32_t nameIndex = 0;      // index into the load's names
  int32_t categoryIndex = 0;  // index into the load's names
  int32_t layer = -1;         // decoder layer, -1 = whole model
  int32_t depth = 0;          // nesting depth on its track
};

struct TimelineLane {
  TrackId track;                      // the track this lane belongs to
  int32_t depth = 0;                  // nesting depth of its slices
  std::vector<TimelineSlice> slices;  // sorted by startNs
  std::vector<int64_t> maxEndNs;      // maxEndNs[i] = max end of slices[0..i], non-decreasing
};

struct TimelineTrack {
  TrackId id;
  std::string name;  // "trainer thread"
  std::string kind;  // "thread", "stream", ...
  int32_t rank = 0;
};

// One thing to paint: a slice, or several narrow slices folded together.
struct DrawItem {
  int32_t lane = 0;        // index into TimelineData::lanes()
  double x0 = 0;           // left edge, px from the window start
  double x1 = 0;           // right edge, px (x1 - x0 >= 1)
  int32_t sliceIndex = 0;  // first slice of the item in its lane
  int32_t count = 1;       // slices covered; > 1 means folded
  int64_t startNs = 0;     // time span covered by the item
  int64_t endNs = 0;

  bool isFolded() const { return count > 1; }
};

// Pixel columns of a folded run whose dominant slice name is the same.
struct DominantSpan {
  int32_t lane = 0;          // index into TimelineData::lanes()
  double x0 = 0;             // left edge, px from the window start (a column boundary)
  double x1 = 0;             // right edge, px (x1 - x0 >= 1)
  int32_t nameId = 0;        // the name with the most busy time in each of these columns
  double busyFraction = 0;   // mean share of the columns' time covered by the run's slices, 0..1
};

struct DrawList {
  TimelineGeometry geometry;    // the window the items were built for
  uint64_t dataRevision = 0;    // TimelineData::revision() at build time
  std::vector<DrawItem> items;  // grouped by lane (ascending), by x0 within a lane
  std::vector<DominantSpan> dominant;  // of the folded items, in item order
};

// A column holding more slices than this is judged on an evenly spaced sample of them.
inline constexpr size_t kMaxSlicesPerColumn = 64;

class TimelineData {
 public:
  // Removes everything (tracks, lanes, names); bumps the revision.
  void clear();
  // Replaces the track descriptions (names shown beside the lanes). Lanes of unknown tracks are
  // still kept and drawn under the track id.
  void setTracks(const std::vector<storage::TrackRow>& tracks);
  // Adds rows, skipping duplicates of rows already held. When `accepted` is given it receives,
  // for each input row, whether it was added. Returns the number added; bumps the revision when
  // it is not 0. O(k log n) for k rows in start order, more for out-of-order rows.
  int64_t addSlices(const std::vector<storage::SliceRow>& rows,
                    std::vector<bool>* accepted = nullptr);
  // The same for rows of a load: rows[i]'s name is nameIds[rows[i].nameIndex] (an id from
  // internName; an index outside nameIds gives the name ""). No per-row allocation or hashing.
  int64_t addLoadedSlices(const std::vector<LoadedSlice>& rows,
                          const std::vector<int32_t>& nameIds,
                          std::vector<bool>* accepted = nullptr);
  // The id of `name`, interning it when new (it then shows in names(); no revision bump).
  int32_t internName(const std::string& name);
  // Takes (a part of) the per-level summary of the lanes (timeline_summary.h): a whole one read
  // from the trace's sidecar, or the parts a load hands over as it builds one (appended in
  // order, appendSummary). Its names are interned and its buckets' name ids mapped to this
  // data's; for a whole summary taken first, the lanes it knows get their slice capacity
  // reserved (no regrowth while a load streams in). Null is ignored; a part of another grid
  // drops the summary. Bumps the revision. O(buckets of `part`).
  void addSummary(std::unique_ptr<TimelineSummary> part);
  // Drops the summary (the timeline then paints folded runs from the slices); bumps the revision.
  void dropSummary();
  // The summary, or nullptr: none given, or dropped because addSlices added rows it lacks (a
  // refresh of a live trace). Draw lists use it for folded runs of data lanes.
  const TimelineSummary* summary() const { return m_summary.get(); }

  const std::vector<TimelineLane>& lanes() const { return m_lanes; }
  const std::vector<TimelineTrack>& tracks() const { return m_tracks; }
  // The track description of `id`, or nullptr.
  const TimelineTrack* track(TrackId id) const;
  // Interned name of a slice; "" for an unknown id.
  const std::string& name(int32_t nameId) const;
  // Every interned name, indexed by name id.
  const std::vector<std::string>& names() const { return m_names; }
  // [earliest start, latest end] of all slices; empty when there are none.
  TimeRange bounds() const { return m_bounds; }
  int64_t sliceCount() const { return m_sliceCount; }
  // Changes whenever the content changes (draw lists compare it to know they are stale).
  uint64_t revision() const { return m_revision; }

  // Index range [first, last) of the slices of `lane` that overlap [startNs, endNs).
  static std::pair<size_t, size_t> visibleRange(const TimelineLane& lane, int64_t startNs,
                                                int64_t endNs);

 private:
  TimelineLane& laneFor(TrackId track, int32_t depth);
  bool insertSlice(TimelineLane& lane, const TimelineSlice& slice, size_t* dirtyFrom);
  // Adds one slice to the lane of (track, depth); out-of-order inserts note the lane in `dirty`.
  bool addOne(TrackId track, int32_t depth, const TimelineSlice& slice,
              std::map<std::pair<TrackId, int32_t>, size_t>* dirty);
  // Recomputes the running end maxima of the lanes noted by addOne.
  void repairMaxEnds(const std::map<std::pair<TrackId, int32_t>, size_t>& dirty);

  std::vector<TimelineLane> m_lanes;  // sorted by (track, depth)
  std::shared_ptr<TimelineSummary> m_summary;  // shared: copies of the data share it
  std::vector<TimelineTrack> m_tracks;
  std::vector<std::string> m_names;
  std::unordered_map<std::string, int32_t> m_nameIds;
  TimeRange m_bounds;
  int64_t m_sliceCount = 0;
  uint64_t m_revision = 0;
};

// One lane split by decoder layer (the timeline's "one phase lane per layer"): sub-lane 0 holds
// the slices without a layer (layer -1: loss, embedding, optimizer, ...), then one sub-lane per
// layer present, ascending. Each sub-lane has the source's track and depth, its slices in start
// order and its running end maximum, so it works with visibleRange, buildDrawList and
// dominantSpans like any lane.
struct LayerSplit {
  std::vector<int32_t> layers;      // layer of each sub-lane: -1 (always first), then ascending
  std::vector<TimelineLane> lanes;  // one per entry of `layers`
};
// Splits `lane` by TimelineSlice::layer. O(slices + layers log layers); the caller keeps it
// until the data changes (it copies the slices).
LayerSplit splitLaneByLayer(const TimelineLane& lane);

// Builds the draw list of `data` for window `g`: slices narrower than minWidthPx that follow each
// other with gaps under minWidthPx are folded into one item; a single narrow slice is kept as
// its own item widened to 1 px. Items of each lane are ordered by x.
DrawList buildDrawList(const TimelineData& data, const TimelineGeometry& g,
                       double minWidthPx = 3.0);
// The same for an explicit list of lanes (e.g. data lanes with some replaced by their
// LayerSplit sub-lanes): DrawItem::lane and DominantSpan::lane index `lanes`; `dataRevision` is
// stored in the list. Every pointer must be non-null. When `data` is given and has a summary,
// folded runs of lanes that are data->lanes() themselves (not sub-lanes) take their dominant
// spans from the summary level that fits the zoom (dominantSpansFromSummary: O(columns), exact
// per bucket), else from the slices (dominantSpans).
DrawList buildDrawList(const std::vector<const TimelineLane*>& lanes, uint64_t dataRevision,
                       const TimelineGeometry& g, double minWidthPx = 3.0,
                       const TimelineData* data = nullptr);

// Per pixel column of g covered by lane.slices[first, first + count): the name with the most busy
// time in the column (ties: the smaller name id); adjacent columns with the same name merged.
// Spans are tagged with `laneIndex`, ordered by x; columns without busy time give none. Slices
// of zero duration count as 1 ns. O(columns * (log n + maxPerColumn)).
std::vector<DominantSpan> dominantSpans(const TimelineLane& lane, int32_t laneIndex, size_t first,
                                        size_t count, const TimelineGeometry& g,
                                        size_t maxPerColumn = kMaxSlicesPerColumn);

// The dominant span of `list` under (lane, x), or nullptr. O(log spans).
const DominantSpan* dominantAt(const DrawList& list, int32_t lane, double x);

// The draw item of `list` under (lane, x), or nullptr. O(log items).
const DrawItem* hitTest(const DrawList& list, int32_t lane, double x);

}  // namespace moewb::gui
