// The Step breakdown dock, View > Follow last N steps and bookmarks in a real window (offscreen)
// driven with QTest: hovering a bar reads out its step's parts in ms and %, clicking it selects
// the step in the Steps table and zooms the timeline to it; follow mode keeps the timeline and
// the charts on the last N steps of a growing trace until a wheel zoom turns it off (status bar);
// Ctrl+B and M add named bookmarks through the name dialog, a new window on the same file has
// them back (from the Qt settings, pointed at a temporary folder; the trace's bytes unchanged)
// and clicking one zooms there.
#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QCryptographicHash>
#include <QDockWidget>
#include <QFile>
#include <QInputDialog>
#include <QLineEdit>
#include <QListView>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QWheelEvent>
#include <cmath>

#include "chart_view.h"
#include "main_window.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/step_breakdown_model.h"
#include "step_breakdown_view.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_search_bar.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

using moewb::gui::testing::TestTrace;

class StepViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
    m_path = m_dir.filePath(QStringLiteral("run.sqlite"));
    theme::apply(*qApp);
  }
  // A window of 1280x720 showing `path`, loaded.
  std::unique_ptr<MainWindow> openWindow() {
    auto window = std::make_unique<MainWindow>();
    window->setErrorDialogsEnabled(false);
    window->resize(1280, 720);
    window->show();
    EXPECT_TRUE(QTest::qWaitForWindowExposed(window.get()));
    EXPECT_TRUE(window->openFile(m_path).isOk());
    return window;
  }
  static int64_t stepStart(int64_t step) {
    return TestTrace::kOriginNs + step * TestTrace::kStepNs;
  }
  // The name dialog Ctrl+B / M opened, once it is there.
  static QInputDialog* nameDialog(MainWindow& window) {
    QInputDialog* dialog = nullptr;
    const bool shown = QTest::qWaitFor([&] {
      // A dialog accepted before is hidden and deleted later: take the visible one.
      for (QInputDialog* d : window.findChildren<QInputDialog*>(QStringLiteral("bookmark name"))) {
        if (d->isVisible()) dialog = d;
      }
      return dialog != nullptr;
    }, 5'000);
    return shown ? dialog : nullptr;
  }
  QTemporaryDir m_dir;
  QString m_path;
};

TEST_F(StepViewsTest, BreakdownHoverReadsOutTheStepAndAClickSelectsIt) {
  auto trace = TestTrace::create(m_path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 12; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE((*trace)->finish().isOk());
  auto window = openWindow();
  window->breakdownDock()->show();
  window->breakdownDock()->raise();
  StepBreakdownModel* model = window->breakdownModel();
  ASSERT_TRUE(QTest::qWaitFor([&] { return model->data().steps.size() == 12; }, 10'000));
  QApplication::processEvents();
  StepBreakdownView* view = window->breakdownView();
  ASSERT_TRUE(view->isVisible());
  ASSERT_EQ(view->columns().size(), 12u);  // one bar per step
  EXPECT_TRUE(view->sourceText().contains(QStringLiteral("host phases")));
  const QRectF plot = view->plotRect();
  const BreakdownColumn& bar = view->columns()[5];
  const QPoint at(int(plot.left() + (bar.x0 + bar.x1) / 2), int(plot.bottom() - 3));
  QTest::mouseMove(view, at);
  const QString text = view->hoverText(at);
  EXPECT_TRUE(text.startsWith(QStringLiteral("step 5: 2.00 ms"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("experts: "))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("optimizer: 0.200 ms (10.0%)"))) << text.toStdString();
  QTest::mouseClick(view, Qt::LeftButton, {}, at);
  QApplication::processEvents();
  const QModelIndexList rows = window->stepTable()->selectionModel()->selectedRows();
  ASSERT_EQ(rows.size(), 1);
  EXPECT_EQ(rows.front().row(), 5);
  const TimelineGeometry& g = window->timelineView()->timeGeometry();
  EXPECT_LE(g.startNs, stepStart(5));
  EXPECT_GE(g.endNs, stepStart(6));
  EXPECT_LT(g.durNs(), 2 * TestTrace::kStepNs);
}

TEST(StepBreakdownView, TwoHundredThousandStepsDrawOneBarPerPixelColumn) {
  StepBreakdownSet set;
  set.source = BreakdownSource::kGpuKernels;
  set.steps.resize(200'000);
  for (size_t i = 0; i < set.steps.size(); ++i) {
    StepBreakdown& b = set.steps[i];
    b.step = int64_t(i);
    b.durNs = i == 123'456 ? 50'000'000 : 10'000'000;  // one slow step
    b.ns[size_t(TimeCategory::kExperts)] = b.durNs - 4'000'000;
    b.ns[size_t(TimeCategory::kGpuIdle)] = 4'000'000;
  }
  StepBreakdownView view;
  view.resize(640, 260);
  view.setData(set);
  view.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&view));
  const QRectF plot = view.plotRect();
  ASSERT_EQ(view.columns().size(), size_t(std::floor(plot.width())));
  EXPECT_TRUE(view.sourceText().contains(QStringLiteral("GPU kernels")));
  // The column holding the slow step: its hover names the range and the slow step, and a click
  // selects that step.
  size_t spike = 0;
  while (view.columns()[spike].last < 123'456) ++spike;
  const BreakdownColumn& c = view.columns()[spike];
  const QPoint at(int(plot.left() + (c.x0 + c.x1) / 2), int(plot.bottom() - 2));
  const QString text = view.hoverText(at);
  EXPECT_TRUE(text.contains(QStringLiteral("slowest: step 123456, 50.00 ms")))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("GPU idle: 4.00 ms (39.5%)\nexperts: 6.11 ms (60.5%)")))
      << text.toStdString();
  QSignalSpy clicked(&view, &StepBreakdownView::stepClicked);
  QTest::mouseClick(&view, Qt::LeftButton, {}, at);
  ASSERT_EQ(clicked.count(), 1);
  EXPECT_EQ(clicked.front().front().toLongLong(), 123'456);
  // A step window (follow mode) lays out only its steps.
  view.setStepWindow(std::make_pair(int64_t(199'990), int64_t(199'999)));
  ASSERT_EQ(view.columns().size(), 10u);
  EXPECT_EQ(set.steps[view.columns().front().first].step, 199'990);
}

TEST_F(StepViewsTest, FollowKeepsTheLastStepsUntilAManualZoom) {
  auto trace = TestTrace::create(m_path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 10; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  auto window = openWindow();
  EXPECT_EQ(window->followStepsBox()->value(), 50);  // the default N
  window->followStepsBox()->setValue(4);
  window->followAction()->trigger();  // View > Follow last N steps
  ASSERT_TRUE(window->isFollowing());
  TimelineView* timeline = window->timelineView();
  auto expectLast4 = [&](int64_t last) {
    const TimelineGeometry& g = timeline->timeGeometry();
    EXPECT_EQ(g.startNs, stepStart(last - 3)) << "last step " << last;
    EXPECT_EQ(g.endNs, stepStart(last + 1)) << "last step " << last;
    const auto x = window->lossChart()->xWindow();
    ASSERT_TRUE(x.has_value());
    EXPECT_EQ(x->first, double(last - 3));
    EXPECT_EQ(x->second, double(last));
    EXPECT_EQ(window->stepTimeChart()->xWindow(), x);
  };
  expectLast4(9);
  // The run goes on: each refresh moves the window to the new last four steps.
  for (int64_t s = 10; s < 13; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE(window->document()->refresh().isOk());
  QApplication::processEvents();
  expectLast4(12);
  ASSERT_TRUE(window->isFollowing());
  // A wheel zoom by hand turns following off and says so; later steps leave the window alone.
  const QPointF at(timeline->width() - timeline->timeGeometry().widthPx / 2, 60);
  QWheelEvent wheel(at, timeline->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(timeline, &wheel);
  EXPECT_FALSE(window->isFollowing());
  EXPECT_FALSE(window->followAction()->isChecked());
  EXPECT_TRUE(window->statusBar()->currentMessage().contains(QStringLiteral("is off")))
      << window->statusBar()->currentMessage().toStdString();
  EXPECT_FALSE(window->lossChart()->xWindow().has_value());  // the charts show every step again
  const TimelineGeometry zoomed = timeline->timeGeometry();
  for (int64_t s = 13; s < 15; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE(window->document()->refresh().isOk());
  QApplication::processEvents();
  EXPECT_EQ(timeline->timeGeometry().startNs, zoomed.startNs);
  EXPECT_EQ(timeline->timeGeometry().endNs, zoomed.endNs);
}

TEST_F(StepViewsTest, BookmarksAreNamedKeptBesideTheTraceAndZoomBack) {
  auto trace = TestTrace::create(m_path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 10; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE((*trace)->finish().isOk());
  auto hash = [this] {
    QFile f(m_path);
    EXPECT_TRUE(f.open(QIODevice::ReadOnly));
    return QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256);
  };
  const QByteArray before = hash();
  const TimeRange step3{stepStart(3), stepStart(4)};
  TimelineGeometry secondWindow;
  {
    auto window = openWindow();
    TimelineView* timeline = window->timelineView();
    // 1: Ctrl+B on the range selection of step 3, named in the dialog.
    timeline->setSelectedRange(step3);
    QTest::keyClick(window.get(), Qt::Key_B, Qt::ControlModifier);
    QInputDialog* dialog = nameDialog(*window);
    ASSERT_NE(dialog, nullptr);
    dialog->setTextValue(QStringLiteral("slow step 3"));
    dialog->accept();
    QApplication::processEvents();
    // 2: M on the timeline with no selection, zoomed to step 7; the default name is kept.
    timeline->setSelectedRange(std::nullopt);
    timeline->showTimeRange({stepStart(7), stepStart(8)});
    secondWindow = timeline->timeGeometry();
    window->activateWindow();
    ASSERT_TRUE(QTest::qWaitForWindowActive(window.get()));
    timeline->setFocus();
    QTest::keyClick(timeline, Qt::Key_M);
    dialog = nameDialog(*window);
    ASSERT_NE(dialog, nullptr);
    EXPECT_TRUE(dialog->textValue().startsWith(QStringLiteral("step 7, +")))
        << dialog->textValue().toStdString();
    dialog->accept();
    QApplication::processEvents();
    ASSERT_EQ(window->bookmarkModel()->rowCount(), 2);
    EXPECT_TRUE(window->bookmarkDock()->isVisible());
  }
  // A new window on the same file has them back; clicking the first zooms to step 3's window
  // and selects its range again.
  auto window = openWindow();
  BookmarkModel* bookmarks = window->bookmarkModel();
  ASSERT_EQ(bookmarks->rowCount(), 2);
  EXPECT_EQ(bookmarks->bookmarks()[0].name, QStringLiteral("slow step 3"));
  EXPECT_EQ(bookmarks->bookmarks()[0].step, 3);
  EXPECT_EQ(bookmarks->bookmarks()[1].step, 7);
  TimelineView* timeline = window->timelineView();
  timeline->fitAll();
  window->bookmarkDock()->show();
  window->bookmarkDock()->raise();
  QApplication::processEvents();
  QListView* list = window->bookmarkList();
  QTest::mouseClick(list->viewport(), Qt::LeftButton, {},
                    list->visualRect(bookmarks->index(0)).center());
  QApplication::processEvents();
  ASSERT_TRUE(timeline->selectedRange().has_value());
  EXPECT_EQ(*timeline->selectedRange(), step3);
  EXPECT_LE(timeline->timeGeometry().startNs, step3.startNs);
  EXPECT_GE(timeline->timeGeometry().endNs, step3.endNs);
  QTest::mouseClick(list->viewport(), Qt::LeftButton, {},
                    list->visualRect(bookmarks->index(1)).center());
  QApplication::processEvents();
  EXPECT_EQ(timeline->timeGeometry().startNs, secondWindow.startNs);
  EXPECT_EQ(timeline->timeGeometry().endNs, secondWindow.endNs);
  EXPECT_EQ(hash(), before);  // nothing written into the trace
  // M typed into the timeline's search field is text, not a bookmark.
  window->activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(window.get()));
  timeline->openSearch();
  QLineEdit* field = timeline->searchBar()->findChild<QLineEdit*>();
  ASSERT_NE(field, nullptr);
  QTest::keyClicks(field, QStringLiteral("mm"));
  QApplication::processEvents();
  EXPECT_EQ(field->text(), QStringLiteral("mm"));
  for (QInputDialog* d : window->findChildren<QInputDialog*>()) EXPECT_FALSE(d->isVisible());
}

// With MOEWB_BREAKDOWN_SCREENSHOT=OUT.png (and MOEWB_BREAKDOWN_TRACE=FILE, else a test trace),
// saves the window at 1280x720 with the Step breakdown dock raised, e.g. for the README.
TEST_F(StepViewsTest, BreakdownScreenshotOnRequest) {
  const QByteArray out = qgetenv("MOEWB_BREAKDOWN_SCREENSHOT");
  if (out.isEmpty()) GTEST_SKIP() << "set MOEWB_BREAKDOWN_SCREENSHOT=OUT.png to save one";
  const QByteArray trace = qgetenv("MOEWB_BREAKDOWN_TRACE");
  if (trace.isEmpty()) {
    auto written = TestTrace::create(m_path.toStdString(), 2, 4);
    ASSERT_TRUE(written.isOk());
    (*written)->setGpuActivity(true);
    for (int64_t s = 0; s < 40; ++s) ASSERT_TRUE((*written)->addStep(s).isOk());
    ASSERT_TRUE((*written)->finish().isOk());
  } else {
    m_path = QString::fromLocal8Bit(trace);
  }
  auto window = openWindow();
  window->breakdownDock()->show();
  window->breakdownDock()->raise();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !window->breakdownModel()->isBusy(); }, 60'000));
  QApplication::processEvents();
  StepBreakdownView* view = window->breakdownView();
  ASSERT_FALSE(view->columns().empty());
  const BreakdownColumn& c = view->columns().back();  // its readout leaves the first bars free
  QTest::mouseMove(view, QPoint(int(view->plotRect().left() + (c.x0 + c.x1) / 2),
                                int(view->plotRect().bottom() - 4)));
  QApplication::processEvents();
  ASSERT_TRUE(window->saveScreenshot(QString::fromLocal8Bit(out)));
}

}  // namespace
}  // namespace moewb::gui
