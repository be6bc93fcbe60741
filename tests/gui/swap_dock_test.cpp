// Offscreen: the main window shows the Swap dock (tabbed on the right) for a trace with swap
// rows and hides it for one without; the timeline gets two swap lanes under the GPU streams with
// red late reloads; a click on the late reload selects the kernel that waited (GPU trace) or
// outlines the phase (CPU trace); the what-if redraws when the budget changes and shows a
// recompute run's recompute time and cost.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QImage>
#include <QMouseEvent>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "chart_view.h"
#include "main_window.h"
#include "moewb/gui/swap_model.h"
#include "swap_panel.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

using testing::TestTrace;

constexpr int kLayers = 4;

QString writeTrace(const QTemporaryDir& dir, const char* name, bool swap, bool gpu) {
  const QString path = dir.filePath(QString::fromLatin1(name));
  auto trace = TestTrace::create(path.toStdString(), kLayers, 4);
  EXPECT_TRUE(trace.isOk());
  (*trace)->setSwap(swap, !gpu);
  (*trace)->setGpuActivity(gpu);
  for (int64_t s = 0; s < 3; ++s) EXPECT_TRUE((*trace)->addStep(s).isOk());
  EXPECT_TRUE((*trace)->finish().isOk());
  return path;
}

class SwapDockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    theme::apply(*qApp);
    m_window.setErrorDialogsEnabled(false);
    m_window.resize(1800, 1000);
    m_window.show();
  }
  // Shows step 1 on the timeline and clicks the late reload's bar; returns it.
  storage::SwapEventRow clickLateReload() {
    TimelineView* timeline = m_window.timelineView();
    const int64_t start = TestTrace::kOriginNs + TestTrace::kStepNs;
    timeline->showTimeRange({start, start + TestTrace::kStepNs});
    QApplication::processEvents();
    const auto& items = timeline->swapItems();
    for (const SwapDrawItem& d : items) {
      if (!d.late) continue;
      const QRect lane = timeline->swapLaneRect(d.lane);
      const QPoint at(lane.left() + int((d.x0 + d.x1) / 2), lane.center().y());
      const storage::SwapEventRow* e = timeline->swapEventAtPos(at);
      EXPECT_NE(e, nullptr);
      const storage::SwapEventRow event = e ? *e : storage::SwapEventRow{};
      QTest::mouseClick(timeline, Qt::LeftButton, {}, at);
      QApplication::processEvents();
      return event;
    }
    ADD_FAILURE() << "no late reload bar";
    return {};
  }
  MainWindow m_window;
};

TEST_F(SwapDockTest, ShownWithSwapRowsAndHiddenWithout) {
  QTemporaryDir dir;
  const QString swap = writeTrace(dir, "swap.sqlite", true, true);
  const QString plain = writeTrace(dir, "plain.sqlite", false, true);
  QDockWidget* dock = m_window.swapDock();
  ASSERT_NE(dock, nullptr);
  EXPECT_FALSE(dock->isVisible());
  ASSERT_TRUE(m_window.openFile(swap).isOk());
  QApplication::processEvents();
  EXPECT_TRUE(dock->isVisible());
  EXPECT_EQ(dock->windowTitle(), QStringLiteral("Swap"));
  // Tabbed with the other right-side docks, not a column of its own.
  EXPECT_FALSE(m_window.tabifiedDockWidgets(dock).isEmpty());
  TimelineView* timeline = m_window.timelineView();
  EXPECT_EQ(timeline->swapLaneCount(), 2);
  // Under the GPU lanes.
  const int gpuLanes = int(m_window.document()->gpuLaneTracks().size());
  ASSERT_GT(gpuLanes, 0);
  EXPECT_GT(timeline->swapLaneRect(0).top(), timeline->gpuLaneRect(gpuLanes - 1).top());
  SwapPanel* panel = m_window.swapPanel();
  EXPECT_EQ(panel->layerTable()->model()->rowCount(), kLayers);
  EXPECT_EQ(panel->hbmChart()->series().size(), 2u);
  EXPECT_EQ(panel->hbmChart()->series()[0].points.size(), 3u);
  EXPECT_EQ(panel->pcieChart()->series()[1].points.front().y(), kSwapPcieLineGbps);

  ASSERT_TRUE(m_window.openFile(plain).isOk());
  QApplication::processEvents();
  EXPECT_FALSE(dock->isVisible());
  EXPECT_EQ(timeline->swapLaneCount(), 0);
  EXPECT_TRUE(timeline->swapItems().empty());
  ASSERT_TRUE(m_window.openFile(swap).isOk());
  QApplication::processEvents();
  EXPECT_TRUE(dock->isVisible());
}

TEST_F(SwapDockTest, LateReloadIsRedAndSelectsTheKernelThatWaited) {
  QTemporaryDir dir;
  ASSERT_TRUE(m_window.openFile(writeTrace(dir, "gpu.sqlite", true, true)).isOk());
  QApplication::processEvents();
  TimelineView* timeline = m_window.timelineView();
  m_window.setTimelineHeight(700);  // every lane of the GPU trace, down to the swap lanes
  const int64_t start = TestTrace::kOriginNs + TestTrace::kStepNs;
  timeline->showTimeRange({start, start + TestTrace::kStepNs});
  QApplication::processEvents();
  ASSERT_LE(timeline->swapLaneRect(1).bottom(), timeline->height());
  // The late bar is painted red (its fill, inside the lighter border and the stall hatch).
  const QImage image = timeline->grab().toImage().convertToFormat(QImage::Format_RGB32);
  int redPixels = 0, lateBars = 0;
  for (const SwapDrawItem& d : timeline->swapItems()) {
    if (!d.late) continue;
    ++lateBars;
    const QRect lane = timeline->swapLaneRect(d.lane);
    for (int x = lane.left() + int(d.x0); x < lane.left() + int(d.x1); ++x) {
      for (int y = lane.top() + 3; y < lane.bottom() - 2; ++y) {
        const QColor c = image.pixelColor(x, y);
        redPixels += c.red() > 200 && c.green() < 110 && c.blue() < 110;
      }
    }
  }
  EXPECT_EQ(lateBars, 1);
  EXPECT_GT(redPixels, 10) << "late reload not drawn red";
  const storage::SwapEventRow event = clickLateReload();
  EXPECT_EQ(event.layer, TestTrace::kLateLayer);
  ASSERT_TRUE(timeline->selectedGpuSlice().has_value());
  EXPECT_TRUE(m_window.gpuDock()->isVisible());
  EXPECT_GT(m_window.document()->gpuDetailsModel()->rowCount(), 0);
}

TEST_F(SwapDockTest, LateReloadOnACpuTraceOutlinesThePhase) {
  QTemporaryDir dir;
  ASSERT_TRUE(m_window.openFile(writeTrace(dir, "cpu.sqlite", true, false)).isOk());
  QApplication::processEvents();
  EXPECT_TRUE(m_window.swapModel()->simulated());
  const storage::SwapEventRow event = clickLateReload();
  const auto& outlined = m_window.timelineView()->highlightedSlices();
  ASSERT_EQ(outlined.size(), 1u);
  EXPECT_EQ(outlined[0].startNs, event.neededNs);
}

TEST_F(SwapDockTest, WhatIfRedrawsOnABudgetChange) {
  QTemporaryDir dir;
  ASSERT_TRUE(m_window.openFile(writeTrace(dir, "swap.sqlite", true, false)).isOk());
  QApplication::processEvents();
  SwapPanel* panel = m_window.swapPanel();
  panel->tabs()->setCurrentIndex(3);
  ASSERT_TRUE(panel->budgetSpin()->isEnabled());
  EXPECT_NEAR(panel->budgetSpin()->value(), 2.5, 1e-9);
  const QString before = panel->whatIfText();
  const int64_t swappedBefore = m_window.swapModel()->whatIf()->prediction().swappedBytes;
  QElapsedTimer timer;
  timer.start();
  panel->budgetSpin()->setValue(2.0);
  QApplication::processEvents();
  const double redrawMs = double(timer.nsecsElapsed()) / 1e6;
  EXPECT_NE(panel->whatIfText(), before);
  EXPECT_GT(m_window.swapModel()->whatIf()->prediction().swappedBytes, swappedBefore);
  EXPECT_EQ(panel->budgetSlider()->value(), 2000);  // 1 MB ticks
  EXPECT_EQ(panel->decisionTable()->model()->rowCount(), 7 * kLayers);
  std::printf("what-if redraw after a budget change: %.2f ms\n", redrawMs);
  panel->prefetchSpin()->setValue(2);
  EXPECT_EQ(m_window.swapModel()->whatIf()->prefetchLayers(), 2);
  // The free lag spin box starts at the plan's lag (1 for a plan without one) and re-plans.
  EXPECT_EQ(panel->freeLagSpin()->value(), 1);
  EXPECT_TRUE(panel->freeLagSpin()->isEnabled());
  panel->freeLagSpin()->setValue(3);
  EXPECT_EQ(m_window.swapModel()->whatIf()->freeLagLayers(), 3);
  EXPECT_EQ(m_window.swapModel()->whatIf()->prefetchLayers(), 2);
}

// The what-if of a recompute run's trace shows the recompute line (recomputed bytes, recompute
// time, the added step time) and the decisions table's recompute rows with their cost.
TEST_F(SwapDockTest, WhatIfShowsRecomputeAndItsCost) {
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("recompute.sqlite"));
  auto run = testing::writeRecomputeTrace(path.toStdString());
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  SwapPanel panel;
  panel.setModel(&model);
  const QString text = panel.whatIfText();
  EXPECT_TRUE(text.contains(QStringLiteral("recompute <b>"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("added step time (exposed + recompute)")))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("measured"))) << text.toStdString();
  QAbstractItemModel* table = panel.decisionTable()->model();
  int recomputeRows = 0;
  for (int r = 0; r < table->rowCount(); ++r) {
    if (table->index(r, SwapDecisionModel::kAction).data().toString() != "recompute") continue;
    ++recomputeRows;
    bool number = false;
    table->index(r, SwapDecisionModel::kCostMs).data().toString().toDouble(&number);
    EXPECT_TRUE(number) << r;
  }
  EXPECT_GT(recomputeRows, 0);
  // A plan without recompute says nothing about it.
  QTemporaryDir plain;
  SwapModel plainModel;
  ASSERT_TRUE(plainModel.open(writeTrace(plain, "swap.sqlite", true, false)).isOk());
  SwapPanel plainPanel;
  plainPanel.setModel(&plainModel);
  EXPECT_FALSE(plainPanel.whatIfText().isEmpty());
  EXPECT_FALSE(plainPanel.whatIfText().contains(QStringLiteral("recompute <b>")));
}

}  // namespace
}  // namespace moewb::gui
