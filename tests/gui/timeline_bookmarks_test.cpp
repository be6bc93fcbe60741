// Bookmarks drawn on the timeline in a real window (offscreen): each bookmark in the window is a
// line over the lanes and a named flag at the top of the ruler in the bookmark colour; the
// flag's pixel hit-tests to its bookmark, hovering it gives the name, clicking it zooms to the
// bookmark as the Bookmarks dock does; a bookmark at a config change's time leaves the config
// marker's line and flag visible (drawn over it, in their own colour).
#include <gtest/gtest.h>

#include <QApplication>
#include <QImage>
#include <QListView>
#include <QSettings>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "main_window.h"
#include "moewb/gui/bookmark_model.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

using moewb::gui::testing::TestTrace;

int64_t stepStart(int64_t step) {
  return TestTrace::kOriginNs + step * TestTrace::kStepNs;
}

class TimelineBookmarksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
    theme::apply(*qApp);
    const QString path = m_dir.filePath(QStringLiteral("run.sqlite"));
    auto trace = TestTrace::create(path.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk());
    (*trace)->addConfigChange(5, "optim.lr", "0.003", "0.001");
    for (int64_t s = 0; s < 12; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
    ASSERT_TRUE((*trace)->finish().isOk());
    m_window.setErrorDialogsEnabled(false);
    m_window.resize(1280, 720);
    m_window.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&m_window));
    ASSERT_TRUE(m_window.openFile(path).isOk());
    QApplication::processEvents();
    // 0: at the config change (step 5's start); 1: a range over step 8, made zoomed to 7-10.
    m_window.bookmarkModel()->add({QStringLiteral("lr drop"), stepStart(5), stepStart(5),
                                   stepStart(4), stepStart(6), 5});
    m_window.bookmarkModel()->add({QStringLiteral("slow step 8"), stepStart(8), stepStart(9),
                                   stepStart(7), stepStart(10), 8});
    m_window.timelineView()->fitAll();
    QApplication::processEvents();
  }
  QTemporaryDir m_dir;
  MainWindow m_window;
};

TEST_F(TimelineBookmarksTest, FlagsAreDrawnHitTestedAndClickedThrough) {
  TimelineView* timeline = m_window.timelineView();
  const std::vector<BookmarkFlag>& flags = timeline->bookmarkFlags();
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_EQ(flags[0].row, 0);
  EXPECT_EQ(flags[1].row, 1);
  EXPECT_EQ(flags[1].label, QStringLiteral("slow step 8"));
  EXPECT_GT(flags[1].endX, flags[1].x);  // a range: its span in the ruler
  const QRect box = timeline->bookmarkFlagRect(1);
  ASSERT_FALSE(box.isEmpty());
  EXPECT_LT(box.bottom(), 20);  // in the ruler's top band, above the config flags
  // The flag's pixels hit-test to the bookmark; off the flag, nothing.
  EXPECT_EQ(timeline->bookmarkAt(box.center()), 1);
  EXPECT_EQ(timeline->bookmarkAt(box.topLeft() + QPoint(1, 1)), 1);
  EXPECT_EQ(timeline->bookmarkAt(box.center() + QPoint(0, 40)), -1);  // in the lanes
  EXPECT_EQ(timeline->bookmarkAt(timeline->bookmarkFlagRect(0).center()), 0);
  const QString tip = timeline->bookmarkText(1);
  EXPECT_TRUE(tip.contains(QStringLiteral("slow step 8"))) << tip.toStdString();
  EXPECT_TRUE(tip.contains(QStringLiteral("<br>step 8<br>"))) << tip.toStdString();
  // Drawn in the bookmark colour, which is not the config markers'.
  EXPECT_NE(theme::bookmark(), theme::marker());
  const QImage image = timeline->grab().toImage();
  // MOEWB_BOOKMARKS_SCREENSHOT=OUT.png saves the timeline as tested (to look at the flags).
  if (const QString out = qEnvironmentVariable("MOEWB_BOOKMARKS_SCREENSHOT"); !out.isEmpty()) {
    EXPECT_TRUE(image.save(out));
  }
  EXPECT_EQ(QColor(image.pixel(box.left() + 1, box.top() + 1)), theme::bookmark());
  // Bookmark 0 sits on the config change: the marker's line and flag keep their colour.
  ASSERT_EQ(timeline->configMarkers().size(), 1u);
  const int markerX = box.left() - int(std::lround(flags[1].x)) +
                      int(std::lround(timeline->configMarkers()[0].x));
  EXPECT_EQ(std::lround(timeline->configMarkers()[0].x), std::lround(flags[0].x));
  EXPECT_EQ(QColor(image.pixel(markerX, 40)), theme::marker());  // its line in the lanes
  EXPECT_EQ(QColor(image.pixel(markerX, 23)), theme::marker());  // its flag in the ruler
  EXPECT_EQ(QColor(image.pixel(markerX + 1, 21)), theme::marker());
  EXPECT_GE(timeline->configMarkerAt(QPoint(markerX, 40)), 0);
  // Bookmark 1's line over the lanes (dashed: some of these pixels are on).
  const int lineX = box.left();
  int on = 0;
  for (int y = 40; y < 70; ++y) on += QColor(image.pixel(lineX, y)) == theme::bookmark();
  EXPECT_GE(on, 10);
  // Clicking the flag zooms to the bookmark's window and selects its range, as the dock does.
  QTest::mouseClick(timeline, Qt::LeftButton, {}, box.center());
  QApplication::processEvents();
  EXPECT_EQ(timeline->timeGeometry().startNs, stepStart(7));
  EXPECT_EQ(timeline->timeGeometry().endNs, stepStart(10));
  ASSERT_TRUE(timeline->selectedRange().has_value());
  EXPECT_EQ(*timeline->selectedRange(), (TimeRange{stepStart(8), stepStart(9)}));
  EXPECT_EQ(m_window.bookmarkList()->currentIndex().row(), 1);
  // Zoomed there, the flags are laid out for the new window: bookmark 0 is outside it.
  ASSERT_EQ(timeline->bookmarkFlags().size(), 1u);
  EXPECT_EQ(timeline->bookmarkFlags()[0].row, 1);
  // Removing the bookmark removes its flag.
  ASSERT_TRUE(m_window.bookmarkModel()->remove(1));
  EXPECT_TRUE(timeline->bookmarkFlags().empty());
}

}  // namespace
}  // namespace moewb::gui
