// TimelineView input: wheel/keys zoom about the cursor, drag pans, Shift+drag selects a range
// (timeline_view_range.cpp), Esc clears it, Ctrl+F / F3 search, clicks select, tooltips.
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QToolTip>
#include <QWheelEvent>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/trace_document.h"
#include "timeline_view.h"

namespace moewb::gui {

namespace {
constexpr double kZoomPerNotch = 1.25;   // one wheel notch or one +/- key press
constexpr double kKeyPanFraction = 0.1;  // arrow keys pan a tenth of the plot
}  // namespace

void TimelineView::wheelEvent(QWheelEvent* event) {
  const QPoint delta = event->angleDelta();
  const double notches = double(delta.y()) / 120.0;
  if (event->modifiers() & Qt::ShiftModifier || delta.y() == 0) {
    const double horizontal = delta.y() != 0 ? notches : double(delta.x()) / 120.0;
    panBy(-horizontal * plotWidth() * kKeyPanFraction);
  } else {
    zoomBy(std::pow(kZoomPerNotch, notches), plotX(event->position().x()));
  }
  event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  if (rangePress(event)) {
    event->accept();
    return;
  }
  if (event->button() == Qt::LeftButton) {
    if (const int row = bookmarkAt(event->position().toPoint()); row >= 0) {
      emit bookmarkActivated(row);
      event->accept();
      return;
    }
  }
  if (event->button() == Qt::LeftButton && event->position().x() < kGutterPx && m_document) {
    // A click on the label of a phases lane expands or collapses its layer rows.
    const int lane = laneAtY(int(event->position().y()));
    if (lane >= 0 && m_rows[size_t(lane)].expandable) {
      toggleLayers(m_displayLanes[size_t(lane)]->track);
      event->accept();
      return;
    }
  }
  if (event->button() == Qt::LeftButton) {
    m_dragging = true;
    m_dragMoved = false;
    m_dragLast = event->position().toPoint();
    setCursor(Qt::ClosedHandCursor);
  }
  QWidget::mousePressEvent(event);
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  if (rangeMove(event)) {
    event->accept();
    return;
  }
  const int marker = m_dragging ? -1 : configMarkerAt(event->position().toPoint());
  if (marker != m_hoverMarker) {
    m_hoverMarker = marker;
    update();
  }
  if (m_dragging) {
    const QPoint pos = event->position().toPoint();
    const int dx = pos.x() - m_dragLast.x();
    if (std::abs(dx) > 0) {
      m_dragMoved = true;
      panBy(-double(dx));
      m_dragLast = pos;
    }
  }
  QWidget::mouseMoveEvent(event);
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event) {
  if (rangeRelease(event)) {
    event->accept();
    return;
  }
  if (event->button() == Qt::LeftButton && m_dragging) {
    m_dragging = false;
    unsetCursor();
    if (!m_dragMoved) {
      const QPoint pos = event->position().toPoint();
      const Hit hit = hitAt(pos);
      const storage::GpuLaneItem* gpu = hit.item ? nullptr : gpuItemAtPos(pos);
      if (!hit.item && !gpu && flowClick(pos)) {  // the flow arrow: go to its other end
        QWidget::mouseReleaseEvent(event);
        return;
      }
      const storage::SwapEventRow* copy = hit.item || gpu ? nullptr : swapEventAtPos(pos);
      m_selectedGpuSlice.reset();
      m_selectedSlice.reset();
      if (copy) {
        const storage::SwapEventRow event = *copy;  // the slot may rebuild the lanes
        if (event.step >= 0) m_selectedStep = event.step;
        emit swapCopyActivated(event);
      }
      if (hit.slice && !hit.item->isFolded()) {
        const TimelineLane& lane = *m_displayLanes[size_t(hit.item->lane)];
        m_selectedSlice = *hit.slice;
        emit sliceActivated(lane.track.value, hit.slice->startNs);
      }
      if (hit.slice && hit.slice->step >= 0 && !hit.item->isFolded()) {
        m_selectedStep = hit.slice->step;
        emit stepActivated(hit.slice->step);
      } else if (gpu && !gpu->isFolded()) {
        m_selectedGpuSlice = gpu->id;
        requestFlow(*gpu);
        const int64_t step = gpu->step;
        emit gpuSliceActivated(gpu->id.value);
        if (step >= 0) {
          m_selectedStep = step;
          emit stepActivated(step);
        }
      } else if (!copy) {
        m_selectedStep.reset();
      }
      if (!m_selectedGpuSlice) clearFlow();
      update();
    }
  }
  QWidget::mouseReleaseEvent(event);
}

void TimelineView::leaveEvent(QEvent* event) {
  if (m_hoverMarker >= 0) {
    m_hoverMarker = -1;
    update();
  }
  QWidget::leaveEvent(event);
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* event) {
  const Hit hit = hitAt(event->position().toPoint());
  if (hit.item) {
    const int64_t pad = std::max<int64_t>((hit.item->endNs - hit.item->startNs) / 20, 1);
    showTimeRange({hit.item->startNs - pad, hit.item->endNs + pad});
  } else if (const storage::GpuLaneItem* gpu = gpuItemAtPos(event->position().toPoint())) {
    const int64_t startNs = gpu->startNs, endNs = gpu->endNs;  // the lanes are rebuilt below
    const int64_t pad = std::max<int64_t>((endNs - startNs) / 20, 1);
    showTimeRange({startNs - pad, endNs + pad});
  }
  event->accept();
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  if (event->matches(QKeySequence::Find)) {  // also without the window shortcut (inactive window)
    openSearch();
    event->accept();
    return;
  }
  const QPoint cursor = mapFromGlobal(QCursor::pos());
  const double anchor =
      rect().contains(cursor) && cursor.x() >= kGutterPx ? plotX(cursor.x()) : plotWidth() / 2;
  switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoomBy(kZoomPerNotch * kZoomPerNotch, anchor);
      break;
    case Qt::Key_Minus:
      zoomBy(1.0 / (kZoomPerNotch * kZoomPerNotch), anchor);
      break;
    case Qt::Key_Home:
      fitAll();
      break;
    case Qt::Key_Left:
      panBy(-plotWidth() * kKeyPanFraction);
      break;
    case Qt::Key_Right:
      panBy(plotWidth() * kKeyPanFraction);
      break;
    case Qt::Key_F3:
      searchStep(!(event->modifiers() & Qt::ShiftModifier));
      break;
    case Qt::Key_BracketRight:  // follow the flow to its work, [ back to its launch
    case Qt::Key_BracketLeft:
      if (!goToFlowEnd(event->key() == Qt::Key_BracketRight)) {
        QWidget::keyPressEvent(event);
        return;
      }
      break;
    case Qt::Key_Escape:
      if (m_range) {
        setSelectedRange(std::nullopt);
      } else if (!m_search.text().isEmpty()) {
        closeSearch();
      } else {
        QWidget::keyPressEvent(event);
        return;
      }
      break;
    default:
      QWidget::keyPressEvent(event);
      return;
  }
  event->accept();
}

bool TimelineView::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int bookmark = bookmarkAt(help->pos());
    const int marker = configMarkerAt(help->pos());
    const Hit hit = hitAt(help->pos());
    if (bookmark >= 0) {
      QToolTip::showText(help->globalPos(), bookmarkText(bookmark), this);
    } else if (marker >= 0) {
      QStringList lines;
      for (const QString& line : configMarkerText(marker).split(QLatin1Char('\n'))) {
        lines << line.toHtmlEscaped();
      }
      // white-space:pre keeps each change on one line (rich-text tooltips wrap otherwise).
      QToolTip::showText(help->globalPos(),
                         tr("<p style='white-space:pre'><b>Config change</b><br>%1</p>")
                             .arg(lines.join(QStringLiteral("<br>"))),
                         this);
    } else if (hit.item) {
      QToolTip::showText(help->globalPos(), tooltipText(hit), this);
    } else if (const storage::GpuLaneItem* gpu = gpuItemAtPos(help->pos())) {
      QToolTip::showText(help->globalPos(), gpuTooltipText(*gpu), this);
    } else if (const QString flow = flowTextAt(help->pos()); !flow.isEmpty()) {
      QToolTip::showText(help->globalPos(), flow, this);
    } else if (const storage::SwapEventRow* copy = swapEventAtPos(help->pos())) {
      QToolTip::showText(help->globalPos(), swapTooltipText(*copy), this);
    } else if (const QString memory = memoryTextAt(help->pos()); !memory.isEmpty()) {
      QToolTip::showText(help->globalPos(), memory, this);
    } else {
      QToolTip::hideText();
      event->ignore();
    }
    return true;
  }
  return QWidget::event(event);
}

QString TimelineView::tooltipText(const Hit& hit) const {
  const TimelineData& data = m_document->timeline();
  const int64_t originNs = data.bounds().startNs;
  auto dur = [](int64_t ns) { return QString::fromStdString(formatDurationNs(ns)); };
  if (hit.item->isFolded()) {
    QString text = tr("<b>%1 slices</b> folded (each narrower than 3 px)<br>span %2, from +%3")
                       .arg(hit.item->count)
                       .arg(dur(hit.item->endNs - hit.item->startNs))
                       .arg(dur(hit.item->startNs - originNs));
    if (const DominantSpan* span = dominantAt(m_drawList, hit.lane, hit.x)) {
      text += tr("<br>here mostly <b>%1</b> (%2% busy)")
                  .arg(QString::fromStdString(data.name(span->nameId)).toHtmlEscaped())
                  .arg(std::lround(span->busyFraction * 100));
    }
    return text + tr("<br><i>zoom in to separate them</i>");
  }
  const TimelineSlice& s = *hit.slice;
  QString text = tr("<b>%1</b><br>duration %2<br>start +%3")
                     .arg(QString::fromStdString(data.name(s.nameId)).toHtmlEscaped())
                     .arg(dur(s.durNs))
                     .arg(dur(s.startNs - originNs));
  if (s.step >= 0) text += tr("<br>step %1").arg(s.step);
  text += s.layer >= 0 ? tr("<br>layer %1").arg(s.layer) : tr("<br>layer: whole model");
  return text;
}

QString TimelineView::gpuTooltipText(const storage::GpuLaneItem& item) const {
  const int64_t originNs = dataBounds().startNs;
  auto dur = [](int64_t ns) { return QString::fromStdString(formatDurationNs(ns)); };
  if (item.isFolded()) {
    return tr("<b>%1</b> folded (each shorter than a pixel)<br>span %2, from +%3"
              "<br><i>zoom in to separate them</i>")
        .arg(QString::fromStdString(gpuItemLabel(item)).toHtmlEscaped())
        .arg(dur(item.durNs()))
        .arg(dur(item.startNs - originNs));
  }
  QString text = tr("<b>%1</b><br>%2, duration %3<br>start +%4")
                     .arg(QString::fromStdString(item.name).toHtmlEscaped())
                     .arg(QString::fromStdString(item.category))
                     .arg(dur(item.durNs()))
                     .arg(dur(item.startNs - originNs));
  if (item.step >= 0) text += tr("<br>step %1").arg(item.step);
  if (item.layer >= 0) text += tr("<br>layer %1").arg(item.layer);
  text += flowLineFor(item.id);
  return text + tr("<br><i>click for launch details and expert load</i>");
}

}  // namespace moewb::gui
