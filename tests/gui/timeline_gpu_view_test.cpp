// The timeline's GPU stream lanes on a trace with GPU capture: lanes under the host lanes, kernels
// drawn, a click on a kernel selects it and fills the main window's GPU details (launch details
// and the expert load of its step and layer). With MOEWB_GPU_SCREENSHOT set, the main window is
// saved there as PNG (how docs/screenshot-gpu.png was made).
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QImage>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "main_window.h"
#include "moewb/gui/trace_document.h"
#include "test_trace.h"
#include "window_wait.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

class TimelineGpuView : public ::testing::Test {
 protected:
  void SetUp() override {
    m_file = m_dir.filePath(QStringLiteral("gpu.sqlite"));
    auto trace = testing::TestTrace::create(m_file.toStdString(), 4, 8);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setGpuActivity(true);
    for (int s = 0; s < 4; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    theme::apply(*qApp);
  }
  // Widget point at the middle of the first item of GPU lane `lane` (0: the CUDA API thread,
  // 1 and 2: streams) that is not folded, belongs to `layer` and is 3 px wide, or (-1, -1).
  static QPoint kernelPoint(const TimelineView& view, int lane, int layer) {
    for (const GpuDrawItem& d : view.gpuItems()) {
      const auto& item = view.gpuLanes()[size_t(d.lane)].items[size_t(d.item)];
      if (d.lane != lane || item.isFolded() || item.layer != layer || d.x1 - d.x0 < 3) continue;
      const QRect r = view.gpuLaneRect(lane);
      return {r.left() + int((d.x0 + d.x1) / 2), r.center().y()};
    }
    return {-1, -1};
  }
  QTemporaryDir m_dir;
  QString m_file;
};

TEST_F(TimelineGpuView, StreamLanesUnderTheHostLanesAndClickSelects) {
  TraceDocument doc;
  ASSERT_TRUE(doc.open(m_file).isOk());
  TimelineView view;
  view.setDocument(&doc);
  view.resize(1150, 420);
  view.show();
  QApplication::processEvents();
  ASSERT_TRUE(testing::waitForWindowData(view));
  ASSERT_EQ(view.gpuLanes().size(), 3u);  // the CUDA API thread, streams 7 and 13
  EXPECT_GT(view.gpuItems().size(), 8u);
  EXPECT_GT(view.gpuLaneRect(0).top(), 24 * 3);  // below the three host lanes
  EXPECT_EQ(view.gpuLaneRect(1).top(), view.gpuLaneRect(0).bottom() + 1);
  // Zoom to step 1 so each gemm kernel is many pixels wide, then click layer 2's.
  const int64_t step1 = testing::TestTrace::kOriginNs + testing::TestTrace::kStepNs;
  view.showTimeRange({step1, step1 + testing::TestTrace::kStepNs});
  ASSERT_TRUE(testing::waitForWindowData(view));
  const QPoint at = kernelPoint(view, 1, 2);
  ASSERT_GE(at.x(), 0);
  QSignalSpy gpuSpy(&view, &TimelineView::gpuSliceActivated);
  QSignalSpy stepSpy(&view, &TimelineView::stepActivated);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, at);
  ASSERT_EQ(gpuSpy.count(), 1);
  ASSERT_EQ(stepSpy.count(), 1);
  EXPECT_EQ(stepSpy.at(0).at(0).toLongLong(), 1);
  ASSERT_TRUE(view.selectedGpuSlice().has_value());
  EXPECT_EQ(view.selectedGpuSlice()->value, gpuSpy.at(0).at(0).toLongLong());
  // A click on empty GPU lane space clears the selection.
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier,
                    QPoint(view.gpuLaneRect(0).right() - 2, view.gpuLaneRect(0).center().y()));
  EXPECT_FALSE(view.selectedGpuSlice().has_value());
}

TEST_F(TimelineGpuView, MainWindowShowsKernelDetailsOnClick) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1500, 950);
  window.show();
  ASSERT_TRUE(window.openFile(m_file).isOk());
  QApplication::processEvents();
  TimelineView* timeline = window.timelineView();
  const int64_t step2 = testing::TestTrace::kOriginNs + 2 * testing::TestTrace::kStepNs;
  timeline->showTimeRange({step2, step2 + testing::TestTrace::kStepNs});
  ASSERT_TRUE(testing::waitForWindowData(*timeline));
  const QPoint at = kernelPoint(*timeline, 1, 3);
  ASSERT_GE(at.x(), 0);
  QTest::mouseClick(timeline, Qt::LeftButton, Qt::NoModifier, at);
  QApplication::processEvents();
  GpuDetailsModel* details = window.document()->gpuDetailsModel();
  EXPECT_EQ(details->value("layer"), "3");
  EXPECT_EQ(details->value("step"), "2");
  EXPECT_EQ(details->value("grid"), "64 × 4 × 1");
  EXPECT_TRUE(details->value("launched by").startsWith("cudaLaunchKernel"));
  EXPECT_EQ(details->value("expert 0"), QString::number(testing::TestTrace::tokensFor(2, 3, 0)));
  QTableView* table = window.gpuDetailsTable();
  EXPECT_EQ(table->model()->rowCount(), details->rowCount());
  EXPECT_TRUE(table->isVisible());
  // Clicking a launch on the CUDA API lane shows the kernel it launched (zoomed to the 5 us
  // call so that it is wide enough to hit).
  int64_t launchNs = -1;
  for (const storage::GpuLaneItem& item : timeline->gpuLanes()[0].items) {
    if (item.layer == 1 && !item.isFolded()) {
      launchNs = item.startNs;
      break;
    }
  }
  ASSERT_GE(launchNs, 0);
  timeline->showTimeRange({launchNs - 20'000, launchNs + 25'000});
  ASSERT_TRUE(testing::waitForWindowData(*timeline));
  const QPoint launch = kernelPoint(*timeline, 0, 1);
  ASSERT_GE(launch.x(), 0);
  QTest::mouseClick(timeline, Qt::LeftButton, Qt::NoModifier, launch);
  QApplication::processEvents();
  EXPECT_EQ(details->value("layer"), "1");
  EXPECT_FALSE(details->value("grid").isEmpty());
  EXPECT_TRUE(details->value("launched by").startsWith("cudaLaunchKernel"));
  const QImage image = timeline->grab().toImage();
  EXPECT_FALSE(image.isNull());
  if (const QByteArray out = qgetenv("MOEWB_GPU_SCREENSHOT"); !out.isEmpty()) {
    // Room for the details: the live-control dock is empty on a trace opened from disk.
    if (auto* live = window.findChild<QDockWidget*>(QStringLiteral("live control"))) live->hide();
    QApplication::processEvents();
    window.grab().save(QString::fromLocal8Bit(out));
  }
}

}  // namespace
}  // namespace moewb::gui
