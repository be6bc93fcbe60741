// Step charts with a first-step outlier and charts at 1280x720 (issue 18), on real widgets
// (offscreen) driven with QTest: a warm-up step 0 of 2.72 s among steps of ~345 ms leaves the
// step-time chart's and the Step breakdown's y axes on the other steps, is drawn at the top edge
// (an arrow, a cut bar) with its true value in the hover, and the context menu's "Full range"
// brings it back to scale; the rule follows a growing run and a step window. Every chart's title
// and unit boxes stay apart at any size and in the main window at 1280x720 with every dock.
#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QMouseEvent>
#include <QTemporaryDir>
#include <QTest>

#include "chart_view.h"
#include "main_window.h"
#include "step_breakdown_view.h"
#include "test_trace.h"
#include "theme.h"

namespace moewb::gui {
namespace {

// Step times (ms) of a run whose step 0 took 2.72 s: steps 0..count-1.
std::vector<QPointF> warmupRun(int count) {
  std::vector<QPointF> points;
  for (int s = 0; s < count; ++s) points.emplace_back(s, s == 0 ? 2720.0 : 341.0 + (s % 7));
  return points;
}

// The chart's or view's "Full range" action, found as the context menu finds it.
QAction* fullRangeAction(QWidget& w) {
  EXPECT_EQ(w.contextMenuPolicy(), Qt::ActionsContextMenu);
  for (QAction* a : w.actions()) {
    if (a->text() == QStringLiteral("Full range")) return a;
  }
  return nullptr;
}

void hover(QWidget& w, QPointF at) {
  QMouseEvent move(QEvent::MouseMove, at, w.mapToGlobal(at), Qt::NoButton, Qt::NoButton,
                   Qt::NoModifier);
  QApplication::sendEvent(&w, &move);
}

TEST(ChartOutlier, TheFirstStepDoesNotSquashTheStepTimeAxis) {
  theme::apply(*qApp);
  ChartView chart;
  chart.setAxisTitles(QStringLiteral("step"), QStringLiteral("ms"));
  chart.setValueFormat([](double v) { return QString::number(v, 'g', 4); });
  chart.resize(420, 200);
  chart.setPoints(warmupRun(40));
  chart.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&chart));
  EXPECT_LT(chart.yAxis().max, 400);
  EXPECT_LE(chart.yAxis().min, 341);
  ASSERT_EQ(chart.clippedPoints().size(), 1u);
  EXPECT_EQ(chart.clippedPoints()[0].point, QPointF(0, 2720));
  // Hovering step 0 reads out its true value.
  hover(chart, QPointF(63, 100));
  ASSERT_EQ(chart.hoverX(), std::optional<double>(0));
  ASSERT_EQ(chart.hoverLines().size(), 1);
  EXPECT_EQ(chart.hoverLines()[0], QStringLiteral("step 0: 2720 (above the axis)"));
  // Full range from the context menu: every point to scale, nothing clipped.
  QAction* full = fullRangeAction(chart);
  ASSERT_NE(full, nullptr);
  full->trigger();
  EXPECT_TRUE(chart.fullRange());
  EXPECT_GE(chart.yAxis().max, 2720);
  EXPECT_TRUE(chart.clippedPoints().empty());
  EXPECT_EQ(chart.hoverLines()[0], QStringLiteral("step 0: 2720"));
  full->trigger();
  EXPECT_FALSE(chart.fullRange());
  EXPECT_LT(chart.yAxis().max, 400);
  // A live run grows: still clipped; a window past the first steps has nothing to clip.
  chart.setPoints(warmupRun(60));
  EXPECT_EQ(chart.clippedPoints().size(), 1u);
  EXPECT_LT(chart.yAxis().max, 400);
  chart.setXWindow(std::make_pair(10.0, 59.0));
  EXPECT_TRUE(chart.clippedPoints().empty());
  EXPECT_LT(chart.yAxis().max, 400);
  // A first step only 2x the rest is data, not an outlier.
  chart.setXWindow(std::nullopt);
  std::vector<QPointF> mild = warmupRun(40);
  mild[0].setY(700);
  chart.setPoints(mild);
  EXPECT_TRUE(chart.clippedPoints().empty());
  EXPECT_GE(chart.yAxis().max, 700);
}

TEST(ChartOutlier, ALongRunClipsItsSpikeThroughTheDecimatedColumns) {
  ChartView chart;
  chart.resize(600, 240);
  std::vector<QPointF> points = warmupRun(200'000);
  points[150'000].setY(9000);  // one spike far into the run: within 1% of the points
  chart.setPoints(points);
  chart.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&chart));
  ASSERT_FALSE(chart.decimated(0).empty());
  EXPECT_LT(chart.yAxis().max, 400);
  ASSERT_EQ(chart.clippedPoints().size(), 2u);
  EXPECT_EQ(chart.clippedPoints()[0].point, QPointF(0, 2720));
  EXPECT_EQ(chart.clippedPoints()[1].point, QPointF(150'000, 9000));
}

StepBreakdownSet warmupBreakdown(int count) {
  StepBreakdownSet set;
  set.source = BreakdownSource::kGpuKernels;
  for (int s = 0; s < count; ++s) {
    StepBreakdown b;
    b.step = s;
    b.durNs = s == 0 ? 2'720'000'000 : 345'000'000;
    b.ns[size_t(TimeCategory::kExperts)] = 100'000'000;
    b.ns[size_t(TimeCategory::kGpuIdle)] = b.durNs - 100'000'000;
    set.steps.push_back(b);
  }
  return set;
}

TEST(ChartOutlier, TheStepBreakdownCutsTheWarmUpBar) {
  theme::apply(*qApp);
  StepBreakdownView view;
  view.resize(460, 260);
  view.setData(warmupBreakdown(3));
  view.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&view));
  EXPECT_LT(view.yAxis().max, 1000);
  EXPECT_GE(view.yAxis().max, 345);
  ASSERT_EQ(view.clippedColumns(), std::vector<size_t>{0});
  const QRectF plot = view.plotRect();
  const BreakdownColumn& c = view.columns()[0];
  const QPointF at(plot.left() + (c.x0 + c.x1) / 2, plot.top() + 4);
  QTest::mouseMove(&view, at.toPoint());
  const QString text = view.hoverText(at);
  EXPECT_TRUE(text.startsWith(QStringLiteral("step 0: 2720.0 ms"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("GPU idle: 2620.0 ms"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("above the axis"))) << text.toStdString();
  QAction* full = fullRangeAction(view);
  ASSERT_NE(full, nullptr);
  full->trigger();
  EXPECT_GE(view.yAxis().max, 2720);
  EXPECT_TRUE(view.clippedColumns().empty());
  EXPECT_FALSE(view.hoverText(at).contains(QStringLiteral("above the axis")));
  full->trigger();
  // A step window past the first steps: nothing to clip.
  view.setData(warmupBreakdown(30));
  EXPECT_EQ(view.clippedColumns(), std::vector<size_t>{0});
  view.setStepWindow(std::make_pair(int64_t(5), int64_t(29)));
  EXPECT_TRUE(view.clippedColumns().empty());
  EXPECT_LT(view.yAxis().max, 1000);
}

// The title and unit boxes of `chart` lie apart and inside it.
void expectHeaderApart(const ChartView& chart, const std::string& where) {
  const QRectF title = chart.titleRect(), unit = chart.unitRect();
  EXPECT_FALSE(title.intersects(unit))
      << where << ": title " << title.left() << ".." << title.right() << " x " << title.top()
      << ".." << title.bottom() << ", unit " << unit.left() << ".." << unit.right() << " x "
      << unit.top() << ".." << unit.bottom();
  EXPECT_FALSE(title.isEmpty()) << where;
  EXPECT_FALSE(unit.isEmpty()) << where;
  EXPECT_LE(unit.right(), chart.width()) << where;
  EXPECT_GE(title.left(), 0) << where;
}

TEST(ChartHeader, TitleAndUnitNeverOverlapAtAnySize) {
  theme::apply(*qApp);
  ChartView chart;
  chart.setTitle(QStringLiteral("Loss per step"));
  chart.setAxisTitles(QStringLiteral("step"), QStringLiteral("cross-entropy (nats)"));
  chart.setPoints(warmupRun(10));
  chart.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&chart));
  for (int w = 140; w <= 640; w += 25) {
    for (int h : {72, 90, 140, 260}) {
      chart.resize(w, h);
      expectHeaderApart(chart, std::to_string(w) + "x" + std::to_string(h));
    }
  }
  // Wide: one row, the unit in full on the right.
  chart.resize(600, 200);
  EXPECT_EQ(chart.titleRect().top(), chart.unitRect().top());
  EXPECT_GT(chart.unitRect().left(), chart.titleRect().right());
  // Narrow and tall: the unit in full under the title.
  chart.resize(200, 260);
  EXPECT_GE(chart.unitRect().top(), chart.titleRect().bottom());
  // Narrow and short: one row with the unit of "quantity (unit)".
  chart.resize(200, 85);
  EXPECT_EQ(chart.titleRect().top(), chart.unitRect().top());
  EXPECT_NEAR(chart.unitRect().width(),
              QFontMetricsF(chart.font()).horizontalAdvance(QStringLiteral("nats")), 0.5);
}

TEST(ChartHeader, EveryChartOfTheWindowAt1280x720) {
  theme::apply(*qApp);
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("run.sqlite"));
  auto trace = testing::TestTrace::create(path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 6; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE((*trace)->finish().isOk());
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1280, 720);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  ASSERT_TRUE(window.openFile(path).isOk());
  for (bool everyDock : {false, true}) {
    if (everyDock) {
      for (QDockWidget* d : window.findChildren<QDockWidget*>()) d->show();
    }
    window.resize(1280, 720);
    QApplication::processEvents();
    int checked = 0;
    for (ChartView* chart : window.findChildren<ChartView*>()) {
      if (!chart->isVisible()) continue;
      expectHeaderApart(*chart, (everyDock ? "every dock, " : "default docks, ") +
                                    std::string("chart ") + std::to_string(chart->width()) + "x" +
                                    std::to_string(chart->height()));
      ++checked;
    }
    EXPECT_GE(checked, 5) << "the five step charts";
  }
  for (ChartView* chart : {window.lossChart(), window.stepTimeChart(), window.memoryChart(),
                           window.gradNormChart(), window.lrChart()}) {
    EXPECT_TRUE(chart->isVisible());
  }
}

}  // namespace
}  // namespace moewb::gui
