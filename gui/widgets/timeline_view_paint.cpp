// TimelineView painting: ruler, lane backgrounds, the prepared draw items, the GPU lanes,
// the device-memory rows, gutter and legend.
// Nothing here searches the data: it walks m_drawList, which is rebuilt elsewhere.
#include <QPainter>
#include <QPainterPath>
#include <QPolygonF>
#include <algorithm>
#include <cmath>
#include <limits>

#include "moewb/base/units.h"
#include "moewb/gui/chart_axis.h"
#include "moewb/gui/palette.h"
#include "moewb/gui/trace_document.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {

namespace {
constexpr double kMinTickPx = 90;  // ruler labels at least this far apart
}  // namespace

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), theme::base());
  if (!m_document || m_rows.empty()) {
    paintEmpty(p);
    return;
  }
  paintLanes(p);
  p.save();
  p.setClipRect(QRect(kGutterPx, kRulerPx, width() - kGutterPx, height() - kRulerPx - kLegendPx));
  paintItems(p);
  paintHighlights(p);
  paintSearchMatches(p);
  paintGpu(p);
  paintFlow(p);
  paintSwap(p);
  paintMemory(p);
  paintBookmarkLines(p);
  paintMarkers(p);
  paintRange(p);
  p.restore();
  paintRuler(p);
  paintBookmarkFlags(p);
  paintMarkerFlags(p);  // over the bookmarks' poles
  paintRangeLabels(p);
  paintGutter(p);
  paintGpuGutter(p);
  paintSwapGutter(p);
  paintMemoryGutter(p);
  paintLegend(p);
}

QColor TimelineView::memoryColor(const std::string& category) {
  const int order = memoryCategoryOrder(category);
  if (order < 4) return theme::series(order);  // as in the memory-per-step chart
  if (order == 4) return QColor::fromRgb(0xb07aa1);
  return phaseColor(category);  // a stable hashed hue
}

// Each memory row: the bands of its stack as step-shaped polygons over the pixel columns, bottom
// category first, scaled so the row's largest total reaches a round number near the top.
void TimelineView::paintMemory(QPainter& p) const {
  for (int row = 0; size_t(row) < m_document->memoryTracks().size(); ++row) {
    const QRect r = memoryRect(row);
    p.fillRect(r, theme::alternate());
    const int index = memoryStackOfRow(row);
    if (index < 0) continue;
    const MemoryStack& stack = m_memory[size_t(index)];
    const AxisTicks scale = niceAxis(0, double(std::max<int64_t>(stack.maxTotalBytes, 1)), 2);
    const double bottom = r.bottom() + 1;
    const double perByte = double(r.height() - 6) / scale.max;
    p.setPen(theme::gridLine());
    for (double tick : scale.values) {
      const int y = int(std::lround(bottom - tick * perByte));
      p.drawLine(r.left(), y, r.right(), y);
    }
    const int columns = stack.columns();
    for (size_t k = 0; k < stack.categories.size(); ++k) {
      QPolygonF band;
      band.reserve(4 * columns);
      for (int c = 0; c < columns; ++c) {
        const double y = bottom - double(stack.tops[k][size_t(c)]) * perByte;
        band << QPointF(r.left() + c, y) << QPointF(r.left() + c + 1, y);
      }
      for (int c = columns - 1; c >= 0; --c) {
        const double y =
            bottom - (k == 0 ? 0.0 : double(stack.tops[k - 1][size_t(c)])) * perByte;
        band << QPointF(r.left() + c + 1, y) << QPointF(r.left() + c, y);
      }
      p.setPen(Qt::NoPen);
      p.setBrush(memoryColor(stack.categories[k]));
      p.drawPolygon(band);
    }
    p.setBrush(Qt::NoBrush);
    p.setPen(theme::dimText());
    p.drawText(QRect(r.left() + 4, r.top() + 1, 200, 14), Qt::AlignLeft | Qt::AlignVCenter,
               QString::fromStdString(formatBytes(int64_t(scale.max))));
  }
}

// GPU lanes (API threads, streams): alternate background, then the laid-out items coloured by
// kind; folded runs hatched; the selected slice outlined; names elided to the item's width.
void TimelineView::paintGpu(QPainter& p) const {
  const size_t laneCount = m_document->gpuLaneTracks().size();
  for (size_t lane = 0; lane < laneCount; ++lane) {
    if (lane % 2 == 0) p.fillRect(gpuLaneRect(int(lane)), theme::alternate());
  }
  const QFontMetrics fm(font());
  const QColor folded = foldedColor();
  for (const GpuDrawItem& d : m_gpuItems) {
    if (size_t(d.lane) >= m_gpuLanes.size() || size_t(d.lane) >= laneCount) continue;
    const storage::GpuLaneItem& item = m_gpuLanes[size_t(d.lane)].items[size_t(d.item)];
    const QRectF r(kGutterPx + d.x0, m_gpuTop + d.lane * kLaneHeightPx + 2, d.x1 - d.x0,
                   kLaneHeightPx - 4);
    const QColor color = gpuCategoryColor(item.category);
    if (item.isFolded()) {
      p.fillRect(r, color.darker(170));
      p.fillRect(r, QBrush(folded, Qt::BDiagPattern));
    } else {
      p.fillRect(r, color);
    }
    const bool selected = !item.isFolded() && m_selectedGpuSlice && item.id == *m_selectedGpuSlice;
    if (r.width() > 4 || selected) {
      p.setPen(selected ? QPen(theme::accent(), 2) : QPen(color.lighter(130), 1));
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
    if (r.width() > 28) {
      const QRectF textRect = r.adjusted(4, 0, -3, 0);
      p.setPen(item.isFolded() ? theme::text() : textColorOn(color));
      p.drawText(textRect, Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(QString::fromStdString(gpuItemLabel(item)), Qt::ElideRight,
                               int(textRect.width())));
    }
  }
}

// Gutter of the GPU lanes: the API thread and stream track names.
void TimelineView::paintGpuGutter(QPainter& p) const {
  const auto& tracks = m_document->gpuLaneTracks();
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  p.setPen(theme::text());
  for (size_t lane = 0; lane < tracks.size(); ++lane) {
    const QRect r(10, m_gpuTop + int(lane) * kLaneHeightPx, kGutterPx - 16, kLaneHeightPx);
    p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft,
               QFontMetrics(bold).elidedText(QString::fromStdString(gpuLaneLabel(tracks[lane])),
                                             Qt::ElideRight, r.width()));
  }
  p.setFont(font());
}

// Gutter of the memory rows: the row name and a swatch per category (top band first).
void TimelineView::paintMemoryGutter(QPainter& p) const {
  QFont bold = font();
  bold.setBold(true);
  QFont small = font();
  small.setPointSizeF(font().pointSizeF() * 0.85);
  for (int row = 0; size_t(row) < m_document->memoryTracks().size(); ++row) {
    const QRect r = memoryRect(row);
    const int32_t rank = m_document->memoryTracks()[size_t(row)].rank;
    p.setFont(bold);
    p.setPen(theme::text());
    p.drawText(QRect(10, r.top(), kGutterPx - 16, 16), Qt::AlignLeft | Qt::AlignVCenter,
               rank > 0 ? tr("rank %1 · device memory").arg(rank) : tr("device memory"));
    const int index = memoryStackOfRow(row);
    if (index < 0) continue;
    const MemoryStack& stack = m_memory[size_t(index)];
    p.setFont(small);
    int y = r.top() + 18;
    for (size_t k = stack.categories.size(); k-- > 0 && y + 12 <= r.bottom() + 1;) {
      p.fillRect(QRect(22, y + 2, 10, 9), memoryColor(stack.categories[k]));
      p.setPen(theme::dimText());
      p.drawText(QRect(36, y, kGutterPx - 42, 13), Qt::AlignLeft | Qt::AlignVCenter,
                 QString::fromStdString(stack.categories[k]));
      y += 13;
    }
  }
  p.setFont(font());
}

void TimelineView::paintMarkers(QPainter& p) const {
  const int bottom = height() - kLegendPx;
  for (size_t i = 0; i < m_markers.size(); ++i) {
    const int x = kGutterPx + int(std::lround(m_markers[i].x));
    const bool hovered = int(i) == m_hoverMarker;
    // A dark halo keeps the line visible on every phase colour.
    p.fillRect(QRect(x - 1, kRulerPx, 3, bottom - kRulerPx), QColor(0, 0, 0, 150));
    p.fillRect(QRect(hovered ? x - 1 : x, kRulerPx, hovered ? 3 : 1, bottom - kRulerPx),
               theme::marker());
  }
}

void TimelineView::paintMarkerFlags(QPainter& p) const {
  if (m_markers.empty()) return;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setClipRect(QRect(kGutterPx, 0, width() - kGutterPx, kRulerPx));
  for (const ConfigMarker& m : m_markers) {
    const double x = kGutterPx + std::round(m.x) + 0.5;
    QPainterPath flag;
    flag.moveTo(x - 5.5, kRulerPx - 9);
    flag.lineTo(x + 5.5, kRulerPx - 9);
    flag.lineTo(x, kRulerPx - 1);
    flag.closeSubpath();
    p.fillPath(flag, theme::marker());
  }
  p.restore();
}

void TimelineView::paintEmpty(QPainter& p) const {
  p.setPen(theme::dimText());
  p.drawText(rect(), Qt::AlignCenter,
             tr("No trace loaded.\nFile > Open a trace, or Run > Start run to record one."));
}

void TimelineView::paintLanes(QPainter& p) const {
  for (const LaneRow& row : m_rows) {
    if (row.lane % 2 == 1) {
      p.fillRect(QRect(kGutterPx, row.top, width() - kGutterPx, kLaneHeightPx), theme::alternate());
    }
  }
  const int64_t stepNs = niceTickStepNs(m_geometry.nsPerPx(), kMinTickPx);
  p.setPen(theme::gridLine());
  const int bottom = height() - kLegendPx;
  for (int64_t t : tickTimes(m_geometry, dataBounds().startNs, stepNs)) {
    const int x = kGutterPx + int(std::lround(m_geometry.xOf(t)));
    p.drawLine(x, kRulerPx, x, bottom);
  }
}

void TimelineView::paintItems(QPainter& p) const {
  const TimelineData& data = m_document->timeline();
  const QFontMetrics fm(font());
  // Folded runs: each span of columns in its dominant name's colour, the busier the more opaque.
  for (const DominantSpan& span : m_drawList.dominant) {
    if (size_t(span.lane) >= m_rows.size()) continue;
    const int top = m_rows[size_t(span.lane)].top;
    QColor color = phaseColor(data.name(span.nameId));
    color.setAlpha(int(std::lround(110 + 145 * std::clamp(span.busyFraction, 0.0, 1.0))));
    p.fillRect(QRectF(kGutterPx + span.x0, top + 2, span.x1 - span.x0, kLaneHeightPx - 4), color);
  }
  for (const DrawItem& item : m_drawList.items) {
    if (size_t(item.lane) >= m_rows.size()) continue;
    const int top = m_rows[size_t(item.lane)].top;
    const QRectF r(kGutterPx + item.x0, top + 2, item.x1 - item.x0, kLaneHeightPx - 4);
    if (item.isFolded()) continue;
    const TimelineLane& lane = *m_displayLanes[size_t(item.lane)];
    const TimelineSlice& s = lane.slices[size_t(item.sliceIndex)];
    const std::string& name = data.name(s.nameId);
    const QColor color = phaseColor(name);
    p.fillRect(r, color);
    const bool selected = m_selectedStep && s.step == *m_selectedStep && lane.depth == 0;
    if (r.width() > 4 || selected) {
      p.setPen(selected ? QPen(theme::accent(), 2) : QPen(color.lighter(130), 1));
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
    if (r.width() > 16) {
      QString label = QString::fromStdString(name);
      const QRectF textRect = r.adjusted(4, 0, -3, 0);
      if (lane.depth == 0 && s.step >= 0) {
        // Steps: "step 12" when it fits, else just the number.
        label = tr("%1 %2").arg(label).arg(s.step);
        if (fm.horizontalAdvance(label) + 4 > int(textRect.width()))
          label = QString::number(s.step);
      } else if (r.width() <= 28) {
        continue;
      }
      p.setPen(textColorOn(color));
      p.drawText(textRect, Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(label, Qt::ElideRight, int(textRect.width())));
    }
  }
}

// Highlighted slices: an accent outline over the depth-0 lane of their track, widened to 3 px so
// a collective narrower than a pixel (folded into a run) still shows.
void TimelineView::paintHighlights(QPainter& p) const {
  if (m_highlights.empty()) return;
  p.save();
  p.setBrush(Qt::NoBrush);
  for (const TimelineHighlight& h : m_highlights) {
    for (const LaneRow& row : m_rows) {
      const TimelineLane& lane = *m_displayLanes[size_t(row.lane)];
      if (!(lane.track == h.track) || lane.depth != 0) continue;
      double x0 = m_geometry.xOf(h.startNs), x1 = m_geometry.xOf(h.startNs + h.durNs);
      if (x1 - x0 < 3) {
        const double mid = (x0 + x1) / 2;
        x0 = mid - 1.5;
        x1 = mid + 1.5;
      }
      const QRectF r(kGutterPx + x0, row.top + 1, x1 - x0, kLaneHeightPx - 2);
      p.setPen(QPen(QColor(0, 0, 0, 160), 4));
      p.drawRect(r);
      p.setPen(QPen(theme::accent(), 2));
      p.drawRect(r);
    }
  }
  p.restore();
}

void TimelineView::paintRuler(QPainter& p) const {
  p.fillRect(QRect(0, 0, width(), kRulerPx), theme::window());
  p.setPen(theme::axisLine());
  p.drawLine(0, kRulerPx - 1, width(), kRulerPx - 1);
  const int64_t originNs = dataBounds().startNs;
  const int64_t stepNs = niceTickStepNs(m_geometry.nsPerPx(), kMinTickPx);
  const int64_t minorNs = std::max<int64_t>(stepNs / 5, 1);
  if (double(minorNs) / m_geometry.nsPerPx() >= 6) {
    for (int64_t t : tickTimes(m_geometry, originNs, minorNs)) {
      const int x = kGutterPx + int(std::lround(m_geometry.xOf(t)));
      p.drawLine(x, kRulerPx - 5, x, kRulerPx - 1);
    }
  }
  const std::vector<int64_t> ticks = tickTimes(m_geometry, originNs, stepNs);
  const RulerLabels labels = rulerLabels(ticks, originNs, stepNs);
  const QFontMetrics fm(font());
  int labelsEnd = std::numeric_limits<int>::min();  // right edge of the last label drawn
  for (size_t i = 0; i < ticks.size(); ++i) {
    const int x = kGutterPx + int(std::lround(m_geometry.xOf(ticks[i])));
    p.setPen(theme::axisLine());
    p.drawLine(x, kRulerPx - 11, x, kRulerPx - 1);
    // A long first label of a relative ruler ("31797.0001 s") may cover the next tick's place.
    const QString label = QString::fromStdString(labels.labels[i]);
    const int labelPx = fm.horizontalAdvance(label) + 2;
    if (x + 4 < labelsEnd + 8) continue;
    p.setPen(theme::text());
    p.drawText(QRect(x + 4, 2, labelPx, kRulerPx - 8), Qt::AlignLeft | Qt::AlignVCenter, label);
    labelsEnd = x + 4 + labelPx;
  }
  p.fillRect(QRect(0, 0, kGutterPx, kRulerPx - 1), theme::window());
  p.setPen(theme::dimText());
  p.drawText(QRect(8, 0, kGutterPx - 12, kRulerPx), Qt::AlignVCenter | Qt::AlignLeft,
             tr("window %1").arg(QString::fromStdString(formatDurationNs(m_geometry.durNs()))));
}

void TimelineView::paintGutter(QPainter& p) const {
  const int bottom = height() - kLegendPx;
  p.fillRect(QRect(0, kRulerPx, kGutterPx, bottom - kRulerPx), theme::window());
  QFont bold = font();
  bold.setBold(true);
  for (const LaneRow& row : m_rows) {
    const QRect r(10, row.top, kGutterPx - 16, kLaneHeightPx);
    p.setFont(row.firstOfTrack ? bold : font());
    p.setPen(row.firstOfTrack ? theme::text() : theme::dimText());
    const QString label = laneLabel(row);
    int indent = row.firstOfTrack ? 0 : 12;
    if (row.expandable) {
      // Disclosure triangle: pointing right when collapsed, down when expanded.
      const double cx = r.left() + indent + 4, cy = r.center().y() + 0.5;
      QPolygonF tri;
      if (row.layer == -2) {
        tri << QPointF(cx - 3, cy - 5) << QPointF(cx + 3, cy) << QPointF(cx - 3, cy + 5);
      } else {
        tri << QPointF(cx - 5, cy - 3) << QPointF(cx + 5, cy - 3) << QPointF(cx, cy + 3);
      }
      p.save();
      p.setRenderHint(QPainter::Antialiasing, true);
      p.setPen(Qt::NoPen);
      p.setBrush(theme::dimText());
      p.drawPolygon(tri);
      p.restore();
      indent += 12;
    } else if (row.layer >= 0) {
      indent += 12;
    }
    p.drawText(r.adjusted(indent, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft,
               QFontMetrics(p.font()).elidedText(label, Qt::ElideRight, r.width() - indent));
  }
  p.setFont(font());
  p.setPen(theme::axisLine());
  p.drawLine(kGutterPx - 1, kRulerPx, kGutterPx - 1, bottom);
}

void TimelineView::paintLegend(QPainter& p) const {
  const int top = height() - kLegendPx;
  p.fillRect(QRect(0, top, width(), kLegendPx), theme::window());
  p.setPen(theme::axisLine());
  p.drawLine(0, top, width(), top);
  const QFontMetrics fm(font());
  const QString note = tr("darker shade = backward");
  const int noteWidth = fm.horizontalAdvance(note) + 20;
  // GPU kinds first (four short entries), then the phase families as far as they fit.
  std::vector<std::pair<std::string, QColor>> entries;
  if (!m_document->gpuLaneTracks().empty()) {
    for (const char* kind : {storage::kCategoryKernel, storage::kCategoryMemcpy,
                             storage::kCategoryMemset, storage::kCategoryApi}) {
      entries.emplace_back(kind, gpuCategoryColor(kind));
    }
  }
  for (const std::string& family : m_legend) entries.emplace_back(family, phaseColor(family));
  int x = 10;
  for (const auto& [family, color] : entries) {
    const QString label = QString::fromStdString(family);
    const int w = 14 + 4 + fm.horizontalAdvance(label) + 14;
    if (x + w > width() - noteWidth) break;
    const QRect swatch(x, top + (kLegendPx - 12) / 2, 14, 12);
    p.fillRect(swatch, color);
    p.setPen(theme::text());
    p.drawText(QRect(x + 18, top, w, kLegendPx), Qt::AlignVCenter | Qt::AlignLeft, label);
    x += w;
  }
  if (x + noteWidth <= width()) {
    p.setPen(theme::dimText());
    p.drawText(QRect(0, top, width() - 10, kLegendPx), Qt::AlignVCenter | Qt::AlignRight, note);
  }
}

}  // namespace moewb::gui
