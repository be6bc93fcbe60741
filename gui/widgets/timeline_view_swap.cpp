// TimelineView: the swap lanes (per rank "swap D2H" and "swap H2D"): reading the window's copies,
// hit testing, tooltips and painting.
#include <QPainter>
#include <cmath>

#include "moewb/gui/palette.h"
#include "moewb/gui/swap_model.h"
#include "moewb/gui/trace_document.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {

void TimelineView::setSwapModel(SwapModel* model) {
  if (m_swap) disconnect(m_swap, nullptr, this, nullptr);
  m_swap = model;
  if (m_swap) connect(m_swap, &SwapModel::changed, this, &TimelineView::onDataChanged);
  onDataChanged();
}

int TimelineView::swapLaneCount() const {
  if (!m_document || !m_swap || !m_swap->hasSwap()) return 0;
  return 2 * int(m_swap->laneRanks().size());
}

void TimelineView::rebuildSwap() {
  m_swapEvents.clear();
  m_swapItems.clear();
  if (swapLaneCount() == 0) return;
  // A failed read leaves the lanes empty (as for the GPU lanes).
  auto events = m_swap->events({m_geometry.startNs, m_geometry.endNs});
  if (!events.isOk()) return;
  m_swapEvents = std::move(events).value();
  m_swapItems = layoutSwapItems(m_swap->laneRanks(), m_swapEvents, m_geometry);
}

QRect TimelineView::swapLaneRect(int lane) const {
  if (lane < 0 || lane >= swapLaneCount()) return {};
  return QRect(kGutterPx, m_swapTop + lane * kLaneHeightPx, width() - kGutterPx, kLaneHeightPx);
}

int TimelineView::swapLaneAtY(int y) const {
  if (y < m_swapTop) return -1;
  const int lane = (y - m_swapTop) / kLaneHeightPx;
  return lane < swapLaneCount() ? lane : -1;
}

const storage::SwapEventRow* TimelineView::swapEventAtPos(const QPoint& pos) const {
  if (pos.x() < kGutterPx) return nullptr;
  const int lane = swapLaneAtY(pos.y());
  if (lane < 0) return nullptr;
  const SwapDrawItem* d = swapItemAt(m_swapItems, lane, plotX(pos.x()));
  if (!d || d->isFolded() || size_t(d->event) >= m_swapEvents.size()) return nullptr;
  return &m_swapEvents[size_t(d->event)];
}

void TimelineView::setSelectedGpuSlice(std::optional<SliceId> slice) {
  m_selectedGpuSlice = slice;
  if (slice) {
    FlowEnd selected;
    selected.slice = *slice;
    requestFlow(selected);
  } else {
    clearFlow();
  }
  update();
}

QString TimelineView::swapTooltipText(const storage::SwapEventRow& event) const {
  QStringList lines;
  for (const std::string& line : swapTooltipLines(event)) {
    lines << QString::fromStdString(line).toHtmlEscaped();
  }
  lines.front() = QStringLiteral("<b>%1</b>").arg(lines.front());
  if (swapCopyLate(event) && lines.size() > 3) {
    // Line 3 is the stall (reload) or the wait (offload); see swapTooltipLines.
    lines[3] = QStringLiteral("<span style='color:#e15759'>%1</span>").arg(lines[3]);
    lines << tr("click: select what waited");
  }
  return QStringLiteral("<p style='white-space:pre'>%1</p>")
      .arg(lines.join(QStringLiteral("<br>")));
}

void TimelineView::paintSwap(QPainter& p) const {
  const int lanes = swapLaneCount();
  for (int lane = 0; lane < lanes; ++lane) {
    if (lane % 2 == 0) p.fillRect(swapLaneRect(lane), theme::alternate());
  }
  const QFontMetrics fm(font());
  for (const SwapDrawItem& d : m_swapItems) {
    if (d.lane >= lanes || size_t(d.event) >= m_swapEvents.size()) continue;
    const storage::SwapEventRow& e = m_swapEvents[size_t(d.event)];
    const QRectF r(kGutterPx + d.x0, m_swapTop + d.lane * kLaneHeightPx + 2, d.x1 - d.x0,
                   kLaneHeightPx - 4);
    const QColor color = swapItemColor(e.toHost, d.late);
    p.fillRect(r, d.isFolded() ? color.darker(150) : color);
    if (d.late && d.stallX1 > d.stallX0) {
      // The stall (reload: from when the consumer was ready to the end of the copy) or the wait
      // (offload: from when compute reached its free point for stallNs), hatched dark red with
      // a bracket on top.
      const QRectF stall(kGutterPx + d.stallX0, r.top(), d.stallX1 - d.stallX0, r.height());
      p.fillRect(stall, QBrush(swapStallColor(), Qt::BDiagPattern));
      p.setPen(QPen(swapStallColor(), 2));
      p.drawLine(QPointF(stall.left(), r.top() + 1), QPointF(stall.right(), r.top() + 1));
      p.drawLine(QPointF(stall.left(), r.top()), QPointF(stall.left(), r.bottom()));
    }
    if (r.width() > 4) {
      p.setPen(QPen(color.lighter(130), 1));
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
    if (r.width() > 36) {
      const QRectF textRect = r.adjusted(4, 0, -3, 0);
      p.setPen(textColorOn(color));
      p.drawText(textRect, Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(QString::fromStdString(swapItemLabel(e, d.count)), Qt::ElideRight,
                               int(textRect.width())));
    }
  }
}

void TimelineView::paintSwapGutter(QPainter& p) const {
  const int lanes = swapLaneCount();
  if (lanes == 0) return;
  QFont bold = font();
  bold.setBold(true);
  QFont small = font();
  small.setPointSizeF(font().pointSizeF() * 0.85);
  for (int lane = 0; lane < lanes; ++lane) {
    const QRect r(10, m_swapTop + lane * kLaneHeightPx, kGutterPx - 16, kLaneHeightPx);
    // The lane name in bold, then "(simulated)" smaller and dimmed, so both fit the gutter.
    const QString label =
        QString::fromStdString(swapLaneLabel(m_swap->laneRanks(), lane, false));
    p.setFont(bold);
    p.setPen(theme::text());
    const QString name = QFontMetrics(bold).elidedText(label, Qt::ElideRight, r.width());
    p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft, name);
    if (!m_swap->simulated()) continue;
    const int used = QFontMetrics(bold).horizontalAdvance(name) + 4;
    p.setFont(small);
    p.setPen(theme::dimText());
    p.drawText(r.adjusted(used, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft,
               QFontMetrics(small).elidedText(tr("(simulated)"), Qt::ElideRight,
                                              r.width() - used));
  }
  p.setFont(font());
}

}  // namespace moewb::gui
