// Window layout (issue 18): the Live control dock stays hidden until a run is live, and the
// window fits 1280x720 with every dock shown (docks tabbed, charts and panels shrinkable).
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QTest>

#include "main_window.h"
#include "theme.h"

namespace moewb::gui {
namespace {

QDockWidget* dockNamed(MainWindow& window, const char* name) {
  for (QDockWidget* d : window.findChildren<QDockWidget*>()) {
    if (d->objectName() == QLatin1String(name)) return d;
  }
  return nullptr;
}

TEST(MainWindowLayout, LiveControlDockIsHiddenUntilARunIsLive) {
  theme::apply(*qApp);
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  QDockWidget* live = dockNamed(window, "live control");
  ASSERT_NE(live, nullptr);
  EXPECT_FALSE(live->isVisible());
  window.resize(1280, 720);
  QApplication::processEvents();
  EXPECT_FALSE(live->isVisible());
  // It can still be shown from the View menu.
  live->toggleViewAction()->trigger();
  EXPECT_TRUE(live->isVisible());
}

TEST(MainWindowLayout, FitsA1280x720ScreenWithEveryDock) {
  theme::apply(*qApp);
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  for (QDockWidget* d : window.findChildren<QDockWidget*>()) d->show();
  QApplication::processEvents();
  const QSize min = window.minimumSizeHint().expandedTo(window.minimumSize());
  std::printf("minimum size with every dock: %dx%d\n", min.width(), min.height());
  if (min.width() > 1280 || min.height() > 720) {
    const QSize c = window.centralWidget()->minimumSizeHint();
    std::printf("  central %dx%d\n", c.width(), c.height());
    for (QDockWidget* d : window.findChildren<QDockWidget*>()) {
      const QSize m = d->minimumSizeHint();
      std::printf("  %s %dx%d\n", qPrintable(d->objectName()), m.width(), m.height());
    }
  }
  EXPECT_LE(min.width(), 1280);
  EXPECT_LE(min.height(), 720);
  window.resize(1280, 720);
  QApplication::processEvents();
  EXPECT_LE(window.width(), 1280);
  EXPECT_LE(window.height(), 720);
  for (QDockWidget* d : window.findChildren<QDockWidget*>()) {
    EXPECT_TRUE(d->features() & QDockWidget::DockWidgetMovable) << d->objectName().toStdString();
  }
}

}  // namespace
}  // namespace moewb::gui
