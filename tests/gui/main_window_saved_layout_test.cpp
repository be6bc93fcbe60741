// Saved window layout (issue 18): with QSettings pointed at a temporary folder, a window that
// used the saved layout writes its geometry and dock state when it closes and a new window
// restores them (a dock moved to the left and a hidden dock stay so); View > Reset layout puts the
// default layout back; a garbage or foreign (other version) saved state is ignored and the
// default layout used; a window that never asked for the saved layout writes nothing.
#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QMenu>
#include <QMenuBar>
#include <QSettings>
#include <QTemporaryDir>

#include "main_window.h"
#include "theme.h"

namespace moewb::gui {
namespace {

constexpr char kOrganisation[] = "MoE Workbench";
constexpr char kApplication[] = "moewb-gui";

QDockWidget* dockNamed(MainWindow& window, const char* name) {
  for (QDockWidget* d : window.findChildren<QDockWidget*>()) {
    if (d->objectName() == QLatin1String(name)) return d;
  }
  return nullptr;
}

QAction* menuAction(MainWindow& window, const QString& text) {
  for (QAction* menu : window.menuBar()->actions()) {
    if (!menu->menu()) continue;
    for (QAction* a : menu->menu()->actions()) {
      if (a->text() == text) return a;
    }
  }
  return nullptr;
}

class SavedLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    // Never the user's real settings: every format's user scope goes to the temporary folder.
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
    QSettings s{QLatin1String(kOrganisation), QLatin1String(kApplication)};
    ASSERT_TRUE(s.fileName().startsWith(m_dir.path())) << s.fileName().toStdString();
    theme::apply(*qApp);
  }
  QTemporaryDir m_dir;
};

// The default layout, in a shown window: Phase summary on the right, Steps visible.
void expectDefaultLayout(MainWindow& window) {
  QDockWidget* phases = dockNamed(window, "phases");
  QDockWidget* steps = dockNamed(window, "steps");
  ASSERT_NE(phases, nullptr);
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(window.dockWidgetArea(phases), Qt::RightDockWidgetArea);
  EXPECT_TRUE(steps->isVisible());
  EXPECT_FALSE(dockNamed(window, "live control")->isVisible());
}

// Moves Phase summary to the left and hides Steps.
void changeLayout(MainWindow& window) {
  window.addDockWidget(Qt::LeftDockWidgetArea, dockNamed(window, "phases"));
  dockNamed(window, "steps")->hide();
  QApplication::processEvents();
}

TEST_F(SavedLayout, AMovedAndAHiddenDockStaySoInANewWindow) {
  {
    MainWindow first;
    first.setErrorDialogsEnabled(false);
    EXPECT_FALSE(first.useSavedLayout());  // nothing saved yet
    first.show();
    QApplication::processEvents();
    expectDefaultLayout(first);
    changeLayout(first);
    first.close();  // saves
  }
  QSettings s{QLatin1String(kOrganisation), QLatin1String(kApplication)};
  EXPECT_FALSE(s.value(QLatin1String(MainWindow::kStateKey)).toByteArray().isEmpty());
  EXPECT_FALSE(s.value(QLatin1String(MainWindow::kGeometryKey)).toByteArray().isEmpty());

  MainWindow second;
  second.setErrorDialogsEnabled(false);
  EXPECT_TRUE(second.useSavedLayout());
  second.show();
  QApplication::processEvents();
  EXPECT_EQ(second.dockWidgetArea(dockNamed(second, "phases")), Qt::LeftDockWidgetArea);
  EXPECT_FALSE(dockNamed(second, "steps")->isVisible());
  EXPECT_TRUE(dockNamed(second, "phases")->isVisible());

  // A window that does not use the saved layout still starts with the default one.
  MainWindow plain;
  plain.show();
  QApplication::processEvents();
  expectDefaultLayout(plain);
}

TEST_F(SavedLayout, ResetLayoutPutsTheDefaultBack) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  QApplication::processEvents();
  changeLayout(window);
  EXPECT_EQ(window.dockWidgetArea(dockNamed(window, "phases")), Qt::LeftDockWidgetArea);
  EXPECT_FALSE(dockNamed(window, "steps")->isVisible());
  QAction* reset = menuAction(window, QStringLiteral("&Reset layout"));
  ASSERT_NE(reset, nullptr);
  reset->trigger();
  QApplication::processEvents();
  expectDefaultLayout(window);
}

TEST_F(SavedLayout, AGarbageOrForeignSavedStateIsIgnored) {
  {
    QSettings s{QLatin1String(kOrganisation), QLatin1String(kApplication)};
    s.setValue(QLatin1String(MainWindow::kGeometryKey), QByteArray("not a geometry at all"));
    s.setValue(QLatin1String(MainWindow::kStateKey), QByteArray("\x00\x00\x00\xffgarbage", 11));
  }
  {
    MainWindow window;
    window.setErrorDialogsEnabled(false);
    EXPECT_FALSE(window.useSavedLayout());
    window.show();
    QApplication::processEvents();
    expectDefaultLayout(window);
  }
  // A real state of another layout version (e.g. written by a later release) is refused too.
  {
    MainWindow other;
    changeLayout(other);
    QSettings s{QLatin1String(kOrganisation), QLatin1String(kApplication)};
    s.setValue(QLatin1String(MainWindow::kStateKey),
               other.saveState(MainWindow::kLayoutVersion + 1));
    s.remove(QLatin1String(MainWindow::kGeometryKey));
  }
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  EXPECT_FALSE(window.useSavedLayout());
  window.show();
  QApplication::processEvents();
  expectDefaultLayout(window);
}

TEST_F(SavedLayout, AWindowThatDidNotAskWritesNothing) {
  {
    MainWindow window;
    window.show();
    changeLayout(window);
    window.close();
  }
  QSettings s{QLatin1String(kOrganisation), QLatin1String(kApplication)};
  EXPECT_FALSE(s.contains(QLatin1String(MainWindow::kStateKey)));
  EXPECT_FALSE(s.contains(QLatin1String(MainWindow::kGeometryKey)));
}

}  // namespace
}  // namespace moewb::gui
