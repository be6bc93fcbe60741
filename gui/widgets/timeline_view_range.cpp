// TimelineView: range selection (Shift+drag, Esc) and search (Ctrl-F bar, highlights, next /
// previous). Painting walks only the visible window: per lane, the matches inside it are found
// by binary search in the lane's sorted match list and drawn at most once per pixel column.
#include <QLineEdit>
#include <QMouseEvent>
#include <QPainter>
#include <QShortcut>
#include <algorithm>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/palette.h"
#include "moewb/gui/trace_document.h"
#include "theme.h"
#include "timeline_search_bar.h"
#include "timeline_view.h"

namespace moewb::gui {

namespace {
constexpr int kMinRangeDragPx = 3;       // a shorter Shift+drag selects nothing
const QColor kMatchColor(255, 214, 10);  // search matches (Perfetto's yellow)
}  // namespace

int64_t TimelineView::timeAtWidgetX(int x) const {
  const double t = m_geometry.timeAt(std::clamp(plotX(x), 0.0, plotWidth()));
  const TimeRange bounds = dataBounds();
  return std::clamp(int64_t(std::llround(t)), bounds.startNs,
                    std::max(bounds.startNs, bounds.endNs));
}

void TimelineView::setSelectedRange(std::optional<TimeRange> range) {
  if (range && m_document) {
    const TimeRange bounds = dataBounds();
    range->startNs = std::max(range->startNs, bounds.startNs);
    range->endNs = std::min(range->endNs, bounds.endNs);
  }
  if (!range || range->durNs() <= 0 || !m_document) {
    const bool had = m_range.has_value();
    m_range.reset();
    update();
    if (had) emit rangeCleared();
    return;
  }
  m_range = range;
  update();
  emit rangeSelected(range->startNs, range->endNs);
}

bool TimelineView::rangePress(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !(event->modifiers() & Qt::ShiftModifier) ||
      !m_document || event->position().x() < kGutterPx) {
    return false;
  }
  m_rangeDragging = true;
  m_rangeAnchorX = int(event->position().x());
  setCursor(Qt::IBeamCursor);
  return true;
}

bool TimelineView::rangeMove(QMouseEvent* event) {
  if (!m_rangeDragging) return false;
  const int x = int(event->position().x());
  if (std::abs(x - m_rangeAnchorX) >= kMinRangeDragPx) {
    const int64_t a = timeAtWidgetX(m_rangeAnchorX), b = timeAtWidgetX(x);
    m_range = TimeRange{std::min(a, b), std::max(a, b)};
    update();
  }
  return true;
}

bool TimelineView::rangeRelease(QMouseEvent* event) {
  if (!m_rangeDragging || event->button() != Qt::LeftButton) return false;
  rangeMove(event);
  m_rangeDragging = false;
  unsetCursor();
  if (std::abs(int(event->position().x()) - m_rangeAnchorX) >= kMinRangeDragPx) {
    setSelectedRange(m_range);
  }
  return true;
}

void TimelineView::createSearchBar() {
  m_searchBar = new TimelineSearchBar(this);
  m_searchBar->hide();
  connect(m_searchBar, &TimelineSearchBar::textChanged, this, [this](const QString& text) {
    if (m_document) m_search.run(m_document->timeline(), text);
    updateSearchCount();
    update();
  });
  connect(m_searchBar, &TimelineSearchBar::nextRequested, this, [this] { searchStep(true); });
  connect(m_searchBar, &TimelineSearchBar::previousRequested, this, [this] { searchStep(false); });
  connect(m_searchBar, &TimelineSearchBar::closeRequested, this, &TimelineView::closeSearch);
  auto* find = new QShortcut(QKeySequence::Find, this);
  find->setContext(Qt::WindowShortcut);
  connect(find, &QShortcut::activated, this, &TimelineView::openSearch);
}

void TimelineView::placeSearchBar() {
  if (!m_searchBar) return;
  const QSize size = m_searchBar->sizeHint();
  m_searchBar->setGeometry(std::max(kGutterPx, width() - size.width() - 4), 1, size.width(),
                           std::min(size.height(), kRulerPx - 2));
}

void TimelineView::openSearch() {
  placeSearchBar();
  m_searchBar->show();
  m_searchBar->raise();
  m_searchBar->field()->setFocus(Qt::ShortcutFocusReason);
  m_searchBar->field()->selectAll();
}

void TimelineView::closeSearch() {
  m_searchBar->hide();
  {
    const QSignalBlocker block(m_searchBar);
    m_searchBar->field()->clear();
  }
  m_search.clear();
  updateSearchCount();
  setFocus(Qt::OtherFocusReason);
  update();
}

void TimelineView::setSearchText(const QString& text) {
  if (!m_searchBar->isVisible()) openSearch();
  m_searchBar->field()->setText(text);  // textChanged runs the search
  if (m_document && m_search.text() != text) {
    m_search.run(m_document->timeline(), text);
    updateSearchCount();
    update();
  }
}

void TimelineView::updateSearchCount() {
  m_searchBar->setCount(m_search.current(), int(m_search.matches().size()));
}

void TimelineView::refreshSearch() {
  if (!m_document || m_search.text().isEmpty() ||
      m_search.dataRevision() == m_document->timeline().revision()) {
    return;
  }
  const int current = m_search.current();
  const std::optional<SearchMatch> was =
      current >= 0 ? std::optional(m_search.matches()[size_t(current)]) : std::nullopt;
  m_search.run(m_document->timeline(), m_search.text());
  if (was) {
    const auto& all = m_search.matches();
    auto it = std::lower_bound(
        all.begin(), all.end(), *was, [](const SearchMatch& a, const SearchMatch& b) {
          return a.startNs != b.startNs ? a.startNs < b.startNs : a.lane < b.lane;
        });
    if (it != all.end() && it->startNs == was->startNs && it->lane == was->lane) {
      m_search.setCurrent(int(it - all.begin()));
    }
  }
  updateSearchCount();
}

void TimelineView::searchStep(bool forward) {
  if (!m_document) return;
  refreshSearch();
  const int index = m_search.step(forward, forward ? m_geometry.startNs : m_geometry.endNs);
  updateSearchCount();
  if (index < 0) {
    update();
    return;
  }
  const SearchMatch match = m_search.matches()[size_t(index)];
  const TimelineLane& lane = m_document->timeline().lanes()[size_t(match.lane)];
  const TimelineSlice slice = lane.slices[size_t(match.index)];
  const int64_t windowNs = m_geometry.durNs();
  if (double(slice.durNs) * 1.25 > double(windowNs)) {
    const int64_t pad = std::max<int64_t>(slice.durNs / 10, 1);
    showTimeRange({slice.startNs - pad, slice.endNs() + pad});
  } else {
    const int64_t startNs = slice.startNs + slice.durNs / 2 - windowNs / 2;
    showTimeRange({startNs, startNs + windowNs});
  }
  m_selectedGpuSlice.reset();
  m_selectedSlice = slice;
  emit sliceActivated(lane.track.value, slice.startNs);
  if (slice.step >= 0) {
    m_selectedStep = slice.step;
    emit stepActivated(slice.step);
  }
  update();
}

// The selected range: everything outside it dimmed, the band tinted, its edges drawn.
void TimelineView::paintRange(QPainter& p) const {
  if (!m_range) return;
  const double x0 = kGutterPx + m_geometry.xOf(m_range->startNs);
  const double x1 = kGutterPx + m_geometry.xOf(m_range->endNs);
  const double top = kRulerPx, bottom = height() - kLegendPx;
  const QColor dim(0, 0, 0, 70);
  p.fillRect(QRectF(kGutterPx, top, std::max(0.0, x0 - kGutterPx), bottom - top), dim);
  p.fillRect(QRectF(x1, top, std::max(0.0, width() - x1), bottom - top), dim);
  QColor tint = theme::accent();
  tint.setAlpha(36);
  p.fillRect(QRectF(x0, top, std::max(1.0, x1 - x0), bottom - top), tint);
  p.setPen(QPen(theme::accent(), 1));
  p.drawLine(QPointF(x0, top), QPointF(x0, bottom));
  p.drawLine(QPointF(x1, top), QPointF(x1, bottom));
}

// In the ruler: the duration centred over the band, start and end outside its edges (relative
// to the trace start, in the unit that fits).
void TimelineView::paintRangeLabels(QPainter& p) const {
  if (!m_range) return;
  const double x0 = kGutterPx + m_geometry.xOf(m_range->startNs);
  const double x1 = kGutterPx + m_geometry.xOf(m_range->endNs);
  const int64_t originNs = dataBounds().startNs;
  auto fmt = [](int64_t ns) { return QString::fromStdString(formatDurationNs(ns)); };
  const QFontMetrics fm(font());
  const int h = fm.height() + 2, y = kRulerPx - h;
  auto label = [&](const QString& text, double x, Qt::Alignment align, bool strong) {
    const int w = fm.horizontalAdvance(text) + 8;
    double left = align == Qt::AlignRight ? x - w : align == Qt::AlignLeft ? x : x - w / 2.0;
    left = std::clamp(left, double(kGutterPx), std::max(double(kGutterPx), width() - w - 1.0));
    const QRectF r(left, y, w, h);
    p.fillRect(r, strong ? theme::accent() : theme::base());
    p.setPen(strong ? textColorOn(theme::accent()) : theme::text());
    p.drawText(r, Qt::AlignCenter, text);
  };
  p.save();
  p.setPen(QPen(theme::accent(), 1));
  p.drawLine(QPointF(x0, y + h / 2.0), QPointF(x1, y + h / 2.0));
  label(tr("+%1").arg(fmt(m_range->startNs - originNs)), x0 - 2, Qt::AlignRight, false);
  label(tr("+%1").arg(fmt(m_range->endNs - originNs)), x1 + 2, Qt::AlignLeft, false);
  label(fmt(m_range->durNs()), (x0 + x1) / 2, Qt::AlignHCenter, true);
  p.restore();
}

// Search matches: a yellow box over each visible matching slice (one per pixel column), the
// current match outlined thickly.
void TimelineView::paintSearchMatches(QPainter& p) const {
  if (m_search.matches().empty() || m_search.dataRevision() != m_document->timeline().revision()) {
    return;
  }
  const auto& lanes = m_document->timeline().lanes();
  QColor fill = kMatchColor;
  fill.setAlpha(170);
  p.save();
  // Per data lane, its matches in the window; each goes to the row of its layer (one row when the
  // lane is collapsed), at most one box per pixel column of a row.
  std::vector<double> lastRight;
  for (size_t laneIndex = 0; laneIndex < lanes.size() && laneIndex < m_firstRowOfLane.size();
       ++laneIndex) {
    const TimelineLane& lane = lanes[laneIndex];
    const auto& hits = m_search.laneMatches(laneIndex);
    if (hits.empty()) continue;
    const int firstRow = m_firstRowOfLane[laneIndex];
    lastRight.assign(m_rows.size() - size_t(firstRow), -1e9);
    const auto [first, last] =
        TimelineData::visibleRange(lane, m_geometry.startNs, m_geometry.endNs);
    auto it = std::lower_bound(hits.begin(), hits.end(), int32_t(first));
    for (; it != hits.end() && size_t(*it) < last; ++it) {
      const TimelineSlice& s = lane.slices[size_t(*it)];
      double x0 = m_geometry.xOf(s.startNs), x1 = m_geometry.xOf(s.endNs());
      if (x1 < 0) continue;
      const int row = rowOf(int(laneIndex), s.layer);
      double& right = lastRight[size_t(row - firstRow)];
      if (x1 - x0 < 2) x1 = x0 + 2;
      if (x1 <= right) continue;  // this pixel column already shows a match
      x0 = std::max(x0, right);
      right = x1;
      const QRectF r(kGutterPx + x0, m_rows[size_t(row)].top + 1, x1 - x0, kLaneHeightPx - 2);
      p.fillRect(r, fill);
      p.setPen(QPen(kMatchColor, 2));
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
    }
  }
  if (m_search.current() >= 0) {
    const SearchMatch& m = m_search.matches()[size_t(m_search.current())];
    const TimelineSlice& s = lanes[size_t(m.lane)].slices[size_t(m.index)];
    const int row = rowOf(m.lane, s.layer);
    if (row >= 0) {
      double x0 = m_geometry.xOf(s.startNs), x1 = m_geometry.xOf(s.endNs());
      if (x1 - x0 < 4) x0 = (x0 + x1) / 2 - 2, x1 = x0 + 4;
      p.setBrush(Qt::NoBrush);
      p.setPen(QPen(theme::accent(), 3));
      p.drawRect(QRectF(kGutterPx + x0, m_rows[size_t(row)].top + 1, x1 - x0, kLaneHeightPx - 2));
    }
  }
  p.restore();
}

}  // namespace moewb::gui
