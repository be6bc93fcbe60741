// GoogleTest main for the GUI suites: forces the offscreen platform before the Qt application
// object exists (so the tests need no display), then runs every test on the GUI thread.
// Built with MOEWB_GUI_TEST_WIDGETS for suites that need QApplication (widgets).
#include <gtest/gtest.h>

#ifdef MOEWB_GUI_TEST_WIDGETS
#include <QApplication>
using TestApplication = QApplication;
#else
#include <QGuiApplication>
using TestApplication = QGuiApplication;
#endif

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  ::testing::InitGoogleTest(&argc, argv);
  TestApplication app(argc, argv);
  return RUN_ALL_TESTS();
}
