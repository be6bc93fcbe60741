// TimelineView: window state, lane layout, draw-list rebuilding and hit testing.
#include "timeline_view.h"

#include <QResizeEvent>
#include <algorithm>
#include <array>
#include <set>

#include "moewb/gui/trace_document.h"

namespace moewb::gui {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setStatusTip(
      tr("Timeline: wheel or +/- zooms at the cursor, drag or arrows pan, Home fits all, "
         "double-click zooms to a slice, click a step to show its expert load"));
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  m_geometry = fitGeometry({}, plotWidth());
}

void TimelineView::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  if (m_document) {
    connect(m_document, &TraceDocument::opened, this, [this] {
      m_fit = true;
      m_selectedStep.reset();
      onDataChanged();
    });
    connect(m_document, &TraceDocument::refreshed, this, &TimelineView::onDataChanged);
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
  return m_document ? m_document->timeline().bounds() : TimeRange{};
}

double TimelineView::plotWidth() const {
  return std::max(1.0, double(width() - kGutterPx));
}

void TimelineView::onDataChanged() {
  layoutLanes();
  updateLegend();
  if (m_fit) {
    setGeometryChecked(fitGeometry(dataBounds(), plotWidth()), true);
  } else {
    setGeometryChecked(m_geometry, false);
  }
  updateGeometry();
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
  if (!m_document) {
    m_drawList = {};
    return;
  }
  m_drawList = buildDrawList(m_document->timeline(), m_geometry);
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

void TimelineView::layoutLanes() {
  m_rows.clear();
  if (!m_document) return;
  const auto& lanes = m_document->timeline().lanes();
  int y = kRulerPx + 6;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const bool first = i == 0 || !(lanes[i - 1].track == lanes[i].track);
    if (first && i > 0) y += kTrackGapPx;
    m_rows.push_back({int(i), y, first});
    y += kLaneHeightPx;
  }
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
  if (m_fit) {
    setGeometryChecked(fitGeometry(dataBounds(), plotWidth()), true);
  } else {
    setGeometryChecked(m_geometry, false);
  }
}

QSize TimelineView::sizeHint() const {
  const int lanesBottom = m_rows.empty() ? 4 * kLaneHeightPx : m_rows.back().top + kLaneHeightPx;
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
  hit.item = hitTest(m_drawList, lane, plotX(pos.x()));
  if (hit.item) {
    const TimelineLane& l = m_document->timeline().lanes()[size_t(lane)];
    hit.slice = &l.slices[size_t(hit.item->sliceIndex)];
  }
  return hit;
}

QString TimelineView::laneLabel(const LaneRow& row) const {
  const TimelineData& data = m_document->timeline();
  const TimelineLane& lane = data.lanes()[size_t(row.lane)];
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
      return tr("phases");
    default:
      return tr("depth %1").arg(lane.depth);
  }
}

}  // namespace moewb::gui
