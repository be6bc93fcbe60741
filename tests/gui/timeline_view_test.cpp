// TimelineView input on a real trace: wheel zooms about the cursor, drag pans, Home fits,
// a click on a step selects it.
#include "timeline_view.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QWheelEvent>

#include "moewb/gui/trace_document.h"
#include "test_trace.h"
#include "window_wait.h"

namespace moewb::gui {
namespace {

class TimelineViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const QString file = m_dir.filePath(QStringLiteral("view.sqlite"));
    auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    for (int s = 0; s < 4; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    ASSERT_TRUE(m_doc.open(file).isOk());
    m_view.setDocument(&m_doc);
    m_view.resize(1150, 300);
    m_view.show();
    QApplication::processEvents();
  }
  void wheel(QPoint pos, int angle) {
    QWheelEvent event(QPointF(pos), QPointF(m_view.mapToGlobal(pos)), QPoint(), QPoint(0, angle),
                      Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(&m_view, &event);
  }
  QTemporaryDir m_dir;
  TraceDocument m_doc;
  TimelineView m_view;
};

TEST_F(TimelineViewTest, StartsFittedToTheData) {
  EXPECT_EQ(m_view.timeGeometry().startNs, m_doc.timeBounds().startNs);
  EXPECT_EQ(m_view.timeGeometry().endNs, m_doc.timeBounds().endNs);
  EXPECT_DOUBLE_EQ(m_view.timeGeometry().widthPx, 1000.0);  // 1150 minus the 150 px gutter
}

TEST_F(TimelineViewTest, WheelZoomsAboutTheCursor) {
  const QPoint cursor(150 + 400, 60);
  const double before = m_view.timeGeometry().timeAt(400);
  const int64_t durBefore = m_view.timeGeometry().durNs();
  wheel(cursor, 240);  // two notches in
  EXPECT_LT(m_view.timeGeometry().durNs(), durBefore);
  EXPECT_NEAR(m_view.timeGeometry().timeAt(400), before, 2.0);
  wheel(cursor, -240);
  EXPECT_NEAR(double(m_view.timeGeometry().durNs()), double(durBefore), 4.0);
}

TEST_F(TimelineViewTest, DragPansAndHomeFits) {
  m_view.zoomBy(4.0, 500);
  const int64_t start = m_view.timeGeometry().startNs;
  const double nsPerPx = m_view.timeGeometry().nsPerPx();
  QTest::mousePress(&m_view, Qt::LeftButton, Qt::NoModifier, QPoint(600, 60));
  QTest::mouseMove(&m_view, QPoint(500, 60));
  QTest::mouseRelease(&m_view, Qt::LeftButton, Qt::NoModifier, QPoint(500, 60));
  EXPECT_NEAR(double(m_view.timeGeometry().startNs - start), 100 * nsPerPx, 2.0);
  QTest::keyClick(&m_view, Qt::Key_Home);
  EXPECT_EQ(m_view.timeGeometry().durNs(), m_doc.timeBounds().durNs());
}

TEST_F(TimelineViewTest, ClickOnAStepSliceEmitsItsStep) {
  QSignalSpy activated(&m_view, &TimelineView::stepActivated);
  // The first lane holds the step slices; each step is a quarter of the plot.
  const int laneY = 28 + 6 + 12;
  QTest::mouseClick(&m_view, Qt::LeftButton, Qt::NoModifier, QPoint(150 + 3 * 250 + 100, laneY));
  ASSERT_EQ(activated.count(), 1);
  EXPECT_EQ(activated.at(0).at(0).toLongLong(), 3);
}

// A trace with device-memory events: the memory row under the lanes, its stack, hover text and
// pixels, rebuilt on zoom.
class TimelineMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const QString file = m_dir.filePath(QStringLiteral("memory.sqlite"));
    auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setDeviceMemory(true);
    for (int s = 0; s < 4; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    ASSERT_TRUE(m_doc.open(file).isOk());
    m_view.setDocument(&m_doc);
    m_view.resize(1150, 420);
    m_view.show();
    QApplication::processEvents();
    ASSERT_TRUE(testing::waitForWindowData(m_view));
  }
  // Widget point over the memory row at trace time `tNs`.
  QPoint memoryPoint(int64_t tNs) const {
    const QRect r = m_view.memoryRect(0);
    return {150 + int(m_view.timeGeometry().xOf(tNs)), r.center().y()};
  }
  static int64_t stepStart(int64_t step) {
    return testing::TestTrace::kOriginNs + step * testing::TestTrace::kStepNs;
  }
  QTemporaryDir m_dir;
  TraceDocument m_doc;
  TimelineView m_view;
};

TEST_F(TimelineMemoryTest, StacksTheCategoriesUnderTheLanes) {
  ASSERT_EQ(m_view.memoryStacks().size(), 1u);
  const MemoryStack& stack = m_view.memoryStacks()[0];
  EXPECT_EQ(stack.categories,
            (std::vector<std::string>{"weights", "optimizer", "activations", "workspace"}));
  EXPECT_EQ(stack.columns(), 1000);
  EXPECT_EQ(stack.maxTotalBytes, 29 * testing::TestTrace::kMiB);
  const QRect row = m_view.memoryRect(0);
  ASSERT_FALSE(row.isEmpty());
  EXPECT_EQ(row.left(), 150);
  EXPECT_GT(row.top(), 28 + 3 * 24);  // below the three lanes of the thread track
  EXPECT_TRUE(m_view.memoryRect(1).isEmpty());
  EXPECT_GE(m_view.sizeHint().height(), row.bottom() + 26);
}

TEST_F(TimelineMemoryTest, HoverShowsEveryCategoryAtThatTime) {
  const QString busy = m_view.memoryTextAt(memoryPoint(stepStart(1) + 300'000));
  EXPECT_TRUE(busy.contains(QStringLiteral("activations 4.00 MiB"))) << busy.toStdString();
  EXPECT_TRUE(busy.contains(QStringLiteral("weights 8.00 MiB"))) << busy.toStdString();
  EXPECT_TRUE(busy.contains(QStringLiteral("optimizer 16.0 MiB"))) << busy.toStdString();
  EXPECT_TRUE(busy.contains(QStringLiteral("total 28.0 MiB"))) << busy.toStdString();
  const QString idle = m_view.memoryTextAt(memoryPoint(stepStart(1) + 1'800'000));
  EXPECT_TRUE(idle.contains(QStringLiteral("activations 0 B"))) << idle.toStdString();
  EXPECT_TRUE(idle.contains(QStringLiteral("total 24.0 MiB"))) << idle.toStdString();
  // Not over the memory row: no memory text.
  EXPECT_TRUE(m_view.memoryTextAt(QPoint(500, 40)).isEmpty());
  EXPECT_TRUE(m_view.memoryTextAt(QPoint(20, m_view.memoryRect(0).center().y())).isEmpty());
}

TEST_F(TimelineMemoryTest, PaintsEachCategoryColour) {
  const QImage image = m_view.grab().toImage().convertToFormat(QImage::Format_RGB32);
  const QRect row = m_view.memoryRect(0);
  auto count = [&](const QColor& color) {
    int n = 0;
    for (int y = row.top(); y <= row.bottom(); ++y) {
      for (int x = row.left(); x <= row.right() && x < image.width(); ++x) {
        n += image.pixel(x, y) == color.rgb();
      }
    }
    return n;
  };
  // Optimizer (16 of 29 MiB) is the widest band; the short workspace peaks still show.
  const int optimizer = count(TimelineView::memoryColor("optimizer"));
  EXPECT_GT(optimizer, count(TimelineView::memoryColor("weights")));
  EXPECT_GT(count(TimelineView::memoryColor("weights")), count(TimelineView::memoryColor("activations")));
  EXPECT_GT(count(TimelineView::memoryColor("activations")), 0);
  EXPECT_GT(count(TimelineView::memoryColor("workspace")), 0);
  EXPECT_GT(optimizer, 1000 * 20);
}

TEST_F(TimelineMemoryTest, ZoomRebuildsTheStackForTheNewWindow) {
  // Zoom to the workspace allocation of step 2: [start + 650 us, start + 850 us).
  m_view.showTimeRange({stepStart(2) + 650'000, stepStart(2) + 850'000});
  ASSERT_TRUE(testing::waitForWindowData(m_view));
  ASSERT_EQ(m_view.memoryStacks().size(), 1u);
  const MemoryStack& stack = m_view.memoryStacks()[0];
  EXPECT_EQ(stack.columns(), 1000);
  const int workspace = 3;
  ASSERT_EQ(stack.categories[size_t(workspace)], "workspace");
  // 200 us over 1000 px: 0.2 us per px; the workspace block covers px 250..750.
  EXPECT_EQ(stack.bytes[size_t(workspace)][100], 0);
  EXPECT_EQ(stack.bytes[size_t(workspace)][500], testing::TestTrace::kMiB);
  EXPECT_EQ(stack.bytes[size_t(workspace)][900], 0);
  EXPECT_EQ(stack.bytes[2][0], 4 * testing::TestTrace::kMiB);  // activations carried in
}

}  // namespace
}  // namespace moewb::gui
