// Range selection and search in a real window (offscreen) on a trace the engine wrote: Shift+drag
// on the timeline selects a range and the Selection dock's table counts exactly the slices that
// overlap it (checked against the reader's own window query), double-clicking a row zooms to
// that name's longest occurrence, Esc clears; Ctrl+F finds slices by name, Enter / Shift+Enter /
// F3 step through the matches ("k of n"), Esc closes the search. With MOEWB_SELECTION_SCREENSHOT
// set, the window with a selection and a search is saved there as PNG.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDockWidget>
#include <QHeaderView>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <map>

#include "main_window.h"
#include "moewb/gui/selection_model.h"
#include "moewb/storage/trace_reader.h"
#include "parallel_trace.h"
#include "theme.h"
#include "timeline_search_bar.h"
#include "timeline_view.h"

namespace moewb::gui {
namespace {

struct Expected {
  int64_t count = 0;
  int64_t totalNs = 0;
};

class TimelineRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    m_file = m_dir.filePath(QStringLiteral("engine.sqlite"));
    const Status written = moewb::testing::writeParallelTrace(m_file.toStdString(), 1, 1, 3);
    ASSERT_TRUE(written.isOk()) << written.toString();
    theme::apply(*qApp);
    m_window.setErrorDialogsEnabled(false);
    m_window.resize(1280, 800);
    m_window.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&m_window));
    ASSERT_TRUE(m_window.openFile(m_file).isOk());
    m_view = m_window.timelineView();
    m_view->fitAll();
    QApplication::processEvents();
  }
  // Per name, the host slices overlapping `range` and their time inside it, from the reader.
  std::map<std::string, Expected> expected(TimeRange range) const {
    auto reader = storage::TraceReader::open(m_file.toStdString());
    EXPECT_TRUE(reader.isOk());
    std::map<std::string, Expected> out;
    if (!reader.isOk()) return out;
    auto slices = reader.value()->slices({range.startNs, range.endNs});
    EXPECT_TRUE(slices.isOk());
    for (const storage::SliceRow& s : slices.value()) {
      Expected& e = out[s.name];
      ++e.count;
      e.totalNs += std::min(s.startNs + s.durNs, range.endNs) - std::max(s.startNs, range.startNs);
    }
    return out;
  }
  // Widget x of time `tNs` on the timeline.
  int xOf(int64_t tNs) const {
    const TimelineGeometry& g = m_view->timeGeometry();
    return int(m_view->width() - g.widthPx + g.xOf(tNs));
  }
  QTemporaryDir m_dir;
  QString m_file;
  MainWindow m_window;
  TimelineView* m_view = nullptr;
};

TEST_F(TimelineRangeTest, ShiftDragSelectsARangeAndTheTableCountsWhatIsInside) {
  // Show step 1 (the run has gaps between steps while it commits them), then drag over the
  // middle 60 %: the range cuts the step, its passes and phases at both edges.
  const TimelineLane& steps = m_window.document()->timeline().lanes().front();
  ASSERT_EQ(steps.depth, 0);
  ASSERT_EQ(steps.slices.size(), 3u);
  m_view->showTimeRange({steps.slices[1].startNs, steps.slices[1].endNs()});
  const TimelineGeometry g = m_view->timeGeometry();
  const double gutter = m_view->width() - g.widthPx;
  const QPoint from(int(gutter + g.widthPx * 0.2), 60), to(int(gutter + g.widthPx * 0.8), 60);
  QSignalSpy selected(m_view, &TimelineView::rangeSelected);
  QTest::mousePress(m_view, Qt::LeftButton, Qt::ShiftModifier, from);
  QTest::mouseMove(m_view, QPoint((from.x() + to.x()) / 2, 60));
  QTest::mouseMove(m_view, to);
  QTest::mouseRelease(m_view, Qt::LeftButton, Qt::ShiftModifier, to);
  ASSERT_EQ(selected.count(), 1);
  ASSERT_TRUE(m_view->selectedRange().has_value());
  const TimeRange range = *m_view->selectedRange();
  EXPECT_NEAR(double(range.startNs), g.timeAt(from.x() - gutter), g.nsPerPx());
  EXPECT_NEAR(double(range.endNs), g.timeAt(to.x() - gutter), g.nsPerPx());
  EXPECT_EQ(g.startNs, m_view->timeGeometry().startNs);  // a Shift+drag does not pan

  SelectionModel* model = m_window.selectionModel();
  ASSERT_TRUE(model->range().has_value());
  EXPECT_EQ(*model->range(), range);
  EXPECT_TRUE(m_window.selectionDock()->isVisible());
  const auto want = expected(range);
  ASSERT_GE(want.size(), 2u);
  // The step straddles both edges: it counts once, with only the range's time.
  ASSERT_EQ(want.at("step").count, 1);
  EXPECT_EQ(want.at("step").totalNs, range.durNs());
  ASSERT_EQ(size_t(model->rowCount()), want.size());
  for (const auto& [name, e] : want) {
    const int row = model->rowOf(name);
    ASSERT_GE(row, 0) << name;
    EXPECT_EQ(model->rows()[size_t(row)].count, e.count) << name;
    EXPECT_EQ(model->rows()[size_t(row)].totalNs, e.totalNs) << name;
  }
  // The table shows every row, sorted by total time, largest first.
  QTableView* table = m_window.selectionTable();
  QAbstractItemModel* shown = table->model();
  ASSERT_EQ(shown->rowCount(), model->rowCount());
  for (int r = 1; r < shown->rowCount(); ++r) {
    EXPECT_GE(
        shown->index(r - 1, SelectionModel::kTotal).data(SelectionModel::kSortRole).toLongLong(),
        shown->index(r, SelectionModel::kTotal).data(SelectionModel::kSortRole).toLongLong());
  }
  // Clicking a header sorts by that column instead.
  QTest::mouseClick(
      table->horizontalHeader()->viewport(), Qt::LeftButton, {},
      QPoint(table->horizontalHeader()->sectionViewportPosition(SelectionModel::kCount) + 5, 5));
  EXPECT_EQ(table->horizontalHeader()->sortIndicatorSection(), int(SelectionModel::kCount));
  const bool ascending = table->horizontalHeader()->sortIndicatorOrder() == Qt::AscendingOrder;
  for (int r = 1; r < shown->rowCount(); ++r) {
    const qlonglong a =
        shown->index(r - 1, SelectionModel::kCount).data(SelectionModel::kSortRole).toLongLong();
    const qlonglong b =
        shown->index(r, SelectionModel::kCount).data(SelectionModel::kSortRole).toLongLong();
    EXPECT_TRUE(ascending ? a <= b : a >= b) << "row " << r;
  }

  // Double-clicking the first row zooms to its name's longest occurrence in the range.
  const QModelIndex first = shown->index(0, SelectionModel::kName);
  const std::string name = first.data().toString().toStdString();
  const TimeRange longest = model->longestOccurrence(model->rowOf(name));
  ASSERT_GT(longest.durNs(), 0);
  table->scrollTo(first);
  const QPoint at = table->visualRect(first).center();
  QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, at);  // as a user's first press
  QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, at);
  const TimelineGeometry& zoomed = m_view->timeGeometry();
  EXPECT_LE(zoomed.startNs, longest.startNs) << name;
  EXPECT_GE(zoomed.endNs, longest.endNs) << name;
  EXPECT_LT(double(zoomed.durNs()), 1.2 * double(longest.durNs()) + 2 * kMinWindowNs) << name;

  if (const QByteArray shot = qgetenv("MOEWB_SELECTION_SCREENSHOT"); !shot.isEmpty()) {
    m_view->showTimeRange({range.startNs - range.durNs() / 4, range.endNs + range.durNs() / 4});
    m_view->setSearchText(QStringLiteral("experts"));
    QApplication::processEvents();
    EXPECT_TRUE(m_window.saveScreenshot(QString::fromLocal8Bit(shot)));
  }

  // Esc on the timeline clears the range and empties the table.
  QSignalSpy cleared(m_view, &TimelineView::rangeCleared);
  m_view->setFocus();
  QTest::keyClick(m_view, Qt::Key_Escape);
  EXPECT_EQ(cleared.count(), 1);
  EXPECT_FALSE(m_view->selectedRange().has_value());
  EXPECT_EQ(model->rowCount(), 0);
  EXPECT_FALSE(model->range().has_value());
}

TEST_F(TimelineRangeTest, CtrlFFindsSlicesAndStepsThroughTheMatches) {
  const TimeRange all = m_window.document()->timeBounds();
  int64_t want = 0;
  for (const auto& [name, e] : expected(all)) {
    if (QString::fromStdString(name).contains(QStringLiteral("experts"), Qt::CaseInsensitive)) {
      want += e.count;
    }
  }
  ASSERT_GT(want, 2);
  m_view->setFocus();
  QTest::keyClick(m_view, Qt::Key_F, Qt::ControlModifier);
  TimelineSearchBar* bar = m_view->searchBar();
  ASSERT_TRUE(bar->isVisible());
  QTest::keyClicks(bar->field(), QStringLiteral("EXPERTS"));
  ASSERT_EQ(int64_t(m_view->search().matches().size()), want);
  EXPECT_EQ(bar->countText(), QStringLiteral("%1 matches").arg(want));

  // Zoom in so centring on a match moves the view.
  m_view->showTimeRange({all.startNs, all.startNs + all.durNs() / 20});
  QSignalSpy steps(m_view, &TimelineView::stepActivated);
  auto currentSlice = [&] {
    const SearchMatch& m = m_view->search().matches()[size_t(m_view->search().current())];
    return m_window.document()->timeline().lanes()[size_t(m.lane)].slices[size_t(m.index)];
  };
  auto expectInView = [&](const TimelineSlice& s) {
    const TimelineGeometry& g = m_view->timeGeometry();
    EXPECT_LE(g.startNs, s.startNs);
    EXPECT_GE(g.endNs, s.endNs());
  };
  QTest::keyClick(bar->field(), Qt::Key_Return);
  EXPECT_EQ(bar->countText(), QStringLiteral("1 of %1").arg(want));
  const TimelineSlice firstMatch = currentSlice();
  expectInView(firstMatch);
  ASSERT_EQ(steps.count(), 1);
  EXPECT_EQ(steps.at(0).at(0).toLongLong(), firstMatch.step);
  QTest::keyClick(bar->field(), Qt::Key_Return);
  EXPECT_EQ(bar->countText(), QStringLiteral("2 of %1").arg(want));
  EXPECT_GE(currentSlice().startNs, firstMatch.startNs);
  expectInView(currentSlice());
  QTest::keyClick(bar->field(), Qt::Key_Return, Qt::ShiftModifier);
  EXPECT_EQ(bar->countText(), QStringLiteral("1 of %1").arg(want));
  QTest::keyClick(bar->field(), Qt::Key_Return, Qt::ShiftModifier);  // wraps to the last
  EXPECT_EQ(bar->countText(), QStringLiteral("%1 of %1").arg(want));
  const TimelineSlice last = currentSlice();
  expectInView(last);
  const TimelineGeometry& g = m_view->timeGeometry();
  // Centred (unless the data's end stops it).
  if (g.endNs < all.endNs) {
    EXPECT_NEAR(double(last.startNs + last.durNs / 2), double(g.startNs + g.durNs() / 2),
                double(g.durNs()) * 0.01);
  }
  QTest::keyClick(bar->field(), Qt::Key_F3);  // wraps to the first
  EXPECT_EQ(bar->countText(), QStringLiteral("1 of %1").arg(want));
  QTest::keyClick(bar->field(), Qt::Key_Escape);
  EXPECT_FALSE(bar->isVisible());
  EXPECT_TRUE(m_view->search().matches().empty());

  QTest::keyClick(m_view, Qt::Key_F, Qt::ControlModifier);
  QTest::keyClicks(bar->field(), QStringLiteral("no such phase"));
  EXPECT_EQ(bar->countText(), QStringLiteral("no matches"));
}

}  // namespace
}  // namespace moewb::gui
