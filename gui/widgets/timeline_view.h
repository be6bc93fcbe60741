// TimelineView: the trace's slices on a time axis, one lane per (track, depth), coloured by phase.
//
// The view paints a prepared DrawList (built by buildDrawList when the window, the size or the
// data change, never inside paintEvent), so painting costs O(visible items) however many slices
// the trace holds; narrow slices appear as folded runs. Input: wheel or +/- zoom about the cursor,
// drag or Shift+wheel or arrow keys pan, Home fits everything, double-click zooms to a slice,
// a click on a slice emits stepActivated. Tooltips show name, duration, step and layer.
// Config changes of the trace are drawn as thin vertical lines over all lanes with a flag in the
// ruler; their tooltip lists the changes ("step 12: optim.lr 0.003 -> 0.001 (gui)").
// While the window shows everything ("fit"), a growing live trace stays fitted.
// Traces with device-memory events (CUDA runs) get one "device memory" row per memory track
// under the host lanes: a stacked area of bytes in use per category over the same time axis,
// rebuilt with the draw list from the reader's per-pixel downsampled series (max per column, so
// peaks stay visible); hovering it shows every category's bytes at that time.
// The memory series and the GPU lanes of a window are read on the document's window-query
// worker (requestWindow), never on the GUI thread: on a zoom or pan the view lays out the last
// ones read for the new window at once and swaps in the new read when it arrives.
// Traces with GPU capture get, under the host lanes (above the memory rows), one lane per CUDA
// API thread (its runtime and driver calls, as Nsight Systems' CUDA API row) and one per CUDA
// stream (kernels, copies, memsets), coloured by kind with elided names, read per window from
// the reader's downsampled lanes (slices under a pixel fold into hatched runs). Clicking a
// kernel, or the API call that launched it, selects it and emits gpuSliceActivated (the main
// window shows its launch details and the expert load of its step and layer) and stepActivated
// for its step.
// Zoomed out, runs of slices narrower than 3 px are painted per pixel column in the colour of the
// name with the most busy time there (dominantSpans), more opaque the busier the column.
// Clicking a host slice also emits sliceActivated (track, start): the main window uses it to find
// a collective's peers, which setHighlightedSlices then outlines on every rank's comm track.
// Traces with swap rows (SwapModel::hasSwap) get, under the GPU lanes (under the host lanes
// when there are none), two lanes per rank, "swap D2H" and "swap H2D" ("(simulated)" for the CPU
// backend's simulated tier): one bar per copy labelled "L3 expert_fc1", late copies red (late
// reloads with their stall span needed -> end marked, offloads compute waited for with their
// wait span needed -> needed + stall); the tooltip gives layer, op, bytes, duration, GB/s and
// the stall or wait. Clicking a copy emits swapCopyActivated (the main window selects what waited).
// Range selection (Perfetto style): Shift+drag selects a time range on all lanes, shaded, with
// its start, end and duration in the ruler; rangeSelected reports it (the main window's
// Selection dock aggregates it), Esc clears it (rangeCleared).
// Search: Ctrl-F opens a bar over the ruler (TimelineSearchBar); the host slices whose name
// contains the text (case-insensitive, TimelineSearch) are highlighted in the lanes with a
// "k of n" count; Enter / F3 go to the next match, Shift+Enter / Shift+F3 to the previous one,
// centring the view on it and selecting it (as a click would); Esc closes the bar.
// Layers: the "phases" lane (depth 2) of a track shows every layer's phases in one row by
// default; clicking its label (the disclosure triangle) expands it into one row per layer ("L0",
// "L1", ...) under a first row of the slices without a layer (loss, embedding, optimizer), and
// clicking again collapses it; setLayersExpanded / toggleAllLayers (View > Expand layers) do it
// for every track. The split copies the lane's slices once per expand or data change
// (splitLaneByLayer), never per frame; the draw list then treats each layer row as a lane.
// Bookmarks (setBookmarkModel): each bookmark in the window is a thin vertical line over all
// lanes in the bookmark colour (theme::bookmark, distinct from the config markers' pink, whose
// flags sit at the ruler's bottom) and a flag with its name at the ruler's top (bookmarkFlags);
// hovering a flag shows the name, clicking it emits bookmarkActivated (the main window zooms
// there, as the Bookmarks dock does). The flags are laid out with the draw list, not per frame.
// Flow arrows (timeline_flow.h): selecting a CUDA API call or the GPU work it launched reads, on
// a flow worker thread, the other end (same correlation id and rank) and draws an arrow from the
// call's start to the work's start (clipped to the edge when an end is off-screen) with the
// other end outlined; hovering the arrow or either end tells the queueing delay; a click on the
// arrow, ] (to the work) or [ (to the launch), or the context menu selects the other end and
// scrolls (or zooms out) to show it.
// Files: timeline_view.cpp (state, layout), timeline_view_input.cpp, timeline_view_paint.cpp,
// timeline_view_swap.cpp (the swap lanes), timeline_view_range.cpp (range selection, search),
// timeline_view_bookmarks.cpp (bookmark lines and flags), timeline_view_flows.cpp (flows).
#pragma once

#include <QWidget>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "moewb/gui/bookmark_flags.h"
#include "moewb/gui/config_markers.h"
#include "moewb/gui/gpu_timeline.h"
#include "moewb/gui/memory_timeline.h"
#include "moewb/gui/swap_lanes.h"
#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_flow.h"
#include "moewb/gui/timeline_flow_query.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/gui/timeline_search.h"
#include "moewb/gui/window_query_worker.h"

class QPainter;

namespace moewb::gui {

class BookmarkModel;
class SwapModel;
class TimelineSearchBar;
class TraceDocument;

// A host slice to outline, named by its track and start (e.g. one peer of a collective).
struct TimelineHighlight {
  TrackId track;
  int64_t startNs = 0;
  int64_t durNs = 0;
  bool operator==(const TimelineHighlight&) const = default;
};

class TimelineView : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineView(QWidget* parent = nullptr);

  // Shows `document`'s timeline and follows its open/refresh/close signals. Not owned.
  void setDocument(TraceDocument* document);
  // The visible time window and plot width.
  const TimelineGeometry& timeGeometry() const { return m_geometry; }
  const DrawList& drawList() const { return m_drawList; }
  // Config-change markers in the visible window (x in plot pixels), rebuilt with the draw list.
  const std::vector<ConfigMarker>& configMarkers() const { return m_markers; }
  // Tooltip lines of marker `index` (describeConfigChange per change), "" for a bad index.
  QString configMarkerText(int index) const;
  // Index of the marker within a few pixels of widget point `pos` (ruler or lanes), or -1.
  int configMarkerAt(const QPoint& pos) const;

  // The device-memory stacks of the visible window, one per memory track (in track order), rebuilt
  // with the draw list; empty for traces without memory events.
  const std::vector<MemoryStack>& memoryStacks() const { return m_memory; }
  // Widget rectangle of memory row `index` (plot part only, right of the gutter); empty if none.
  QRect memoryRect(int index) const;
  // Hover text of the memory row under widget point `pos` (time, bytes per category, total),
  // "" when `pos` is not over a memory row's plot.
  QString memoryTextAt(const QPoint& pos) const;
  // Fill colour of memory category `category` (weights, grads, optimizer and activations match
  // the memory-per-step chart).
  static QColor memoryColor(const std::string& category);

  // The GPU lanes of the visible window (one per document->gpuLaneTracks() entry, same
  // order) and their laid-out items, rebuilt with the draw list; empty without GPU capture.
  const std::vector<storage::GpuLane>& gpuLanes() const { return m_gpuLanes; }
  const std::vector<GpuDrawItem>& gpuItems() const { return m_gpuItems; }
  // Whether the GPU lanes or memory rows of the current window are still being read (on the
  // document's window-query worker; until then the last ones read are shown for this window).
  bool windowDataPending() const;
  // Widget rectangle of GPU lane `lane` (plot part only); empty if none.
  QRect gpuLaneRect(int lane) const;
  // The GPU item under widget point `pos`, or nullptr.
  const storage::GpuLaneItem* gpuItemAtPos(const QPoint& pos) const;
  // The GPU slice selected by the last click, if any.
  std::optional<SliceId> selectedGpuSlice() const { return m_selectedGpuSlice; }

  // Draws `model`'s bookmarks (not owned; may be null) and follows its changes.
  void setBookmarkModel(BookmarkModel* model);
  // The bookmark flags of the visible window (x in plot pixels), rebuilt with the draw list.
  const std::vector<BookmarkFlag>& bookmarkFlags() const { return m_bookmarkFlags; }
  // Widget rectangle of flag `index` (in the ruler's top band); empty for a bad index.
  QRect bookmarkFlagRect(int index) const;
  // The bookmark row (BookmarkModel) of the flag under widget point `pos`, or -1.
  int bookmarkAt(const QPoint& pos) const;
  // The tooltip of bookmark `row`: its name, time (from the trace start) and, for a range, its
  // duration; "" for a bad row.
  QString bookmarkText(int row) const;

  // Shows `model`'s copies in swap lanes and follows its changes (not owned; may be null).
  void setSwapModel(SwapModel* model);
  // Number of swap lanes (2 per rank of SwapModel::laneRanks when the trace has swap rows).
  int swapLaneCount() const;
  // The copies of the visible window and their bars, rebuilt with the draw list.
  const std::vector<storage::SwapEventRow>& swapEvents() const { return m_swapEvents; }
  const std::vector<SwapDrawItem>& swapItems() const { return m_swapItems; }
  // Widget rectangle of swap lane `lane` (plot part only); empty if none.
  QRect swapLaneRect(int lane) const;
  // The copy under widget point `pos` (not a folded bar), or nullptr.
  const storage::SwapEventRow* swapEventAtPos(const QPoint& pos) const;
  // Marks GPU slice `slice` as selected (as a click on it does) without emitting anything but
  // flowChanged once its flow is read.
  void setSelectedGpuSlice(std::optional<SliceId> slice);

  // Outlines `slices` in the accent colour (at least 3 px wide, also inside folded runs) until
  // the next call or a newly opened file; an empty vector clears.
  void setHighlightedSlices(std::vector<TimelineHighlight> slices);
  const std::vector<TimelineHighlight>& highlightedSlices() const { return m_highlights; }

  // Shows all data and keeps showing all of it as a live trace grows.
  void fitAll();
  // Zooms by `factor` (> 1 in) about plot x `anchorX`; pans by `shiftPx` (positive = later).
  void zoomBy(double factor, double anchorX);
  void panBy(double shiftPx);
  // Shows `range` (clamped to the data).
  void showTimeRange(TimeRange range);

  // The range selection, if any (Shift+drag makes one, Esc clears it).
  std::optional<TimeRange> selectedRange() const { return m_range; }
  // Selects `range` (clamped to the data; emits rangeSelected) or, with nullopt or an empty
  // range, clears the selection (emits rangeCleared when there was one).
  void setSelectedRange(std::optional<TimeRange> range);

  // Shows the search bar and focuses its field (Ctrl-F).
  void openSearch();
  // Hides the bar and forgets the search (highlights go).
  void closeSearch();
  // Searches for `text` as if typed into the bar (the bar shows it).
  void setSearchText(const QString& text);
  // Goes to the next (forward) or previous match: centres the view on it (zooming out to fit a
  // longer slice) and selects it as a click would (stepActivated, sliceActivated).
  void searchStep(bool forward);
  const TimelineSearch& search() const { return m_search; }
  TimelineSearchBar* searchBar() const { return m_searchBar; }

  // One painted lane row: a data lane, or one layer row of an expanded phases lane.
  struct LaneRow {
    int lane = 0;      // index into the draw list's lanes (DrawItem::lane), = row index
    int dataLane = 0;  // index into TimelineData::lanes()
    int layer = -2;    // -2: the whole data lane; -1: the slices without a layer; >= 0: a layer
    int top = 0;       // y of the lane's top, px
    bool firstOfTrack = false;
    bool expandable = false;  // carries the disclosure triangle (first row of a phases lane)
  };
  // The rows in display order (draw-list lane i is row i).
  const std::vector<LaneRow>& laneRows() const { return m_rows; }
  // Expands (true) or collapses every track's phases lane into per-layer rows.
  void setLayersExpanded(bool expanded);
  // Expands every phases lane unless all are already expanded, then collapses them all.
  void toggleAllLayers();
  // Expands or collapses the phases lane of `track` alone.
  void toggleLayers(TrackId track);
  // Whether the phases lane of `track` is shown as one row per layer.
  bool layersExpanded(TrackId track) const;
  // The host slice selected by the last click on an unfolded slice (a copy), if any.
  const std::optional<TimelineSlice>& selectedSlice() const { return m_selectedSlice; }

  // Flows (timeline_view_flows.cpp). The flow of the selected GPU slice once read; nullopt
  // without a selection, while it is read, or when the slice has no partner.
  const std::optional<TimelineFlow>& flow() const { return m_flow; }
  // Whether the flow of the current selection is still being read on the flow worker.
  bool flowPending() const;
  // The flow's arrow laid out on the current window, in widget coordinates.
  FlowArrow flowArrow() const;
  // Selects the flow's work (toWork) or launch end as a click on it would (gpuSliceActivated,
  // stepActivated) and shows it (flowJumpRange, clamped to the data). False without a flow.
  bool goToFlowEnd(bool toWork);

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  // The user clicked a slice that belongs to `step`.
  void stepActivated(qint64 step);
  // The user clicked a host slice (not a folded run): its track and start.
  void sliceActivated(qint64 trackId, qint64 startNs);
  // The user clicked a GPU kernel, copy or memset (not a folded run): its slice id.
  void gpuSliceActivated(qint64 sliceId);
  // The user clicked a swap copy (not a folded bar).
  void swapCopyActivated(const moewb::storage::SwapEventRow& event);
  // The visible window changed (zoom, pan, fit, resize).
  void windowChanged();
  // The user selected a time range (Shift+drag) or setSelectedRange set one.
  void rangeSelected(qint64 startNs, qint64 endNs);
  // The range selection was cleared (Esc, setSelectedRange(nullopt), a newly opened file).
  void rangeCleared();
  // The user clicked the flag of bookmark `row` (a row of the BookmarkModel).
  void bookmarkActivated(int row);
  // The flow of the selection was read (flow() may be nullopt: no partner) or cleared.
  void flowChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct Hit {
    const DrawItem* item = nullptr;
    const TimelineSlice* slice = nullptr;
    int lane = -1;  // lane under the point
    double x = 0;   // plot x of the point
  };

  void onDataChanged();
  void setGeometryChecked(const TimelineGeometry& g, bool fit);
  void rebuildDrawList();
  void rebuildMarkers();
  void rebuildBookmarkFlags();
  void paintBookmarkLines(QPainter& p) const;
  void paintBookmarkFlags(QPainter& p) const;
  void rebuildMemory();
  void rebuildGpu();
  void rebuildSwap();
  // Asks the document for the GPU lanes and memory series of the current window.
  void requestWindowData();
  // Takes the worker's answer: the newest read replaces what is shown, laid out for the
  // current window.
  void onWindowAnswered(const WindowAnswer& answer);
  // Index of the swap lane at widget y, or -1.
  int swapLaneAtY(int y) const;
  QString swapTooltipText(const storage::SwapEventRow& event) const;
  void layoutLanes();
  // Appends the rows of data lane `index` (one, or one per layer when expanded) from y.
  int addLaneRows(int index, int y);
  // The row showing slices of `layer` from data lane `dataLane`, or -1.
  int rowOf(int dataLane, int32_t layer) const;
  // Lays the lanes out again and rebuilds the draw list (after an expand or collapse).
  void relayout();
  void updateLegend();
  double plotWidth() const;
  double plotX(double widgetX) const { return widgetX - kGutterPx; }
  int laneAtY(int y) const;
  Hit hitAt(const QPoint& pos) const;
  QString tooltipText(const Hit& hit) const;
  QString gpuTooltipText(const storage::GpuLaneItem& item) const;
  // Index of the GPU lane at widget y, or -1.
  int gpuLaneAtY(int y) const;
  QString laneLabel(const LaneRow& row) const;
  TimeRange dataBounds() const;

  void paintRuler(QPainter& p) const;
  void paintLanes(QPainter& p) const;
  void paintItems(QPainter& p) const;
  void paintHighlights(QPainter& p) const;
  void paintMarkers(QPainter& p) const;
  void paintMarkerFlags(QPainter& p) const;
  void paintGutter(QPainter& p) const;
  void paintMemory(QPainter& p) const;
  void paintMemoryGutter(QPainter& p) const;
  void paintGpu(QPainter& p) const;
  void paintGpuGutter(QPainter& p) const;
  void paintSwap(QPainter& p) const;
  void paintSwapGutter(QPainter& p) const;
  // Index into m_memory of the stack drawn in memory row `row`, or -1.
  int memoryStackOfRow(int row) const;
  void paintLegend(QPainter& p) const;
  // Range selection and search (timeline_view_range.cpp).
  void paintRange(QPainter& p) const;
  void paintRangeLabels(QPainter& p) const;
  void paintSearchMatches(QPainter& p) const;
  void createSearchBar();
  void placeSearchBar();
  // Runs the search again after the data changed, keeping the current match where it still is.
  void refreshSearch();
  void updateSearchCount();
  // Whether a Shift+drag range selection handled the mouse event.
  bool rangePress(QMouseEvent* event);
  bool rangeMove(QMouseEvent* event);
  bool rangeRelease(QMouseEvent* event);
  // The time at widget x, clamped to the data bounds.
  int64_t timeAtWidgetX(int x) const;
  void paintEmpty(QPainter& p) const;
  // Flows (timeline_view_flows.cpp): ask the flow worker for the flow of `selected` (or of the
  // lane item `item`; kept when it is an end of the current one); forget it (and the worker with
  // `dropWorker`, on a new file).
  void requestFlow(const FlowEnd& selected);
  void requestFlow(const storage::GpuLaneItem& item);
  void clearFlow(bool dropWorker = false);
  void onFlowAnswered(const FlowAnswer& answer);
  // Index of the GPU lane showing `track`, or -1.
  int gpuLaneOfTrack(TrackId track) const;
  void paintFlow(QPainter& p) const;
  // Hover text of the arrow near widget point `pos` ("" when none); the flow line of `slice`'s
  // tooltip when it is an end of the flow ("" otherwise).
  QString flowTextAt(const QPoint& pos) const;
  QString flowLineFor(SliceId slice) const;
  // A click on the arrow: goes to the end that is not selected. Whether it hit the arrow.
  bool flowClick(const QPoint& pos);

  static constexpr int kGutterPx = 150;
  static constexpr int kRulerPx = 28;
  static constexpr int kLaneHeightPx = 24;
  static constexpr int kTrackGapPx = 10;
  static constexpr int kLegendPx = 26;
  static constexpr int kMemoryRowPx = 84;

  TraceDocument* m_document = nullptr;
  TimelineGeometry m_geometry;
  DrawList m_drawList;
  std::vector<LaneRow> m_rows;
  std::vector<const TimelineLane*> m_displayLanes;  // per row: its data lane or layer sub-lane
  std::vector<LayerSplit> m_splits;                 // the expanded lanes' sub-lanes
  std::vector<int> m_firstRowOfLane;                // per data lane: its first row
  bool m_layersAll = false;           // the default state of every phases lane
  std::set<int64_t> m_layersToggled;  // tracks whose phases lane differs from m_layersAll
  std::optional<TimelineSlice> m_selectedSlice;
  std::vector<ConfigMarker> m_markers;
  BookmarkModel* m_bookmarks = nullptr;
  std::vector<BookmarkFlag> m_bookmarkFlags;
  std::vector<MemoryStack> m_memory;
  std::vector<storage::MemorySeries> m_memorySeries;  // the last series read (m_memory's source)
  int m_memoryTop = 0;  // y of the first memory row, px
  std::vector<storage::GpuLane> m_gpuLanes;
  std::vector<GpuDrawItem> m_gpuItems;
  int m_gpuTop = 0;  // y of the first GPU lane, px
  SwapModel* m_swap = nullptr;
  std::vector<storage::SwapEventRow> m_swapEvents;
  std::vector<SwapDrawItem> m_swapItems;
  int m_swapTop = 0;  // y of the first swap lane, px
  std::optional<SliceId> m_selectedGpuSlice;
  std::vector<TimelineHighlight> m_highlights;
  int m_hoverMarker = -1;
  std::vector<std::string> m_legend;  // phase families present, in display order
  bool m_fit = true;
  bool m_dragging = false;
  bool m_dragMoved = false;
  QPoint m_dragLast;
  std::optional<int64_t> m_selectedStep;
  std::optional<TimeRange> m_range;  // the range selection
  bool m_rangeDragging = false;      // a Shift+drag is under way
  int m_rangeAnchorX = 0;            // widget x where it started
  TimelineSearch m_search;
  TimelineSearchBar* m_searchBar = nullptr;
  std::optional<TimelineFlow> m_flow;             // the selection's flow (read by the worker)
  std::unique_ptr<FlowQueryWorker> m_flowWorker;  // made on the first selection of a file
  uint64_t m_flowTicket = 0;                      // of the newest flow request
  uint64_t m_flowAnswered = 0;                    // of the newest answer taken
};

}  // namespace moewb::gui
