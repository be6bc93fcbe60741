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

}  // namespace
}  // namespace moewb::gui
