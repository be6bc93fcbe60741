// ChartView's header: where the title, the y unit and the legend go, so that none of them
// overlaps another or the plot at any size (see chart_view.h), and their painting.
#include <QPainter>
#include <algorithm>

#include "chart_view.h"
#include "chart_view_metrics.h"
#include "theme.h"

namespace moewb::gui {

using namespace chart_metrics;

namespace {

// "cross-entropy (nats)" -> "nats": the unit of a label written "quantity (unit)"; "" otherwise.
QString unitInParentheses(const QString& label) {
  const qsizetype open = label.lastIndexOf(QLatin1Char('('));
  if (open <= 0 || !label.endsWith(QLatin1Char(')'))) return {};
  return label.mid(open + 1, label.size() - open - 2).trimmed();
}

// The swatch width and gap of a legend item of box `box` for `name`: full size when the name
// fits beside them, small in a narrowed item (so more of the name shows).
std::pair<double, double> swatchPx(const QRectF& box, const QString& name, const QFontMetrics& fm) {
  const bool fits = kSwatchPx + kSwatchGapPx + fm.horizontalAdvance(name) + 2 <= box.width() + 0.5;
  return fits ? std::make_pair(kSwatchPx, kSwatchGapPx) : std::make_pair(8.0, 3.0);
}

}  // namespace

// One row (title left, unit right) when both fit, from the plot's left edge or else over the
// tick labels' margin; else the unit under the title if the plot keeps kMinPlotPx; else the
// short unit ("nats" for "cross-entropy (nats)") and, if still too long, both elided with the
// unit given at least 40% of the row. The rectangles are the drawn texts' extents.
void ChartView::updateLayout() {
  QFont bold = font();
  bold.setBold(true);
  const QFontMetricsF tm(bold), um(font());
  const double right = width() - kRightPx;
  const double tw = m_title.isEmpty() ? 0 : tm.horizontalAdvance(m_title);
  const std::vector<QRectF> legend0 = legendItems(0);
  const double legendPx = legend0.empty() ? 4 : legend0.back().bottom() + 8;
  const bool roomForRow =
      height() - (4 + kTitleRowPx + um.height()) - legendPx - kBottomPx >= kMinPlotPx;
  auto rowPx = [&](const QString& unit) {
    const double uw = unit.isEmpty() ? 0 : um.horizontalAdvance(unit);
    return tw + (tw > 0 && uw > 0 ? kHeaderGapPx : 0) + uw;
  };
  QString unit = m_yTitle;
  const QString brief = unitInParentheses(m_yTitle);
  if (rowPx(unit) > right - kNarrowLeftPx && !(roomForRow && tw <= right - kNarrowLeftPx) &&
      !brief.isEmpty()) {
    unit = brief;
  }
  const double uw = unit.isEmpty() ? 0 : um.horizontalAdvance(unit);
  const double gap = tw > 0 && uw > 0 ? kHeaderGapPx : 0;
  const double left = rowPx(unit) <= right - kLeftPx ? kLeftPx : kNarrowLeftPx;
  const double avail = std::max(0.0, right - left);
  double titleW = tw, unitW = uw;
  bool secondRow = false;
  if (tw + gap + uw > avail) {
    secondRow = roomForRow && tw <= avail && uw <= avail;
    if (!secondRow) {
      unitW = std::min(uw, std::max(avail - tw - gap, avail * 0.4));
      titleW = std::max(0.0, avail - unitW - gap);
    }
  }
  m_titleShown = tw <= titleW ? m_title : tm.elidedText(m_title, Qt::ElideRight, titleW);
  m_unitShown = uw <= unitW ? unit : um.elidedText(unit, Qt::ElideRight, unitW);
  const double titleShownW = m_titleShown.isEmpty() ? 0 : tm.horizontalAdvance(m_titleShown);
  const double unitShownW = m_unitShown.isEmpty() ? 0 : um.horizontalAdvance(m_unitShown);
  m_titleRect = titleShownW > 0 ? QRectF(left, 4, titleShownW, kTitleRowPx) : QRectF();
  if (unitShownW <= 0) {
    m_unitRect = QRectF();
  } else if (secondRow) {
    m_unitRect = QRectF(left, 4 + kTitleRowPx, unitShownW, um.height());
  } else {
    m_unitRect = QRectF(right - unitShownW, 4, unitShownW, kTitleRowPx);
  }
  m_headerBottom = secondRow ? 4 + kTitleRowPx + um.height() : 4 + kTitleRowPx;
  const std::vector<QRectF> legend = legendItems(m_headerBottom);
  m_plotTop = legend.empty() ? m_headerBottom + 4 : legend.back().bottom() + 8;
}

// A legend is drawn when any series is named (one named series: "all 4 ranks equal"). Items flow
// in rows from the plot's left edge when they fit in one row there, else from the
// window's left edge; when the rows would leave the plot less than kMinPlotPx, they share one
// row, each narrowed in proportion (names elided; the hover readout and tooltip name every series).
std::vector<QRectF> ChartView::legendItems(double top) const {
  std::vector<QRectF> items;
  int named = 0;
  for (const ChartSeries& s : m_series) named += s.name.isEmpty() ? 0 : 1;
  if (named < 1) return items;
  const QFontMetrics fm(font());
  const double right = std::max(kLeftPx + 40, width() - kRightPx);
  auto itemPx = [&](const ChartSeries& s) {
    return kSwatchPx + kSwatchGapPx + fm.horizontalAdvance(s.name) + 2;
  };
  double oneRowPx = -kItemGapPx;
  for (const ChartSeries& s : m_series) oneRowPx += itemPx(s) + kItemGapPx;
  const double left = kLeftPx + oneRowPx <= right ? kLeftPx : kNarrowLeftPx;
  double x = left, y = top;
  for (const ChartSeries& s : m_series) {
    const double w = itemPx(s);
    if (x > left && x + w > right) {
      x = left;
      y += fm.height();
    }
    items.emplace_back(x, y, w, fm.height());
    x += w + kItemGapPx;
  }
  const double plotPx = height() - (items.back().bottom() + 8) - kBottomPx;
  if (y == top || plotPx >= kMinPlotPx) return items;
  // One row: each item narrowed in proportion to its natural width.
  const double n = double(items.size()), gap = kItemGapPx / 2;
  double naturalPx = 0;
  for (const QRectF& item : items) naturalPx += item.width();
  const double scale = std::min(1.0, (right - kNarrowLeftPx - gap * (n - 1)) / naturalPx);
  x = kNarrowLeftPx;
  for (QRectF& item : items) {
    const double w = std::max(12.0, item.width() * scale);
    item = QRectF(x, top, w, fm.height());
    x += w + gap;
  }
  return items;
}

bool ChartView::headerElided() const {
  if (m_titleShown != m_title || m_unitShown != m_yTitle) return true;
  const std::vector<QRectF> items = legendItems(m_headerBottom);
  const QFontMetrics fm(font());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto [swatch, gap] = swatchPx(items[i], m_series[i].name, fm);
    if (fm.horizontalAdvance(m_series[i].name) + 2 > items[i].width() - swatch - gap) return true;
  }
  return false;
}

QString ChartView::headerText() const {
  QStringList lines = {m_title, m_yTitle};
  for (const ChartSeries& s : m_series) {
    if (!s.name.isEmpty()) lines << QStringLiteral("- ") + s.name;
  }
  lines.removeAll(QString());
  return lines.join(QLatin1Char('\n'));
}

void ChartView::paintHeader(QPainter& p) const {
  const int flags = Qt::AlignLeft | Qt::AlignVCenter | Qt::TextDontClip;
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  p.setPen(theme::text());
  p.drawText(m_titleRect, flags, m_titleShown);
  p.setFont(font());
  p.setPen(theme::dimText());
  p.drawText(m_unitRect, flags, m_unitShown);
}

void ChartView::paintLegend(QPainter& p) const {
  const std::vector<QRectF> items = legendItems(m_headerBottom);
  const QFontMetrics fm(font());
  p.save();
  for (size_t i = 0; i < items.size(); ++i) {
    const ChartSeries& s = m_series[i];
    const QRectF& box = items[i];
    const double y = std::round(box.center().y()) + 0.5;
    const auto [swatch, gap] = swatchPx(box, s.name, fm);
    p.setPen(seriesPen(s, 3));
    p.drawLine(QPointF(box.left(), y), QPointF(box.left() + swatch, y));
    p.setPen(theme::dimText());
    const QRectF name = box.adjusted(swatch + gap, 0, 0, 0);
    p.drawText(name, Qt::AlignLeft | Qt::AlignVCenter,
               fm.elidedText(s.name, Qt::ElideRight, int(name.width())));
  }
  p.restore();
}

}  // namespace moewb::gui
