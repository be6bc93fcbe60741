// Opening a trace in a real window (offscreen) without blocking it: the window is up and painting
// before the trace is loaded, the status bar's progress reaches 100 %, Cancel during a slow open
// leaves an empty, usable window, an unreadable file gets a plain-language dialog, and the loss
// chart of a long run hovers to the nearest step through its decimated columns.
#include <gtest/gtest.h>

#include <QApplication>
#include <QMessageBox>
#include <QMouseEvent>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <fstream>

#include "chart_view.h"
#include "main_window.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

class MainWindowOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    m_file = m_dir.filePath(QStringLiteral("open.sqlite"));
    auto trace = testing::TestTrace::create(m_file.toStdString(), 4, 8);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    for (int s = 0; s < kSteps; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    m_perStep = trace.value()->slicesPerStep();
    ASSERT_TRUE(trace.value()->finish().isOk());
    theme::apply(*qApp);
  }
  // A load that takes a while: small chunks with a pause after each.
  static TraceLoadOptions slowLoad(int delayMs) {
    TraceLoadOptions options;
    options.slicesPerChunk = 32;
    options.sliceChunkDelay = std::chrono::milliseconds(delayMs);
    return options;
  }
  static constexpr int kSteps = 30;
  QTemporaryDir m_dir;
  QString m_file;
  int64_t m_perStep = 0;
};

TEST_F(MainWindowOpenTest, WindowPaintsBeforeTheTraceIsLoadedAndProgressReaches100) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1280, 720);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  window.document()->setLoadOptions(slowLoad(5));
  QSignalSpy progress(window.document(), &TraceDocument::loadProgress);
  QSignalSpy finished(&window, &MainWindow::openFinished);

  window.beginOpen(m_file);
  // beginOpen returned at once: nothing loaded yet, the progress bar and Cancel are showing and
  // the window still paints.
  EXPECT_TRUE(window.document()->isLoading());
  EXPECT_EQ(window.document()->timeline().sliceCount(), 0);
  EXPECT_TRUE(window.loadProgressBar()->isVisible());
  EXPECT_TRUE(window.cancelLoadButton()->isVisible());
  EXPECT_FALSE(window.grab().isNull());
  ASSERT_TRUE(
      QTest::qWaitFor([&] { return window.document()->timeline().sliceCount() > 0; }, 10'000));
  EXPECT_TRUE(window.document()->isLoading()) << "the load should still be running";
  EXPECT_GT(window.timelineView()->drawList().items.size(), 0u) << "partial data is drawn";

  ASSERT_TRUE(finished.wait(30'000));
  EXPECT_TRUE(finished.at(0).at(0).toBool());
  ASSERT_GE(progress.count(), 2);
  EXPECT_DOUBLE_EQ(progress.last().at(0).toDouble(), 1.0);
  EXPECT_EQ(window.loadProgressBar()->value(), 1000);
  EXPECT_FALSE(window.loadProgressBar()->isVisible());
  EXPECT_FALSE(window.cancelLoadButton()->isVisible());
  EXPECT_EQ(window.document()->timeline().sliceCount(), kSteps * m_perStep);
  EXPECT_EQ(window.document()->stepModel()->rowCount(), kSteps);
  EXPECT_EQ(window.timelineView()->timeGeometry().durNs(), kSteps * testing::TestTrace::kStepNs);
}

TEST_F(MainWindowOpenTest, CancelDuringASlowOpenLeavesAnEmptyUsableWindow) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1280, 720);
  window.show();
  window.document()->setLoadOptions(slowLoad(30));  // ~40 chunks: over a second
  QSignalSpy finished(&window, &MainWindow::openFinished);
  window.beginOpen(m_file);
  ASSERT_TRUE(
      QTest::qWaitFor([&] { return window.document()->timeline().sliceCount() > 0; }, 10'000));
  ASSERT_TRUE(window.cancelLoadButton()->isVisible());
  QTest::mouseClick(window.cancelLoadButton(), Qt::LeftButton);
  ASSERT_EQ(finished.count(), 1);
  EXPECT_FALSE(finished.at(0).at(0).toBool());
  EXPECT_FALSE(window.document()->isLoading());
  EXPECT_FALSE(window.document()->isOpen());
  EXPECT_EQ(window.document()->timeline().sliceCount(), 0);
  EXPECT_EQ(window.document()->stepModel()->rowCount(), 0);
  EXPECT_EQ(window.document()->expertLoadModel()->rowCount(), 0);
  EXPECT_TRUE(window.timelineView()->drawList().items.empty());
  EXPECT_TRUE(window.lossChart()->points().empty());
  EXPECT_EQ(window.windowTitle(), QStringLiteral("MoE Workbench"));
  EXPECT_FALSE(window.loadProgressBar()->isVisible());
  EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("cancelled")))
      << window.statusBar()->currentMessage().toStdString();
  EXPECT_TRUE(window.lastError().isEmpty()) << "a cancel is not an error";
  // The window is usable: the next open loads everything.
  window.document()->setLoadOptions({});
  ASSERT_TRUE(window.openFile(m_file).isOk());
  EXPECT_EQ(window.document()->timeline().sliceCount(), kSteps * m_perStep);
}

TEST_F(MainWindowOpenTest, AnUnreadableFileGetsAPlainLanguageDialog) {
  const QString junk = m_dir.filePath(QStringLiteral("junk.sqlite"));
  {
    std::ofstream out(junk.toStdString());
    out << "this is not an SQLite database, just some text that a user picked by mistake\n";
  }
  MainWindow window;  // dialogs on
  window.show();
  EXPECT_FALSE(window.openFile(junk).isOk());
  const QList<QMessageBox*> boxes = window.findChildren<QMessageBox*>();
  ASSERT_EQ(boxes.size(), 1);
  const QString text = boxes.front()->text();
  EXPECT_TRUE(text.contains(QStringLiteral("junk.sqlite"))) << text.toStdString();
  for (const char* code :
       {"data loss", "not found", "internal", "failed precondition", "invalid argument"}) {
    EXPECT_FALSE(text.startsWith(QString::fromLatin1(code))) << text.toStdString();
  }
  EXPECT_FALSE(text.contains(QStringLiteral(".cpp:"))) << text.toStdString();
  EXPECT_FALSE(text.at(0).isLower()) << text.toStdString();
  boxes.front()->close();
}

TEST(ChartViewHover, FindsTheNearestStepOfALongRunThroughDecimatedColumns) {
  ChartView chart;
  chart.resize(600, 240);
  chart.show();
  std::vector<QPointF> points;
  for (int s = 0; s < 200'000; ++s)
    points.emplace_back(double(s), std::sin(s * 1e-3) + (s == 123'457 ? 9 : 0));
  chart.setPoints(points);
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&chart));
  const std::vector<ChartColumn>& columns = chart.decimated(0);
  ASSERT_FALSE(columns.empty());
  EXPECT_LE(columns.size(), size_t(chart.width()));
  double maxY = -1e9;
  for (const ChartColumn& c : columns) maxY = std::max(maxY, c.yMax);
  EXPECT_DOUBLE_EQ(maxY, points[123'457].y()) << "the one-step spike survives decimation";
  for (double px : {70.0, 200.5, 333.3, 580.0}) {
    QMouseEvent move(QEvent::MouseMove, QPointF(px, 120), chart.mapToGlobal(QPointF(px, 120)),
                     Qt::NoButton, Qt::NoButton, Qt::NoModifier);
    QApplication::sendEvent(&chart, &move);
    ASSERT_TRUE(chart.hoverX().has_value()) << px;
    // Brute force: the step whose x maps closest to px.
    const std::optional<double> expect = chart.nearestX(px);
    ASSERT_TRUE(expect.has_value());
    EXPECT_EQ(*chart.hoverX(), *expect);
    double best = 0, bestDist = 1e300;
    const double value = *expect;
    for (const QPointF& pt : points) {
      const double d = std::fabs(pt.x() - value);
      if (d < bestDist) {
        bestDist = d;
        best = pt.x();
      }
    }
    EXPECT_EQ(*chart.hoverX(), best);
  }
}

}  // namespace
}  // namespace moewb::gui
