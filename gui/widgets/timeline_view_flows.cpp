// TimelineView flows: the arrow from a CUDA API call to the GPU work it launched (and back), read
// on a FlowQueryWorker, drawn over the GPU lanes, hovered, clicked and followed with ] and [.
#include <QContextMenuEvent>
#include <QCoreApplication>
#include <QMenu>
#include <QPainter>
#include <QPainterPath>
#include <QPointer>
#include <algorithm>
#include <cmath>

#include "moewb/gui/trace_document.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {

namespace {
constexpr double kFlowHitPx = 4;    // a click or hover this close to the arrow is on it
constexpr double kArrowHeadPx = 8;  // length of the arrow head

// "kernel", "copy" or "memset": what the work end is called in menus and hints.
QString workWord(const TimelineFlow& flow) {
  if (flow.work.category == storage::kCategoryMemcpy) return QObject::tr("copy");
  if (flow.work.category == storage::kCategoryMemset) return QObject::tr("memset");
  return QObject::tr("kernel");
}
}  // namespace

bool TimelineView::flowPending() const {
  return m_flowWorker && m_flowAnswered < m_flowTicket;
}

void TimelineView::clearFlow(bool dropWorker) {
  const bool had = m_flow.has_value() || flowPending();
  m_flow.reset();
  m_flowAnswered = m_flowTicket;  // an answer still on its way is for an old selection
  if (dropWorker) m_flowWorker.reset();
  if (had) emit flowChanged();
}

void TimelineView::requestFlow(const storage::GpuLaneItem& item) {
  requestFlow(
      FlowEnd{item.id, item.track, item.startNs, item.endNs, item.name, item.category, item.step});
}

void TimelineView::requestFlow(const FlowEnd& selected) {
  if (!m_document || !m_document->isOpen()) return;
  if (m_flow && m_flow->touches(selected.slice)) return;  // an end of the flow shown: keep it
  const bool had = m_flow.has_value();
  m_flow.reset();
  if (had) emit flowChanged();
  const std::string path = m_document->path().toStdString();
  if (!m_flowWorker || m_flowWorker->path() != path) {
    QPointer<TimelineView> self(this);
    m_flowWorker = std::make_unique<FlowQueryWorker>(path, [self](FlowAnswer&& answer) {
      auto shared = std::make_shared<FlowAnswer>(std::move(answer));
      // The view may be gone by the time the GUI thread runs this (self is then null).
      QMetaObject::invokeMethod(
          QCoreApplication::instance(),
          [self, shared] {
            if (self) self->onFlowAnswered(*shared);
          },
          Qt::QueuedConnection);
    });
  }
  FlowQuery query;
  query.ticket = ++m_flowTicket;
  query.selected = selected;
  m_flowWorker->request(query);
}

void TimelineView::onFlowAnswered(const FlowAnswer& answer) {
  if (answer.query.ticket != m_flowTicket || m_flowAnswered >= m_flowTicket) return;
  m_flowAnswered = answer.query.ticket;
  // A failed read draws no arrow (file errors reach the status bar through the document).
  const bool stillSelected =
      m_selectedGpuSlice && *m_selectedGpuSlice == answer.query.selected.slice;
  if (answer.status.isOk() && stillSelected) m_flow = answer.flow;
  update();
  emit flowChanged();
}

int TimelineView::gpuLaneOfTrack(TrackId track) const {
  if (!m_document) return -1;
  const auto& tracks = m_document->gpuLaneTracks();
  for (size_t i = 0; i < tracks.size(); ++i) {
    if (tracks[i].id == track) return int(i);
  }
  return -1;
}

FlowArrow TimelineView::flowArrow() const {
  if (!m_flow) return {};
  const int from = gpuLaneOfTrack(m_flow->launch.track);
  const int to = gpuLaneOfTrack(m_flow->work.track);
  if (from < 0 || to < 0 || from == to) return {};
  // From the launch's lane edge facing the work's lane to the work's facing edge.
  const int fromTop = m_gpuTop + from * kLaneHeightPx, toTop = m_gpuTop + to * kLaneHeightPx;
  const double y0 = from < to ? fromTop + kLaneHeightPx - 2 : fromTop + 2;
  const double y1 = from < to ? toTop + 2 : toTop + kLaneHeightPx - 2;
  FlowArrow arrow = layoutFlowArrow(*m_flow, m_geometry, y0, y1);
  arrow.x0 += kGutterPx;
  arrow.x1 += kGutterPx;
  return arrow;
}

bool TimelineView::goToFlowEnd(bool toWork) {
  if (!m_flow) return false;
  const TimelineFlow flow = *m_flow;  // the slots below may change m_flow
  const FlowEnd& target = toWork ? flow.work : flow.launch;
  showTimeRange(flowJumpRange(flow, target, m_geometry));
  m_selectedSlice.reset();
  m_selectedGpuSlice = target.slice;
  m_flow = flow;
  update();
  emit gpuSliceActivated(target.slice.value);
  if (target.step >= 0) {
    m_selectedStep = target.step;
    emit stepActivated(target.step);
  }
  return true;
}

bool TimelineView::flowClick(const QPoint& pos) {
  if (!m_flow || flowArrowDistance(flowArrow(), pos.x(), pos.y()) > kFlowHitPx) return false;
  // To the end that is not selected (the work when neither is).
  const bool toWork = !(m_selectedGpuSlice && *m_selectedGpuSlice == m_flow->work.slice);
  return goToFlowEnd(toWork);
}

QString TimelineView::flowLineFor(SliceId slice) const {
  if (!m_flow || !m_flow->touches(slice)) return {};
  return QStringLiteral("<br>") + QString::fromStdString(flowDelayText(*m_flow)).toHtmlEscaped();
}

QString TimelineView::flowTextAt(const QPoint& pos) const {
  if (!m_flow || flowArrowDistance(flowArrow(), pos.x(), pos.y()) > kFlowHitPx) return {};
  const TimelineFlow& f = *m_flow;
  const bool toWork = !(m_selectedGpuSlice && *m_selectedGpuSlice == f.work.slice);
  return tr("<b>%1</b> → <b>%2</b>%3<br>correlation id %4<br><i>click to go to the %5 (%6)</i>")
      .arg(QString::fromStdString(f.launch.name).toHtmlEscaped(),
           QString::fromStdString(f.work.name).toHtmlEscaped(), flowLineFor(f.work.slice))
      .arg(f.correlationId)
      .arg(toWork ? workWord(f) : tr("launch"), toWork ? tr("]") : tr("["));
}

void TimelineView::contextMenuEvent(QContextMenuEvent* event) {
  if (!m_flow) {
    QWidget::contextMenuEvent(event);
    return;
  }
  QMenu menu(this);
  menu.addAction(tr("Go to %1\t]").arg(workWord(*m_flow)), this, [this] { goToFlowEnd(true); });
  menu.addAction(tr("Go to launch (%1)\t[").arg(QString::fromStdString(m_flow->launch.name)), this,
                 [this] { goToFlowEnd(false); });
  menu.exec(event->globalPos());
  event->accept();
}

// The arrow: a dark halo under an accent line, a dot at the launch, a head at the work; an end
// off-screen gets its name at the edge; the end that is not selected is outlined.
void TimelineView::paintFlow(QPainter& p) const {
  if (!m_flow) return;
  const FlowArrow a = flowArrow();
  if (!a.visible) return;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  const QPointF from(a.x0, a.y0), to(a.x1, a.y1);
  p.setPen(QPen(QColor(0, 0, 0, 150), 4, Qt::SolidLine, Qt::RoundCap));
  p.drawLine(from, to);
  p.setPen(QPen(theme::accent(), 2, Qt::SolidLine, Qt::RoundCap));
  p.drawLine(from, to);
  p.setBrush(theme::accent());
  if (a.launchSide == FlowSide::kInside) p.drawEllipse(from, 3, 3);
  const double len = std::hypot(a.x1 - a.x0, a.y1 - a.y0);
  if (len > 1) {
    const double ux = (a.x1 - a.x0) / len, uy = (a.y1 - a.y0) / len;
    const double h = kArrowHeadPx;
    QPainterPath head;
    head.moveTo(to);
    head.lineTo(a.x1 - h * ux + h / 2 * uy, a.y1 - h * uy - h / 2 * ux);
    head.lineTo(a.x1 - h * ux - h / 2 * uy, a.y1 - h * uy + h / 2 * ux);
    head.closeSubpath();
    p.fillPath(head, theme::accent());
  }
  const QFontMetrics fm(font());
  auto edgeLabel = [&](const FlowEnd& end, FlowSide side, QPointF at) {
    if (side == FlowSide::kInside) return;
    const QString text = fm.elidedText(QString::fromStdString(end.name), Qt::ElideRight, 180);
    const int w = fm.horizontalAdvance(text) + 8;
    const bool left = side == FlowSide::kLeft;
    const QRectF box(left ? at.x() + 4 : at.x() - 4 - w, at.y() - fm.height() / 2.0, w,
                     fm.height());
    p.fillRect(box, QColor(0, 0, 0, 170));
    p.setPen(theme::accent());
    p.drawText(box, Qt::AlignCenter, text);
  };
  edgeLabel(m_flow->launch, a.launchSide, from);
  edgeLabel(m_flow->work, a.workSide, to);
  // Outline the partner of the selection where its lane shows it unfolded.
  const SliceId partner = m_flow->partnerOf(m_selectedGpuSlice.value_or(SliceId())).slice;
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(theme::accent(), 2, Qt::DashLine));
  for (const GpuDrawItem& d : m_gpuItems) {
    if (size_t(d.lane) >= m_gpuLanes.size()) continue;
    const storage::GpuLaneItem& item = m_gpuLanes[size_t(d.lane)].items[size_t(d.item)];
    if (item.isFolded() || !(item.id == partner)) continue;
    p.drawRect(QRectF(kGutterPx + d.x0, m_gpuTop + d.lane * kLaneHeightPx + 1,
                      std::max(d.x1 - d.x0, 3.0), kLaneHeightPx - 2));
  }
  p.restore();
}

}  // namespace moewb::gui
