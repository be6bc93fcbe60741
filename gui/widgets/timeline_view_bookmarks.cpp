// TimelineView bookmarks: a line per bookmark over the lanes and a named flag at the top of the
// ruler (see timeline_view.h); the flags are laid out with the draw list (bookmarkFlags).
#include <QFontMetrics>
#include <QPainter>
#include <QPolygonF>
#include <cmath>

#include "moewb/base/units.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/trace_document.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {

namespace {
constexpr int kFlagTopPx = 1;      // the flags' band in the ruler: [1, 1 + kFlagHeightPx)
constexpr int kFlagHeightPx = 14;  // above the config markers' flags (the ruler's bottom 9 px)
}  // namespace

void TimelineView::setBookmarkModel(BookmarkModel* model) {
  if (m_bookmarks) disconnect(m_bookmarks, nullptr, this, nullptr);
  m_bookmarks = model;
  if (m_bookmarks) {
    auto changed = [this] {
      rebuildBookmarkFlags();
      update();
    };
    connect(m_bookmarks, &QAbstractItemModel::rowsInserted, this, changed);
    connect(m_bookmarks, &QAbstractItemModel::rowsRemoved, this, changed);
    connect(m_bookmarks, &QAbstractItemModel::modelReset, this, changed);
    connect(m_bookmarks, &QAbstractItemModel::dataChanged, this, changed);
  }
  rebuildBookmarkFlags();
  update();
}

void TimelineView::rebuildBookmarkFlags() {
  m_bookmarkFlags.clear();
  if (!m_bookmarks || !m_document || !m_document->isOpen()) return;
  const QFontMetrics fm(font());
  m_bookmarkFlags = moewb::gui::bookmarkFlags(
      m_bookmarks->bookmarks(), m_geometry,
      [&fm](const QString& text) { return double(fm.horizontalAdvance(text)); },
      [&fm](const QString& text, double px) {
        const QString cut = fm.elidedText(text, Qt::ElideRight, int(px));
        return cut == QStringLiteral("…") ? QString() : cut;
      });
}

QRect TimelineView::bookmarkFlagRect(int index) const {
  if (index < 0 || size_t(index) >= m_bookmarkFlags.size()) return {};
  const BookmarkFlag& f = m_bookmarkFlags[size_t(index)];
  const int x = kGutterPx + int(std::lround(f.x));
  return QRect(x, kFlagTopPx, int(std::ceil(f.widthPx)) + 1, kFlagHeightPx);
}

int TimelineView::bookmarkAt(const QPoint& pos) const {
  if (pos.x() < kGutterPx || pos.y() < 0 || pos.y() >= kFlagTopPx + kFlagHeightPx) return -1;
  const int index = bookmarkFlagAt(m_bookmarkFlags, plotX(pos.x()));
  return index < 0 ? -1 : m_bookmarkFlags[size_t(index)].row;
}

QString TimelineView::bookmarkText(int row) const {
  if (!m_bookmarks || row < 0 || size_t(row) >= m_bookmarks->bookmarks().size()) return {};
  const Bookmark& b = m_bookmarks->bookmarks()[size_t(row)];
  auto dur = [](int64_t ns) { return QString::fromStdString(formatDurationNs(ns)); };
  QString text = tr("<b>Bookmark: %1</b><br>at +%2")
                     .arg(b.name.toHtmlEscaped())
                     .arg(dur(b.startNs - dataBounds().startNs));
  if (b.endNs > b.startNs) text += tr(", a range of %1").arg(dur(b.endNs - b.startNs));
  if (b.step >= 0) text += tr("<br>step %1").arg(b.step);
  return text + tr("<br><i>click to go there</i>");
}

// The lines, under the config markers (which stay visible where both meet): a dark halo and a
// one-pixel line in the bookmark colour, dashed so it reads apart from a config change's line.
void TimelineView::paintBookmarkLines(QPainter& p) const {
  const int bottom = height() - kLegendPx;
  QPen pen(theme::bookmark(), 1, Qt::DashLine);
  for (const BookmarkFlag& f : m_bookmarkFlags) {
    const int x = kGutterPx + int(std::lround(f.x));
    p.fillRect(QRect(x - 1, kRulerPx, 3, bottom - kRulerPx), QColor(0, 0, 0, 110));
    p.setPen(pen);
    p.drawLine(x, kRulerPx, x, bottom);
  }
}

// In the ruler's top band: a range bookmark's span as a thin bar, then each flag (a box with its
// name, or a pennant) in the bookmark colour with dark text, and its pole down to the lanes.
void TimelineView::paintBookmarkFlags(QPainter& p) const {
  if (m_bookmarkFlags.empty()) return;
  p.save();
  p.setClipRect(QRect(kGutterPx, 0, width() - kGutterPx, kRulerPx));
  const QColor color = theme::bookmark();
  for (const BookmarkFlag& f : m_bookmarkFlags) {
    const int x = kGutterPx + int(std::lround(f.x));
    const int endX = kGutterPx + int(std::lround(f.endX));
    if (endX > x) {
      QColor span = color;
      span.setAlpha(120);
      p.fillRect(QRect(x, kFlagTopPx + kFlagHeightPx + 1, endX - x, 3), span);
    }
    p.fillRect(QRect(x, kFlagTopPx, 1, kRulerPx - kFlagTopPx), color);
  }
  for (int i = 0; size_t(i) < m_bookmarkFlags.size(); ++i) {
    const BookmarkFlag& f = m_bookmarkFlags[size_t(i)];
    const QRect box = bookmarkFlagRect(i);
    if (f.label.isEmpty()) {
      p.save();
      p.setRenderHint(QPainter::Antialiasing, true);
      p.setPen(Qt::NoPen);
      p.setBrush(color);
      const QPointF tip(box.left() + kBookmarkPennantPx, box.top() + box.height() / 2.0);
      p.drawPolygon(QPolygonF({QPointF(box.left(), box.top()), tip,
                               QPointF(box.left(), box.bottom() + 1.0)}));
      p.restore();
      continue;
    }
    p.fillRect(box, color);
    p.setPen(theme::base());
    p.drawText(box.adjusted(int(kBookmarkLabelPadPx), 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter,
               f.label);
  }
  p.restore();
}

}  // namespace moewb::gui
