// TimelineView: window state, lane layout, draw-list rebuilding and hit testing.
#include "timeline_view.h"

#include <QResizeEvent>
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "moewb/base/units.h"
#include "moewb/gui/trace_document.h"

namespace moewb::gui {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setStatusTip(
      tr("Timeline: wheel or +/- zooms at the cursor, drag or arrows pan, Home fits all, "
         "double-click zooms to a slice, click a step to show its expert load, Shift+drag "
         "selects a range (Esc clears), Ctrl+F finds slices by name, ] and [ follow a CUDA "
         "launch to its kernel and back"));
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_geometry = fitGeometry({}, plotWidth());
  createSearchBar();
}

void TimelineView::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  if (m_document) {
    auto reset = [this] {
      m_fit = true;
      m_selectedStep.reset();
      m_selectedSlice.reset();
      m_selectedGpuSlice.reset();
      clearFlow(true);
      m_highlights.clear();
      m_swapEvents.clear();
      m_swapItems.clear();
      m_gpuLanes.clear();
      m_memorySeries.clear();
      if (m_range) setSelectedRange(std::nullopt);
      onDataChanged();
    };
    // A streamed load starts fitted to the whole file and keeps the user's zoom from then on.
    connect(m_document, &TraceDocument::opening, this, reset);
    connect(m_document, &TraceDocument::opened, this, [this, reset] {
      if (m_fit) {
        reset();
      } else {
        onDataChanged();
      }
    });
    connect(m_document, &TraceDocument::refreshed, this, &TimelineView::onDataChanged);
    connect(m_document, &TraceDocument::windowAnswered, this, &TimelineView::onWindowAnswered);
    connect(m_document, &TraceDocument::closed, this, &TimelineView::onDataChanged);
    ConfigChangeModel* changes = m_document->configChangeModel();
    auto markersChanged = [this] {
      rebuildMarkers();
      update();
    };
    connect(changes, &QAbstractItemModel::rowsInserted, this, markersChanged);
    connect(changes, &QAbstractItemModel::modelReset, this, markersChanged);
  }
  m_fit = true;
  onDataChanged();
}

TimeRange TimelineView::dataBounds() const {
  return m_document ? m_document->timeBounds() : TimeRange{};
}

double TimelineView::plotWidth() const {
  return std::max(1.0, double(width() - kGutterPx));
}

void TimelineView::onDataChanged() {
  if (m_range && !(m_document && m_document->isOpen())) setSelectedRange(std::nullopt);
  refreshSearch();
  layoutLanes();
  updateLegend();
  if (m_fit) {
    setGeometryChecked(fitGeometry(dataBounds(), plotWidth()), true);
  } else {
    setGeometryChecked(m_geometry, false);
  }
  updateGeometry();
}

void TimelineView::setHighlightedSlices(std::vector<TimelineHighlight> slices) {
  m_highlights = std::move(slices);
  update();
}

void TimelineView::fitAll() {
  setGeometryChecked(fitGeometry(dataBounds(), plotWidth()), true);
}

void TimelineView::zoomBy(double factor, double anchorX) {
  setGeometryChecked(zoomGeometry(m_geometry, anchorX, factor, dataBounds()), false);
}

void TimelineView::panBy(double shiftPx) {
  setGeometryChecked(panGeometry(m_geometry, shiftPx, dataBounds()), false);
}

void TimelineView::showTimeRange(TimeRange range) {
  setGeometryChecked(showRange(m_geometry, range, dataBounds()), false);
}

void TimelineView::setGeometryChecked(const TimelineGeometry& g, bool fit) {
  TimelineGeometry next = g;
  next.widthPx = plotWidth();
  next = clampGeometry(next, dataBounds());
  const TimeRange bounds = dataBounds();
  m_fit = fit || (next.startNs <= bounds.startNs && next.endNs >= bounds.endNs);
  const bool changed = !(next == m_geometry);
  m_geometry = next;
  rebuildDrawList();
  update();
  if (changed) emit windowChanged();
}

void TimelineView::rebuildDrawList() {
  rebuildMarkers();
  rebuildBookmarkFlags();
  if (!m_document) {
    m_drawList = {};
    return;
  }
  m_drawList = buildDrawList(m_displayLanes, m_document->timeline().revision(), m_geometry, 3.0,
                             &m_document->timeline());
  rebuildMemory();
  rebuildGpu();
  rebuildSwap();
}

void TimelineView::rebuildGpu() {
  if (!m_document || m_document->gpuLaneTracks().empty()) {
    m_gpuLanes.clear();
    m_gpuItems.clear();
  } else {
    m_gpuItems = layoutGpuItems(m_gpuLanes, m_geometry);
  }
  requestWindowData();
}

void TimelineView::requestWindowData() {
  if (!m_document) return;
  // One bucket per pixel column.
  m_document->requestWindow({m_geometry.startNs, m_geometry.endNs},
                            int(std::ceil(m_geometry.widthPx)));
}

void TimelineView::onWindowAnswered(const WindowAnswer& answer) {
  // A failed read leaves the lanes and rows empty (the status bar reports file errors through
  // the document's refresh).
  m_gpuLanes = answer.status.isOk() ? answer.gpuLanes : std::vector<storage::GpuLane>{};
  m_memorySeries = answer.status.isOk() ? answer.memory : std::vector<storage::MemorySeries>{};
  if (!m_document || m_document->gpuLaneTracks().empty()) m_gpuLanes.clear();
  if (!m_document || m_document->memoryTracks().empty()) m_memorySeries.clear();
  m_gpuItems = layoutGpuItems(m_gpuLanes, m_geometry);
  m_memory = stackMemorySeries(m_memorySeries, m_geometry);
  update();
}

bool TimelineView::windowDataPending() const {
  return m_document && m_document->windowQueryPending();
}

QRect TimelineView::gpuLaneRect(int lane) const {
  if (!m_document || lane < 0 || size_t(lane) >= m_document->gpuLaneTracks().size()) return {};
  return QRect(kGutterPx, m_gpuTop + lane * kLaneHeightPx, width() - kGutterPx, kLaneHeightPx);
}

int TimelineView::gpuLaneAtY(int y) const {
  if (!m_document || y < m_gpuTop) return -1;
  const int lane = (y - m_gpuTop) / kLaneHeightPx;
  return size_t(lane) < m_document->gpuLaneTracks().size() ? lane : -1;
}

const storage::GpuLaneItem* TimelineView::gpuItemAtPos(const QPoint& pos) const {
  if (pos.x() < kGutterPx) return nullptr;
  const int lane = gpuLaneAtY(pos.y());
  if (lane < 0) return nullptr;
  const GpuDrawItem* d = gpuItemAt(m_gpuItems, lane, plotX(pos.x()));
  if (!d || size_t(d->lane) >= m_gpuLanes.size()) return nullptr;
  return &m_gpuLanes[size_t(d->lane)].items[size_t(d->item)];
}

void TimelineView::rebuildMemory() {
  if (!m_document || m_document->memoryTracks().empty()) {
    m_memory.clear();
    m_memorySeries.clear();
    return;
  }
  // The last series read, laid out for this window until the worker's read of it arrives.
  m_memory = stackMemorySeries(m_memorySeries, m_geometry);
}

int TimelineView::memoryStackOfRow(int row) const {
  if (!m_document) return -1;
  const auto& tracks = m_document->memoryTracks();
  if (row < 0 || size_t(row) >= tracks.size()) return -1;
  for (size_t i = 0; i < m_memory.size(); ++i) {
    if (m_memory[i].track == tracks[size_t(row)].id) return int(i);
  }
  return -1;
}

QRect TimelineView::memoryRect(int index) const {
  if (!m_document || index < 0 || size_t(index) >= m_document->memoryTracks().size()) return {};
  return QRect(kGutterPx, m_memoryTop + index * (kMemoryRowPx + kTrackGapPx),
               width() - kGutterPx, kMemoryRowPx);
}

QString TimelineView::memoryTextAt(const QPoint& pos) const {
  if (!m_document) return {};
  for (int row = 0; size_t(row) < m_document->memoryTracks().size(); ++row) {
    if (!memoryRect(row).contains(pos)) continue;
    const int index = memoryStackOfRow(row);
    if (index < 0) return {};
    const MemoryStack& stack = m_memory[size_t(index)];
    const int column = memoryColumnAt(stack, plotX(pos.x()));
    if (column < 0) return {};
    const int64_t atNs = int64_t(std::llround(m_geometry.timeAt(column)));
    QString text = tr("<b>device memory</b>");
    const int32_t rank = m_document->memoryTracks()[size_t(row)].rank;
    if (rank > 0) text += tr(" (rank %1)").arg(rank);
    text += tr("<br>at +%1").arg(
        QString::fromStdString(formatDurationNs(atNs - dataBounds().startNs)));
    for (const std::string& line : memoryReadout(stack, column)) {
      text += QStringLiteral("<br>") + QString::fromStdString(line).toHtmlEscaped();
    }
    return text;
  }
  return {};
}

void TimelineView::rebuildMarkers() {
  m_markers.clear();
  m_hoverMarker = -1;
  if (!m_document) return;
  m_markers = timelineMarkers(m_document->configChangeModel()->rows(), m_geometry);
}

QString TimelineView::configMarkerText(int index) const {
  if (!m_document || index < 0 || size_t(index) >= m_markers.size()) return {};
  return markerText(m_markers[size_t(index)], m_document->configChangeModel()->rows());
}

int TimelineView::configMarkerAt(const QPoint& pos) const {
  if (pos.x() < kGutterPx || pos.y() >= height() - kLegendPx) return -1;
  return markerNear(m_markers, plotX(pos.x()), 4.0);
}

namespace {
constexpr int32_t kPhasesDepth = 2;  // the depth of the per-layer phases (docs/TRACE-FORMAT.md)
}  // namespace

bool TimelineView::layersExpanded(TrackId track) const {
  return m_layersAll != m_layersToggled.contains(track.value);
}

void TimelineView::toggleLayers(TrackId track) {
  if (!m_layersToggled.erase(track.value)) m_layersToggled.insert(track.value);
  relayout();
}

void TimelineView::setLayersExpanded(bool expanded) {
  m_layersAll = expanded;
  m_layersToggled.clear();
  relayout();
}

void TimelineView::toggleAllLayers() {
  bool all = true;
  for (const LaneRow& row : m_rows) {
    if (row.expandable && row.layer == -2) all = false;
  }
  setLayersExpanded(!all);
}

void TimelineView::relayout() {
  layoutLanes();
  rebuildDrawList();
  updateGeometry();
  update();
}

int TimelineView::addLaneRows(int index, int y) {
  const TimelineLane& lane = m_document->timeline().lanes()[size_t(index)];
  const bool first = m_rows.empty() || !(m_displayLanes.back()->track == lane.track);
  if (first && !m_rows.empty()) y += kTrackGapPx;
  m_firstRowOfLane[size_t(index)] = int(m_rows.size());
  const bool expandable = lane.depth == kPhasesDepth;
  if (!expandable || !layersExpanded(lane.track)) {
    m_rows.push_back({int(m_rows.size()), index, -2, y, first, expandable});
    m_displayLanes.push_back(&lane);
    return y + kLaneHeightPx;
  }
  const LayerSplit& split = m_splits.emplace_back(splitLaneByLayer(lane));
  for (size_t k = 0; k < split.lanes.size(); ++k) {
    m_rows.push_back({int(m_rows.size()), index, split.layers[k], y, first && k == 0, k == 0});
    m_displayLanes.push_back(&split.lanes[k]);
    y += kLaneHeightPx;
  }
  return y;
}

int TimelineView::rowOf(int dataLane, int32_t layer) const {
  if (dataLane < 0 || size_t(dataLane) >= m_firstRowOfLane.size()) return -1;
  const int first = m_firstRowOfLane[size_t(dataLane)];
  if (m_rows[size_t(first)].layer == -2) return first;
  // The rows of one data lane are contiguous (layers ascending) and end where the next begins.
  const int last = size_t(dataLane) + 1 < m_firstRowOfLane.size()
                       ? m_firstRowOfLane[size_t(dataLane) + 1]
                       : int(m_rows.size());
  auto begin = m_rows.begin() + first, end = m_rows.begin() + last;
  auto it = std::lower_bound(begin, end, std::max(layer, -1),
                             [](const LaneRow& r, int32_t l) { return r.layer < l; });
  return it != end && it->layer == std::max(layer, -1) ? int(it - m_rows.begin()) : first;
}

void TimelineView::layoutLanes() {
  m_rows.clear();
  m_displayLanes.clear();
  m_splits.clear();
  m_firstRowOfLane.clear();
  if (!m_document) return;
  const auto& lanes = m_document->timeline().lanes();
  m_firstRowOfLane.assign(lanes.size(), 0);
  // The sub-lanes are referenced by pointer: no reallocation while the rows are built.
  size_t expanded = 0;
  for (const TimelineLane& lane : lanes) {
    if (lane.depth == kPhasesDepth && layersExpanded(lane.track)) ++expanded;
  }
  m_splits.reserve(expanded);
  int y = kRulerPx + 6;
  for (size_t i = 0; i < lanes.size(); ++i) y = addLaneRows(int(i), y);
  const size_t gpuLaneCount = m_document->gpuLaneTracks().size();
  m_gpuTop = y + (gpuLaneCount ? kTrackGapPx : 0);
  y = m_gpuTop + int(gpuLaneCount) * kLaneHeightPx;
  const int swapLanes = swapLaneCount();
  m_swapTop = y + (swapLanes ? kTrackGapPx : 0);
  y = m_swapTop + swapLanes * kLaneHeightPx;
  m_memoryTop = y + kTrackGapPx;
}

void TimelineView::updateLegend() {
  static constexpr std::array<const char*, 13> kOrder = {
      "step",   "forward", "backward", "optimizer", "embedding", "attention", "kda",
      "sparse_attention", "router", "permute", "experts", "combine", "loss"};
  std::set<std::string> families;
  if (m_document) {
    for (const std::string& name : m_document->timeline().names()) {
      families.insert(name.substr(0, name.find('.')));
    }
  }
  m_legend.clear();
  for (const char* f : kOrder) {
    if (families.erase(f)) m_legend.push_back(f);
  }
  m_legend.insert(m_legend.end(), families.begin(), families.end());
}

void TimelineView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  placeSearchBar();
  if (m_fit) {
    setGeometryChecked(fitGeometry(dataBounds(), plotWidth()), true);
  } else {
    setGeometryChecked(m_geometry, false);
  }
}

QSize TimelineView::sizeHint() const {
  int lanesBottom = m_rows.empty() ? 4 * kLaneHeightPx : m_rows.back().top + kLaneHeightPx;
  if (m_document && !m_rows.empty()) {
    const int gpuLanes = int(m_document->gpuLaneTracks().size());
    if (gpuLanes > 0) lanesBottom += kTrackGapPx + gpuLanes * kLaneHeightPx;
    if (swapLaneCount() > 0) lanesBottom += kTrackGapPx + swapLaneCount() * kLaneHeightPx;
    lanesBottom += int(m_document->memoryTracks().size()) * (kMemoryRowPx + kTrackGapPx);
  }
  return {900, std::max(220, lanesBottom + kLegendPx + 8)};
}

QSize TimelineView::minimumSizeHint() const {
  return {kGutterPx + 200, 160};
}

int TimelineView::laneAtY(int y) const {
  for (const LaneRow& row : m_rows) {
    if (y >= row.top && y < row.top + kLaneHeightPx) return row.lane;
  }
  return -1;
}

TimelineView::Hit TimelineView::hitAt(const QPoint& pos) const {
  Hit hit;
  if (!m_document || pos.x() < kGutterPx) return hit;
  const int lane = laneAtY(pos.y());
  if (lane < 0) return hit;
  hit.lane = lane;
  hit.x = plotX(pos.x());
  hit.item = hitTest(m_drawList, lane, plotX(pos.x()));
  if (hit.item) {
    const TimelineLane& l = *m_displayLanes[size_t(lane)];
    hit.slice = &l.slices[size_t(hit.item->sliceIndex)];
  }
  return hit;
}

QString TimelineView::laneLabel(const LaneRow& row) const {
  const TimelineData& data = m_document->timeline();
  const TimelineLane& lane = *m_displayLanes[size_t(row.lane)];
  if (row.layer >= 0) return tr("L%1").arg(row.layer);
  if (row.firstOfTrack) {
    const TimelineTrack* track = data.track(lane.track);
    QString name =
        track ? QString::fromStdString(track->name) : tr("track %1").arg(lane.track.value);
    if (track && track->rank > 0) name = tr("rank %1 · %2").arg(track->rank).arg(name);
    return name;
  }
  switch (lane.depth) {
    case 1:
      return tr("passes");
    case 2:
      return row.layer == -1 ? tr("phases: other") : tr("phases");
    default:
      return tr("depth %1").arg(lane.depth);
  }
}

}  // namespace moewb::gui
