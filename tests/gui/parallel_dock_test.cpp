// Offscreen: the main window shows the Parallelism dock for a trace of 4 in-process ranks (EP =
// 4) and hides it for a one-rank trace; the dock's matrix is drawn; clicking a collective's slice
// on one rank's comm track outlines the matching slices on all four comm tracks and selects the
// collective in the dock's table; clicking a table row outlines that collective.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QDockWidget>
#include <QImage>
#include <QItemSelectionModel>
#include <QSet>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTemporaryDir>
#include <set>

#include "main_window.h"
#include "moewb/gui/parallel_model.h"
#include "moewb/storage/trace_reader.h"
#include "parallel_matrix_view.h"
#include "parallel_panel.h"
#include "parallel_trace.h"
#include "theme.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

constexpr int kWorld = 4;

class ParallelDockTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new QTemporaryDir;
    s_parallel = s_dir->filePath(QStringLiteral("ep4.sqlite"));
    s_single = s_dir->filePath(QStringLiteral("one.sqlite"));
    Status status = moewb::testing::writeParallelTrace(s_parallel.toStdString(), kWorld, kWorld, 3);
    ASSERT_TRUE(status.isOk()) << status.toString();
    status = moewb::testing::writeParallelTrace(s_single.toStdString(), 1, 1, 3);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  void SetUp() override {
    theme::apply(*qApp);
    m_window.setErrorDialogsEnabled(false);
    m_window.resize(2000, 1100);
    m_window.show();
  }

  static QTemporaryDir* s_dir;
  static QString s_parallel;
  static QString s_single;
  MainWindow m_window;
};

QTemporaryDir* ParallelDockTest::s_dir = nullptr;
QString ParallelDockTest::s_parallel;
QString ParallelDockTest::s_single;

TEST_F(ParallelDockTest, ShownForAParallelTraceAndHiddenForOneRank) {
  QDockWidget* dock = m_window.parallelDock();
  ASSERT_NE(dock, nullptr);
  EXPECT_FALSE(dock->isVisible());
  ASSERT_TRUE(m_window.openFile(s_parallel).isOk());
  QApplication::processEvents();
  EXPECT_TRUE(dock->isVisible());
  EXPECT_EQ(dock->windowTitle(), QStringLiteral("Parallelism"));
  ParallelPanel* panel = m_window.parallelPanel();
  EXPECT_EQ(panel->stepSelector()->currentText(), QStringLiteral("step 2"));
  EXPECT_EQ(panel->phaseSelector()->currentText(), QStringLiteral("dispatch"));
  EXPECT_EQ(panel->rankTable()->model()->rowCount(), kWorld);
  EXPECT_GT(panel->collectiveTable()->model()->rowCount(), 0);
  EXPECT_TRUE(panel->summaryText().contains(QStringLiteral("4 ranks")))
      << panel->summaryText().toStdString();

  // The matrix is drawn: many colours, and the 4 x 4 cells are laid out inside the view.
  ParallelMatrixView* matrix = panel->matrixView();
  ASSERT_GT(matrix->width(), 100);
  const QImage image = matrix->grab().toImage().convertToFormat(QImage::Format_RGB32);
  QSet<QRgb> colors;
  for (int y = 0; y < image.height(); y += 2) {
    for (int x = 0; x < image.width(); x += 2) colors.insert(image.pixel(x, y));
  }
  EXPECT_GT(colors.size(), 10) << "matrix looks blank";
  EXPECT_TRUE(matrix->rect().contains(matrix->cellRect(kWorld, kWorld).toRect().center()));

  ASSERT_TRUE(m_window.openFile(s_single).isOk());
  QApplication::processEvents();
  EXPECT_FALSE(dock->isVisible());
  ASSERT_TRUE(m_window.openFile(s_parallel).isOk());
  QApplication::processEvents();
  EXPECT_TRUE(dock->isVisible());
}

TEST_F(ParallelDockTest, ClickingACollectiveSliceOutlinesItsPeersOnEveryCommTrack) {
  ASSERT_TRUE(m_window.openFile(s_parallel).isOk());
  QApplication::processEvents();
  auto reader = storage::TraceReader::open(s_parallel.toStdString());
  ASSERT_TRUE(reader.isOk());
  auto collectives = (*reader)->stepCollectives(1);
  ASSERT_TRUE(collectives.isOk());
  const storage::MatchedCollective* dispatch = nullptr;
  for (const auto& c : *collectives) {
    if (c.phase == "dispatch" && c.layer == 1) dispatch = &c;
  }
  ASSERT_NE(dispatch, nullptr);
  ASSERT_EQ(dispatch->arrivals.size(), size_t(kWorld));

  // Rank 2's slice of it, as a click on the timeline reports it.
  const storage::CollectiveArrival& clicked = dispatch->arrivals[2];
  TimelineView* timeline = m_window.timelineView();
  emit timeline->sliceActivated(clicked.track.value, clicked.startNs);
  const std::vector<TimelineHighlight>& outlined = timeline->highlightedSlices();
  ASSERT_EQ(outlined.size(), size_t(kWorld));
  auto tracks = (*reader)->tracks();
  ASSERT_TRUE(tracks.isOk());
  std::set<int32_t> ranks;
  for (size_t i = 0; i < outlined.size(); ++i) {
    EXPECT_EQ(outlined[i].track, dispatch->arrivals[i].track);
    EXPECT_EQ(outlined[i].startNs, dispatch->arrivals[i].startNs);
    for (const storage::TrackRow& t : *tracks) {
      if (t.id == outlined[i].track && t.kind == "comm") ranks.insert(t.rank);
    }
  }
  EXPECT_EQ(ranks, (std::set<int32_t>{0, 1, 2, 3}));  // one comm track of every rank

  // The dock switched to step 1 and selected that collective's row.
  ParallelPanel* panel = m_window.parallelPanel();
  EXPECT_EQ(m_window.parallelModel()->collectiveStep(), 1);
  const QModelIndexList selected = panel->collectiveTable()->selectionModel()->selectedRows();
  ASSERT_EQ(selected.size(), 1);
  const QAbstractItemModel* table = panel->collectiveTable()->model();
  EXPECT_EQ(table->index(selected[0].row(), ParallelCollectiveModel::kSeq)
                .data(ParallelCollectiveModel::kSortRole)
                .toLongLong(),
            dispatch->seq);
  EXPECT_EQ(table->index(selected[0].row(), ParallelCollectiveModel::kGroup).data().toString(),
            QStringLiteral("ep"));

  // A slice that is no collective (the step slice on rank 0's trainer thread) drops the outline.
  auto steps = (*reader)->slices(storage::TimeWindow::all());
  ASSERT_TRUE(steps.isOk());
  const storage::SliceRow* stepSlice = nullptr;
  for (const auto& s : *steps) {
    if (s.category == storage::kCategoryStep && s.step == 1) stepSlice = &s;
  }
  ASSERT_NE(stepSlice, nullptr);
  emit timeline->sliceActivated(stepSlice->track.value, stepSlice->startNs);
  EXPECT_TRUE(timeline->highlightedSlices().empty());

  // A click on the first table row outlines its collective and zooms the timeline to it.
  emit panel->collectiveTable()->clicked(table->index(0, 0));
  const auto* first = m_window.parallelModel()->collectiveModel()->collective(
      qobject_cast<const QSortFilterProxyModel*>(table)->mapToSource(table->index(0, 0)).row());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(timeline->highlightedSlices().size(), first->arrivals.size());
  EXPECT_LE(timeline->timeGeometry().startNs, first->firstStartNs);
  EXPECT_GE(timeline->timeGeometry().endNs, first->endNs);

  // The outline is painted in the accent colour on the timeline, and goes with the highlight.
  auto accentPixels = [timeline] {
    const QImage image = timeline->grab().toImage().convertToFormat(QImage::Format_RGB32);
    int count = 0;
    for (int y = 0; y < image.height(); ++y) {
      for (int x = 0; x < image.width(); ++x) count += image.pixel(x, y) == theme::accent().rgb();
    }
    return count;
  };
  const int outlinedPixels = accentPixels();
  timeline->setHighlightedSlices({});
  EXPECT_GT(outlinedPixels, accentPixels() + 4 * 8);  // 4 outlines, each at least 8 px
}

// With MOEWB_PARALLEL_SCREENSHOT=OUT.png: opens MOEWB_PARALLEL_TRACE (default: the 4-rank test
// trace), picks the all-to-all that waited longest in the last step, shows 2 ms around it and
// saves the window as PNG (how docs/screenshot-parallel.png was made). Skipped otherwise.
TEST_F(ParallelDockTest, ScreenshotOnRequest) {
  const QByteArray out = qgetenv("MOEWB_PARALLEL_SCREENSHOT");
  if (out.isEmpty()) GTEST_SKIP() << "set MOEWB_PARALLEL_SCREENSHOT=OUT.png to save one";
  const QByteArray trace = qgetenv("MOEWB_PARALLEL_TRACE");
  m_window.resize(2200, 1500);
  // A timeline tall enough for every rank's lanes and comm track.
  if (auto* central = qobject_cast<QSplitter*>(m_window.centralWidget())) {
    central->setSizes({570, 800});
  }
  ASSERT_TRUE(
      m_window.openFile(trace.isEmpty() ? s_parallel : QString::fromLocal8Bit(trace)).isOk());
  QApplication::processEvents();
  QTableView* table = m_window.parallelPanel()->collectiveTable();
  ASSERT_GT(table->model()->rowCount(), 0);
  int row = 0;  // sorted by wait: the first all-to-all
  while (row + 1 < table->model()->rowCount() &&
         table->model()->index(row, ParallelCollectiveModel::kOp).data().toString() !=
             QStringLiteral("all_to_all_v")) {
    ++row;
  }
  table->selectRow(row);
  emit table->clicked(table->model()->index(row, 0));
  const auto* picked = m_window.parallelModel()->collectiveModel()->collective(
      qobject_cast<const QSortFilterProxyModel*>(table->model())
          ->mapToSource(table->model()->index(row, 0))
          .row());
  ASSERT_NE(picked, nullptr);
  constexpr int64_t kAroundNs = 1'000'000;
  m_window.timelineView()->showTimeRange(
      {picked->firstStartNs - kAroundNs, picked->endNs + kAroundNs});
  QApplication::processEvents();
  ASSERT_TRUE(m_window.grab().save(QString::fromLocal8Bit(out), "PNG"));
}

}  // namespace
}  // namespace moewb::gui
