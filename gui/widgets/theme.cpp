// Dark theme: palette for the stock widgets plus the colours of the custom-painted views.
#include "theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyleFactory>
#include <array>

namespace moewb::gui::theme {

QColor window() {
  return QColor(0x23, 0x26, 0x2e);
}
QColor base() {
  return QColor(0x1a, 0x1c, 0x22);
}
QColor alternate() {
  return QColor(0x20, 0x23, 0x2a);
}
QColor gridLine() {
  return QColor(0x33, 0x37, 0x41);
}
QColor axisLine() {
  return QColor(0x5a, 0x60, 0x6e);
}
QColor text() {
  return QColor(0xdc, 0xdf, 0xe4);
}
QColor dimText() {
  return QColor(0x9a, 0xa0, 0xac);
}
QColor accent() {
  return QColor(0x4d, 0xa3, 0xff);
}

QColor marker() {
  return QColor(0xff, 0x6e, 0xc7);
}

QColor bookmark() {
  return QColor(0x3e, 0xe6, 0xc1);
}

QColor series(int i) {
  static constexpr std::array<QRgb, 4> kSeries = {0x4da3ff, 0xf2a541, 0x6cc57c, 0xe86a6a};
  return QColor::fromRgb(kSeries[size_t(i) % kSeries.size()]);
}

void apply(QApplication& app) {
  app.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p;
  p.setColor(QPalette::Window, window());
  p.setColor(QPalette::WindowText, text());
  p.setColor(QPalette::Base, base());
  p.setColor(QPalette::AlternateBase, alternate());
  p.setColor(QPalette::ToolTipBase, QColor(0x2b, 0x2f, 0x38));
  p.setColor(QPalette::ToolTipText, text());
  p.setColor(QPalette::PlaceholderText, dimText());
  p.setColor(QPalette::Text, text());
  p.setColor(QPalette::Button, QColor(0x2d, 0x31, 0x3a));
  p.setColor(QPalette::ButtonText, text());
  p.setColor(QPalette::BrightText, Qt::white);
  p.setColor(QPalette::Highlight, accent().darker(140));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, accent());
  p.setColor(QPalette::Mid, gridLine());
  p.setColor(QPalette::Dark, base());
  p.setColor(QPalette::Disabled, QPalette::Text, dimText().darker(130));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, dimText().darker(130));
  p.setColor(QPalette::Disabled, QPalette::WindowText, dimText().darker(130));
  app.setPalette(p);
  app.setStyleSheet(QStringLiteral(
      "QToolTip { color: #dcdfe4; background-color: #2b2f38; border: 1px solid #5a606e; }"
      "QDockWidget::title { background: #2d313a; padding: 4px; }"
      "QHeaderView::section { background: #2d313a; color: #dcdfe4; padding: 3px;"
      " border: none; border-right: 1px solid #23262e; }"));
}

}  // namespace moewb::gui::theme
