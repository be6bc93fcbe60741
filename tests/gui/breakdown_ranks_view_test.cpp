// The Step breakdown dock on parallel traces in a real window (offscreen): per step the slowest
// rank's bar with its rank, step time, the median rank's and the gap in the hover; the dock's
// Ranks choice switches to one rank's bars and back; a one-rank trace shows no choice and its
// rank 0 bars as before.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QDockWidget>
#include <QSettings>
#include <QTemporaryDir>
#include <QTest>

#include "main_window.h"
#include "moewb/gui/step_breakdown_model.h"
#include "slow_rank_trace.h"
#include "step_breakdown_view.h"
#include "test_trace.h"
#include "theme.h"

namespace moewb::gui {
namespace {

namespace t = moewb::gui::testing;

class BreakdownRanksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
    theme::apply(*qApp);
  }
  // A 1280x720 window showing `path` with the Step breakdown dock raised, once read.
  std::unique_ptr<MainWindow> openWindow(const QString& path, size_t steps) {
    auto window = std::make_unique<MainWindow>();
    window->setErrorDialogsEnabled(false);
    window->resize(1280, 720);
    window->show();
    EXPECT_TRUE(QTest::qWaitForWindowExposed(window.get()));
    EXPECT_TRUE(window->openFile(path).isOk());
    window->breakdownDock()->show();
    window->breakdownDock()->raise();
    StepBreakdownModel* model = window->breakdownModel();
    EXPECT_TRUE(QTest::qWaitFor(
        [&] { return !model->isBusy() && model->data().steps.size() == steps; }, 10'000));
    QApplication::processEvents();
    return window;
  }
  // The middle of bar `index`, near its bottom.
  static QPoint barPoint(const StepBreakdownView& view, size_t index) {
    const QRectF plot = view.plotRect();
    const BreakdownColumn& bar = view.columns()[index];
    return {int(plot.left() + (bar.x0 + bar.x1) / 2), int(plot.bottom() - 3)};
  }
  QTemporaryDir m_dir;
};

TEST_F(BreakdownRanksTest, SlowestRankPerStepByDefaultAndOneRankByChoice) {
  const QString path = m_dir.filePath(QStringLiteral("slow.sqlite"));
  const Status written = t::writeSlowRankTrace(path.toStdString());
  ASSERT_TRUE(written.isOk()) << written.toString();
  auto window = openWindow(path, size_t(t::kSlowRankSteps));
  StepBreakdownView* view = window->breakdownView();
  QComboBox* ranks = window->breakdownRanks();
  ASSERT_TRUE(view->isVisible());
  EXPECT_TRUE(ranks->isVisible());
  ASSERT_EQ(ranks->count(), 1 + t::kSlowRankWorld);
  EXPECT_EQ(ranks->currentText(), QStringLiteral("slowest rank"));
  EXPECT_EQ(ranks->itemText(3), QStringLiteral("rank 2"));
  EXPECT_TRUE(view->sourceText().contains(QStringLiteral("per step the slowest of 4 ranks")))
      << view->sourceText().toStdString();
  ASSERT_EQ(view->data().steps.size(), size_t(t::kSlowRankSteps));
  ASSERT_EQ(view->columns().size(), size_t(t::kSlowRankSteps));
  for (const StepBreakdown& b : view->data().steps) {
    EXPECT_EQ(b.rank, t::slowRankExpected(b.step)) << "step " << b.step;
  }
  // Step 1: rank 2 took 3.5 ms, the median rank 2.0 ms.
  QTest::mouseMove(view, barPoint(*view, 1));
  QString text = view->hoverText(barPoint(*view, 1));
  EXPECT_TRUE(text.startsWith(QStringLiteral("step 1: 3.50 ms"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("slowest of 4 ranks: rank 2, 3.50 ms; median rank ")))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral(": 2.00 ms; gap 1.50 ms (75.0%)")))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("experts: 2.30 ms"))) << text.toStdString();

  // Rank 3: its own steps (slow in step 2 only).
  ranks->setCurrentIndex(ranks->findData(3));
  QApplication::processEvents();
  EXPECT_EQ(view->data().shownRank, std::optional<int32_t>(3));
  EXPECT_TRUE(view->sourceText().contains(QStringLiteral("rank 3 of 4")));
  ASSERT_EQ(view->data().steps.size(), size_t(t::kSlowRankSteps));
  for (const StepBreakdown& b : view->data().steps) {
    EXPECT_EQ(b.rank, 3);
    EXPECT_EQ(b.durNs, t::kSlowRankBaseNs + t::slowRankExtraNs(b.step, 3));
  }
  text = view->hoverText(barPoint(*view, 1));
  EXPECT_TRUE(text.startsWith(QStringLiteral("step 1: 2.00 ms"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("rank 3"))) << text.toStdString();
  // A new read (a live refresh) keeps the choice.
  window->breakdownModel()->reload();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !window->breakdownModel()->isBusy(); }, 10'000));
  QApplication::processEvents();
  EXPECT_EQ(ranks->currentText(), QStringLiteral("rank 3"));
  EXPECT_EQ(view->data().shownRank, std::optional<int32_t>(3));
  ranks->setCurrentIndex(0);
  QApplication::processEvents();
  EXPECT_FALSE(view->data().shownRank.has_value());
  EXPECT_EQ(view->data().steps[2].rank, 3);
  EXPECT_EQ(view->data().steps[1].rank, 2);
}

TEST_F(BreakdownRanksTest, OneRankTraceHasNoChoiceAndShowsRankZero) {
  const QString path = m_dir.filePath(QStringLiteral("one.sqlite"));
  auto trace = t::TestTrace::create(path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE((*trace)->finish().isOk());
  auto window = openWindow(path, 3);
  StepBreakdownView* view = window->breakdownView();
  EXPECT_FALSE(window->breakdownRanks()->isVisible());
  EXPECT_FALSE(view->data().isParallel());
  EXPECT_EQ(view->sourceText(),
            QStringLiteral("from host phases (rank 0; no GPU capture in this trace)"));
  const QString text = view->hoverText(barPoint(*view, 0));
  EXPECT_TRUE(text.startsWith(QStringLiteral("step 0: 2.00 ms"))) << text.toStdString();
  EXPECT_FALSE(text.contains(QStringLiteral("rank"))) << text.toStdString();
}

}  // namespace
}  // namespace moewb::gui
