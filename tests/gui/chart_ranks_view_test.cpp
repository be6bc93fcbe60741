// Offscreen, a 1280x720 main window on a real trace of 4 in-process ranks (EP = 4): the step
// charts draw a line per rank named in the legend and the hover, the lr (and the loss where the
// ranks agree bitwise) once as "all 4 ranks equal"; the toolbar's Ranks choice switches to one
// rank ("rank 2, step N: ...") and to the min / median / max band; a one-rank trace hides it.
// The memory chart draws each rank's total account (one line per rank, or the band) and, for
// one chosen rank, that rank's four categories.
#include <gtest/gtest.h>

#include <QApplication>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "chart_ranks_choice.h"
#include "chart_view.h"
#include "main_window.h"
#include "moewb/base/units.h"
#include "moewb/gui/step_table_model.h"
#include "moewb/gui/trace_document.h"
#include "parallel_trace.h"
#include "theme.h"

namespace moewb::gui {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kSteps = 4;

class ChartRanksViewTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new QTemporaryDir;
    s_parallel = s_dir->filePath(QStringLiteral("ep4.sqlite"));
    s_single = s_dir->filePath(QStringLiteral("one.sqlite"));
    Status status =
        moewb::testing::writeParallelTrace(s_parallel.toStdString(), kWorld, kWorld, kSteps);
    ASSERT_TRUE(status.isOk()) << status.toString();
    status = moewb::testing::writeParallelTrace(s_single.toStdString(), 1, 1, kSteps);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  void SetUp() override {
    theme::apply(*qApp);
    m_window.setErrorDialogsEnabled(false);
    m_window.resize(1280, 720);
    m_window.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&m_window));
  }
  // Opens `path` and waits for its step rows.
  void open(const QString& path, size_t rows) {
    ASSERT_TRUE(m_window.openFile(path).isOk());
    ASSERT_TRUE(QTest::qWaitFor(
        [&] { return m_window.document()->stepModel()->rows().size() == rows; }, 20'000));
    QApplication::processEvents();
  }
  // Whether every rank's value of `value` is bitwise the same at every step.
  bool ranksAgree(double (*value)(const storage::StepRow&)) {
    std::map<int64_t, double> first;
    for (const storage::StepRow& r : m_window.document()->stepModel()->rows()) {
      const double v = value(r);
      auto [it, added] = first.emplace(r.step, v);
      if (!added && std::memcmp(&it->second, &v, sizeof v) != 0) return false;
    }
    return true;
  }
  // Hovers `chart` over the point of step `step` (the first pixel column whose nearest point it
  // is, at the first height inside the plot).
  static void hoverStep(ChartView* chart, int64_t step) {
    for (int px = 0; px < chart->width(); ++px) {
      const std::optional<double> near = chart->nearestX(px);
      if (!near || *near != double(step)) continue;
      for (int py = 0; py < chart->height(); py += 2) {
        QTest::mouseMove(chart, QPoint(px, py));
        QApplication::processEvents();
        if (chart->hoverX() == std::optional<double>(double(step))) return;
      }
    }
    ADD_FAILURE() << "no hover position for step " << step;
  }

  static QTemporaryDir* s_dir;
  static QString s_parallel;
  static QString s_single;
  MainWindow m_window;
};

QTemporaryDir* ChartRanksViewTest::s_dir = nullptr;
QString ChartRanksViewTest::s_parallel;
QString ChartRanksViewTest::s_single;

QStringList names(const ChartView* chart) {
  QStringList out;
  for (const ChartSeries& s : chart->series()) out << s.name;
  return out;
}

TEST_F(ChartRanksViewTest, EveryRankHasItsLineInTheStepCharts) {
  open(s_parallel, size_t(kWorld * kSteps));
  EXPECT_TRUE(m_window.ranksAction()->isVisible());
  EXPECT_EQ(m_window.ranksChoice()->ranks(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_FALSE(m_window.stepTable()->isColumnHidden(StepTableModel::kRank));
  const QStringList perRank = {QStringLiteral("rank 0"), QStringLiteral("rank 1"),
                               QStringLiteral("rank 2"), QStringLiteral("rank 3")};
  const QStringList equal = {QStringLiteral("all 4 ranks equal")};
  // The ranks' step spans differ (each rank times its own step).
  ASSERT_FALSE(ranksAgree([](const storage::StepRow& r) { return double(r.endNs - r.startNs); }));
  ChartView* time = m_window.stepTimeChart();
  EXPECT_EQ(names(time), perRank);
  for (const ChartSeries& s : time->series()) EXPECT_EQ(s.points.size(), size_t(kSteps));
  // Same hue, different shades.
  EXPECT_NE(time->series()[0].color, time->series()[3].color);
  EXPECT_EQ(time->series()[0].color.hslHue(), time->series()[3].color.hslHue());
  // Rank 2's value at step 2 is its row's span.
  double rank2Ms = 0;
  for (const storage::StepRow& r : m_window.document()->stepModel()->rows()) {
    if (r.rank == 2 && r.step == 2) rank2Ms = double(r.endNs - r.startNs) / double(kNsPerMs);
  }
  EXPECT_EQ(time->series()[2].points[2], QPointF(2, rank2Ms));
  // The learning rate follows one schedule: drawn once.
  ASSERT_TRUE(ranksAgree([](const storage::StepRow& r) { return r.lr; }));
  EXPECT_EQ(names(m_window.lrChart()), equal);
  const bool lossAgrees = ranksAgree([](const storage::StepRow& r) { return r.loss; });
  EXPECT_EQ(names(m_window.lossChart()), lossAgrees ? equal : perRank);
  // The hover names every rank's value at the step.
  hoverStep(time, 2);
  const QStringList lines = time->hoverLines();
  ASSERT_EQ(lines.size(), 1 + kWorld) << lines.join(QLatin1Char('|')).toStdString();
  EXPECT_EQ(lines[0], QStringLiteral("step 2"));
  EXPECT_TRUE(lines[3].startsWith(QStringLiteral("rank 2: "))) << lines[3].toStdString();
}

TEST_F(ChartRanksViewTest, TheRanksChoiceShowsOneRankOrTheBand) {
  open(s_parallel, size_t(kWorld * kSteps));
  RanksChoice* choice = m_window.ranksChoice();
  ChartView* time = m_window.stepTimeChart();
  choice->setCurrentIndex(choice->findText(QStringLiteral("rank 2")));
  QApplication::processEvents();
  EXPECT_EQ(choice->choice(), (RankChoice{RankChoice::View::kOne, 2}));
  ASSERT_EQ(names(time), QStringList{QStringLiteral("rank 2")});
  EXPECT_EQ(names(m_window.lrChart()), QStringList{QStringLiteral("rank 2")});
  hoverStep(time, 1);
  ASSERT_EQ(time->hoverLines().size(), 1);
  EXPECT_TRUE(time->hoverLines()[0].startsWith(QStringLiteral("rank 2, step 1: ")))
      << time->hoverLines()[0].toStdString();

  choice->setCurrentIndex(choice->findText(QStringLiteral("min / median / max")));
  QApplication::processEvents();
  ASSERT_EQ(time->series().size(), 3u);
  EXPECT_EQ(time->series()[0].name, QStringLiteral("min of 4 ranks"));
  EXPECT_EQ(time->series()[2].name, QStringLiteral("max of 4 ranks"));
  EXPECT_TRUE(time->series()[0].dashed);
  for (size_t i = 0; i < size_t(kSteps); ++i) {
    EXPECT_LE(time->series()[0].points[i].y(), time->series()[1].points[i].y());
    EXPECT_LE(time->series()[1].points[i].y(), time->series()[2].points[i].y());
    EXPECT_LT(time->series()[0].points[i].y(), time->series()[2].points[i].y());
  }
  // The choice is kept when the same trace reopens.
  open(s_parallel, size_t(kWorld * kSteps));
  EXPECT_EQ(choice->choice().view, RankChoice::View::kBand);
  // The Ranks choice on the toolbar does not widen the window (the toolbar folds into its
  // extension menu).
  ASSERT_TRUE(m_window.ranksAction()->isVisible());
  QApplication::processEvents();  // the reopened trace's docks laid out
  const QSize with = m_window.minimumSizeHint().expandedTo(m_window.minimumSize());
  m_window.ranksAction()->setVisible(false);
  QApplication::processEvents();
  const QSize without = m_window.minimumSizeHint().expandedTo(m_window.minimumSize());
  EXPECT_EQ(with, without);
}

TEST_F(ChartRanksViewTest, TheMemoryChartHasALinePerRankAndOneRanksCategories) {
  open(s_parallel, size_t(kWorld * kSteps));
  // The engine writes every rank's memory account on that rank's counter track.
  std::map<int32_t, std::map<int64_t, double>> totalMiB;  // rank -> step -> total
  std::map<int64_t, double> rank2Weights;                 // step -> MiB
  for (const MemorySample& m : m_window.document()->memory()) {
    double total = 0;
    for (double bytes : m.bytes) total += std::isnan(bytes) ? 0 : bytes;
    totalMiB[m.rank][m.step] = total / 1048576.0;
    const double weights = m.bytes[MemorySample::kWeights];
    if (m.rank == 2 && !std::isnan(weights)) rank2Weights[m.step] = weights / 1048576.0;
  }
  ASSERT_EQ(totalMiB.size(), size_t(kWorld));
  ChartView* memory = m_window.memoryChart();
  EXPECT_EQ(memory->title(), QStringLiteral("Memory per step (total per rank)"));
  bool equal = true;
  for (const auto& [rank, steps] : totalMiB) equal = equal && steps == totalMiB.at(0);
  if (equal) {
    EXPECT_EQ(names(memory), QStringList{QStringLiteral("all 4 ranks equal")});
  } else {
    ASSERT_EQ(names(memory), (QStringList{QStringLiteral("rank 0"), QStringLiteral("rank 1"),
                                          QStringLiteral("rank 2"), QStringLiteral("rank 3")}));
    for (const QPointF& p : memory->series()[2].points) {
      EXPECT_DOUBLE_EQ(p.y(), totalMiB.at(2).at(int64_t(p.x()))) << "step " << p.x();
    }
  }
  // One rank: its four categories, as a one-rank trace's chart.
  RanksChoice* choice = m_window.ranksChoice();
  choice->setCurrentIndex(choice->findText(QStringLiteral("rank 2")));
  QApplication::processEvents();
  EXPECT_EQ(memory->title(), QStringLiteral("Memory per step (rank 2)"));
  ASSERT_EQ(memory->series().size(), size_t(MemorySample::kCategoryCount));
  EXPECT_EQ(memory->series()[MemorySample::kWeights].name, QStringLiteral("weights"));
  const auto& weights = memory->series()[MemorySample::kWeights].points;
  ASSERT_EQ(weights.size(), size_t(kSteps));
  ASSERT_EQ(weights.size(), rank2Weights.size());
  for (const QPointF& p : weights) {
    EXPECT_DOUBLE_EQ(p.y(), rank2Weights.at(int64_t(p.x()))) << "step " << p.x();
  }
  // The band: min, median and max of the ranks' totals.
  choice->setCurrentIndex(choice->findText(QStringLiteral("min / median / max")));
  QApplication::processEvents();
  EXPECT_EQ(memory->title(), QStringLiteral("Memory per step (total per rank)"));
  EXPECT_EQ(memory->series().size(), equal ? 1u : 3u);
}

TEST_F(ChartRanksViewTest, OneRankTraceHidesTheChoiceAndDrawsOneUnnamedLine) {
  open(s_single, size_t(kSteps));
  EXPECT_FALSE(m_window.ranksAction()->isVisible());
  EXPECT_TRUE(m_window.stepTable()->isColumnHidden(StepTableModel::kRank));
  ASSERT_EQ(m_window.stepTimeChart()->series().size(), 1u);
  EXPECT_TRUE(m_window.stepTimeChart()->series()[0].name.isEmpty());
  EXPECT_EQ(m_window.stepTimeChart()->series()[0].points.size(), size_t(kSteps));
  EXPECT_EQ(m_window.memoryChart()->title(), QStringLiteral("Memory per step"));
}

}  // namespace
}  // namespace moewb::gui
