// Window layout (issue 18): the Live control dock stays hidden until a run is live, and the
// window fits 1280x720 with every dock shown (docks tabbed, charts and panels shrinkable), also
// with each dock raised in turn on real traces: a 4-rank engine run (the Parallelism dock with
// its matrix and tables filled, the Step breakdown's rank choice) and a trace with GPU capture,
// swap rows, config changes and bookmarks.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QSettings>
#include <QTemporaryDir>
#include <QTest>

#include "main_window.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/step_breakdown_model.h"
#include "parallel_trace.h"
#include "test_trace.h"
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

// Opens `path` in a 1280x720 window, then raises every dock in turn (each shown), asserting the
// window's minimum size fits 1280x720 with each one on top; prints the docks' minimum widths
// when it does not.
void expectEveryDockFits(const QString& path) {
  theme::apply(*qApp);
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1280, 720);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  ASSERT_TRUE(window.openFile(path).isOk());
  window.bookmarkModel()->add({QStringLiteral("a bookmark with a rather long name"), 0, 0, 0, 1,
                               -1});
  ASSERT_TRUE(QTest::qWaitFor([&] { return !window.breakdownModel()->isBusy(); }, 20'000));
  QApplication::processEvents();
  const QList<QDockWidget*> docks = window.findChildren<QDockWidget*>();
  ASSERT_GE(docks.size(), 8);
  for (QDockWidget* dock : docks) {
    dock->show();
    dock->raise();
    QApplication::processEvents();
    const QSize min = window.minimumSizeHint().expandedTo(window.minimumSize());
    EXPECT_LE(min.width(), 1280) << dock->objectName().toStdString();
    EXPECT_LE(min.height(), 720) << dock->objectName().toStdString();
    if (min.width() > 1280 || min.height() > 720) {
      std::printf("with %s raised: %dx%d\n", qPrintable(dock->objectName()), min.width(),
                  min.height());
      for (QDockWidget* d : docks) {
        const QSize m = d->minimumSizeHint();
        std::printf("  %s %dx%d\n", qPrintable(d->objectName()), m.width(), m.height());
      }
    }
  }
  window.resize(1280, 720);
  QApplication::processEvents();
  EXPECT_LE(window.width(), 1280);
  EXPECT_LE(window.height(), 720);
}

class MainWindowFit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
  }
  QTemporaryDir m_dir;
};

TEST_F(MainWindowFit, EveryDockOnAFourRankRunFits1280x720) {
  const QString path = m_dir.filePath(QStringLiteral("ep4.sqlite"));
  const Status written = moewb::testing::writeParallelTrace(path.toStdString(), 4, 4, 3);
  ASSERT_TRUE(written.isOk()) << written.toString();
  expectEveryDockFits(path);
}

TEST_F(MainWindowFit, EveryDockOnAGpuSwapTraceFits1280x720) {
  using moewb::gui::testing::TestTrace;
  const QString path = m_dir.filePath(QStringLiteral("gpu.sqlite"));
  auto trace = TestTrace::create(path.toStdString(), 3, 8);
  ASSERT_TRUE(trace.isOk());
  (*trace)->setMemoryCounters(true);
  (*trace)->setDeviceMemory(true);
  (*trace)->setGpuActivity(true);
  (*trace)->setSwap(true);
  (*trace)->addConfigChange(2, "optim.lr", "0.003", "0.001");
  for (int64_t s = 0; s < 5; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE((*trace)->finish().isOk());
  expectEveryDockFits(path);
}

}  // namespace
}  // namespace moewb::gui
