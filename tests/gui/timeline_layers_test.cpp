// One phase lane per layer, in a real window (offscreen) on a trace the CPU engine wrote (2
// layers): clicking the disclosure triangle of the "phases" lane adds one row per layer under an
// "other" row (the slices without a layer), a click in the row of layer 1 selects a slice of
// layer 1 and the same x in the collapsed lane still selects it, collapsing restores the lanes;
// the draw list, search highlights and the View menu's "Expand layers" work with the extra rows.
// splitLaneByLayer itself is checked on a hand-made lane. With MOEWB_LAYERS_SCREENSHOT set, the
// expanded view with a search and a range is saved there as PNG.
#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QMenuBar>
#include <QTemporaryDir>
#include <QTest>
#include <cstdlib>
#include <set>

#include "main_window.h"
#include "moewb/gui/trace_document.h"
#include "parallel_trace.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

TEST(SplitLaneByLayer, PutsEachLayerInItsOwnSortedLaneAndTheRestFirst) {
  TimelineLane lane;
  lane.track = TrackId{3};
  lane.depth = 2;
  const int32_t layers[] = {-1, 1, 0, 1, -1, 0, 2};
  for (int i = 0; i < 7; ++i) {
    lane.slices.push_back({i * 100, i == 1 ? 500 : 50, 0, i, layers[i]});
    lane.maxEndNs.push_back(std::max(lane.maxEndNs.empty() ? 0 : lane.maxEndNs.back(),
                                     lane.slices.back().endNs()));
  }
  const LayerSplit split = splitLaneByLayer(lane);
  ASSERT_EQ(split.layers, (std::vector<int32_t>{-1, 0, 1, 2}));
  ASSERT_EQ(split.lanes.size(), 4u);
  size_t total = 0;
  for (size_t k = 0; k < split.lanes.size(); ++k) {
    const TimelineLane& sub = split.lanes[k];
    EXPECT_EQ(sub.track, lane.track);
    EXPECT_EQ(sub.depth, 2);
    ASSERT_EQ(sub.maxEndNs.size(), sub.slices.size());
    for (size_t i = 0; i < sub.slices.size(); ++i) {
      EXPECT_EQ(sub.slices[i].layer, split.layers[k]);
      if (i > 0) {
        EXPECT_LE(sub.slices[i - 1].startNs, sub.slices[i].startNs);
      }
    }
    total += sub.slices.size();
  }
  EXPECT_EQ(total, lane.slices.size());
  // Layer 1: the long slice at 100 (ends 600) then the one at 300: the running end stays 600.
  EXPECT_EQ(split.lanes[2].maxEndNs, (std::vector<int64_t>{600, 600}));
}

class TimelineLayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    m_file = m_dir.filePath(QStringLiteral("engine.sqlite"));
    const Status written = moewb::testing::writeParallelTrace(m_file.toStdString(), 1, 1, 2);
    ASSERT_TRUE(written.isOk()) << written.toString();
    ASSERT_TRUE(m_doc.open(m_file).isOk());
    m_view.setDocument(&m_doc);
    m_view.resize(1150, 700);
    m_view.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&m_view));
  }
  // The first row carrying a disclosure triangle (the phases lane), or -1.
  int phasesRow() const {
    const auto& rows = m_view.laneRows();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].expandable) return int(i);
    }
    return -1;
  }
  // The layers of the phases lane's slices (-1 included when some have none).
  std::set<int32_t> phaseLayers(int dataLane) const {
    std::set<int32_t> layers;
    for (const TimelineSlice& s : m_doc.timeline().lanes()[size_t(dataLane)].slices) {
      layers.insert(std::max(s.layer, -1));
    }
    return layers;
  }
  void clickGutter(int row) {
    const int y = m_view.laneRows()[size_t(row)].top + 12;
    QTest::mouseClick(&m_view, Qt::LeftButton, Qt::NoModifier, QPoint(20, y));
  }

  QTemporaryDir m_dir;
  QString m_file;
  TraceDocument m_doc;
  TimelineView m_view;
};

TEST_F(TimelineLayersTest, TriangleExpandsOneRowPerLayerAndClicksHitTheRightLayer) {
  const size_t collapsedRows = m_view.laneRows().size();
  EXPECT_EQ(collapsedRows, m_doc.timeline().lanes().size());  // collapsed: as before
  const int row = phasesRow();
  ASSERT_GE(row, 0);
  const int dataLane = m_view.laneRows()[size_t(row)].dataLane;
  const TimelineLane& phases = m_doc.timeline().lanes()[size_t(dataLane)];
  std::set<int32_t> layers = phaseLayers(dataLane);
  layers.erase(-1);
  ASSERT_GE(layers.size(), 2u) << "the engine trace should have per-layer phases";
  EXPECT_FALSE(m_view.layersExpanded(phases.track));

  clickGutter(row);
  EXPECT_TRUE(m_view.layersExpanded(phases.track));
  const auto& rows = m_view.laneRows();
  ASSERT_EQ(rows.size(), collapsedRows + layers.size());  // "other" row + one per layer
  EXPECT_EQ(rows[size_t(row)].layer, -1);
  int layer1Row = -1;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& r = rows[size_t(row) + 1 + i];
    EXPECT_EQ(r.layer, *std::next(layers.begin(), std::ptrdiff_t(i)));
    EXPECT_EQ(r.dataLane, dataLane);
    EXPECT_EQ(r.top, rows[size_t(row)].top + int(i + 1) * 24);
    if (r.layer == 1) layer1Row = int(r.lane);
  }
  ASSERT_GE(layer1Row, 0);
  for (const DrawItem& item : m_view.drawList().items) EXPECT_LT(size_t(item.lane), rows.size());

  // Zoom to the longest layer-1 phase of the first step so it is wide, then click its middle.
  const TimelineSlice* target = nullptr;
  for (const TimelineSlice& s : phases.slices) {
    if (s.layer == 1 && s.step == phases.slices.front().step &&
        (!target || s.durNs > target->durNs)) {
      target = &s;
    }
  }
  ASSERT_NE(target, nullptr);
  m_view.showTimeRange({target->startNs - target->durNs, target->endNs() + target->durNs});
  const double midX = m_view.timeGeometry().xOf(target->startNs + target->durNs / 2);
  const QPoint click(150 + int(midX), rows[size_t(layer1Row)].top + 12);
  QTest::mouseClick(&m_view, Qt::LeftButton, Qt::NoModifier, click);
  ASSERT_TRUE(m_view.selectedSlice().has_value());
  EXPECT_EQ(m_view.selectedSlice()->layer, 1);
  EXPECT_EQ(m_view.selectedSlice()->startNs, target->startNs);
  // The "other" row at the same x holds nothing of layer 1.
  QTest::mouseClick(&m_view, Qt::LeftButton, Qt::NoModifier,
                    QPoint(click.x(), rows[size_t(row)].top + 12));
  EXPECT_TRUE(!m_view.selectedSlice() || m_view.selectedSlice()->layer == -1);

  // Collapse: the original lanes; the same x in the one phases row still selects the slice.
  clickGutter(row);
  EXPECT_FALSE(m_view.layersExpanded(phases.track));
  ASSERT_EQ(m_view.laneRows().size(), collapsedRows);
  QTest::mouseClick(&m_view, Qt::LeftButton, Qt::NoModifier,
                    QPoint(click.x(), m_view.laneRows()[size_t(row)].top + 12));
  ASSERT_TRUE(m_view.selectedSlice().has_value());
  EXPECT_EQ(m_view.selectedSlice()->startNs, target->startNs);
  EXPECT_EQ(m_view.selectedSlice()->layer, 1);
}

TEST_F(TimelineLayersTest, ExpandedViewFoldsSearchesAndGrowsItsHeight) {
  const int collapsedHeight = m_view.sizeHint().height();
  const int collapsedBottom = m_view.laneRows().back().top;
  m_view.toggleAllLayers();
  const int row = phasesRow();
  ASSERT_GE(row, 0);
  const auto& rows = m_view.laneRows();
  EXPECT_GT(rows.size(), m_doc.timeline().lanes().size());
  // The rows below move down by one lane per extra row and the size hint (what a scroll area
  // sizes the view by) covers them.
  EXPECT_EQ(rows.back().top - collapsedBottom,
            int(rows.size() - m_doc.timeline().lanes().size()) * 24);
  EXPECT_GE(m_view.sizeHint().height(), rows.back().top + 24);
  // Zoomed out (fitted) the folded runs of every layer row get dominant-phase spans.
  m_view.fitAll();
  std::set<int> spanRows;
  for (const DominantSpan& span : m_view.drawList().dominant) {
    ASSERT_LT(size_t(span.lane), rows.size());
    spanRows.insert(span.lane);
  }
  for (size_t i = size_t(row) + 1; i < rows.size() && rows[i].layer >= 0; ++i) {
    const auto& items = m_view.drawList().items;
    EXPECT_TRUE(std::any_of(items.begin(), items.end(),
                            [&](const DrawItem& d) { return d.lane == int(i); }))
        << "layer row " << i << " draws nothing";
  }
  // Search and a range selection paint over the extra rows (the paint path runs).
  m_view.setSearchText(QStringLiteral("experts"));
  EXPECT_GT(m_view.search().matches().size(), 0u);
  m_view.setSelectedRange(TimeRange{m_doc.timeBounds().startNs,
                                    m_doc.timeBounds().startNs + m_doc.timeBounds().durNs() / 2});
  const QImage image = m_view.grab().toImage();
  EXPECT_FALSE(image.isNull());
  if (const char* shot = std::getenv("MOEWB_LAYERS_SCREENSHOT")) {
    EXPECT_TRUE(image.save(QString::fromLocal8Bit(shot)));
  }
  // Zoomed to a layer-1 experts.fwd slice, its search highlight (yellow over the experts red) is
  // in the L1 row.
  m_view.setSelectedRange(std::nullopt);
  const TimelineLane& phases = m_doc.timeline().lanes()[size_t(rows[size_t(row)].dataLane)];
  const TimelineSlice* target = nullptr;
  for (const TimelineSlice& s : phases.slices) {
    if (!target && s.layer == 1 && m_doc.timeline().name(s.nameId) == "experts.fwd") target = &s;
  }
  ASSERT_NE(target, nullptr);
  m_view.showTimeRange({target->startNs - target->durNs, target->endNs() + target->durNs});
  int l1Top = -1;
  for (const auto& r : m_view.laneRows()) {
    if (r.layer == 1) l1Top = r.top;
  }
  ASSERT_GE(l1Top, 0);
  const QImage zoomed = m_view.grab().toImage();
  const int x = 150 + int(m_view.timeGeometry().xOf(target->startNs + target->durNs / 2));
  const QColor match = zoomed.pixelColor(x, l1Top + 12);
  EXPECT_GT(match.green(), 140) << match.name().toStdString();
  EXPECT_LT(match.blue(), 100) << match.name().toStdString();
  m_view.toggleAllLayers();
  EXPECT_EQ(m_view.laneRows().size(), m_doc.timeline().lanes().size());
  EXPECT_EQ(m_view.sizeHint().height(), collapsedHeight);
}

TEST(TimelineLayersWindow, ViewMenuExpandLayersTogglesEveryPhasesLane) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString file = dir.filePath(QStringLiteral("engine.sqlite"));
  ASSERT_TRUE(moewb::testing::writeParallelTrace(file.toStdString(), 1, 1, 2).isOk());
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1280, 800);
  window.show();
  ASSERT_TRUE(window.openFile(file).isOk());
  QAction* expand = nullptr;
  for (QAction* menu : window.menuBar()->actions()) {
    if (!menu->menu()) continue;
    for (QAction* a : menu->menu()->actions()) {
      if (a->text().remove(QLatin1Char('&')) == QStringLiteral("Expand layers")) expand = a;
    }
  }
  ASSERT_NE(expand, nullptr) << "View > Expand layers is missing";
  TimelineView* view = window.timelineView();
  const size_t lanes = window.document()->timeline().lanes().size();
  ASSERT_EQ(view->laneRows().size(), lanes);
  expand->trigger();
  EXPECT_GT(view->laneRows().size(), lanes);
  expand->trigger();
  EXPECT_EQ(view->laneRows().size(), lanes);
}

}  // namespace
}  // namespace moewb::gui
