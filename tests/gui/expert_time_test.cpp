// Expert load over time on a real trace the engine trains here (tiny config, 12 steps, expert
// capacity 1.0 with skewed data so tokens are dropped, aux-loss-free bias on):
//   model:  ExpertTimeModel's expert x step matrix of each layer equals SQL on expert_load
//           (tokens and dropped summed over ranks, bias averaged); per step the imbalance is
//           max / mean and the drop rate dropped / routed; decimated columns keep the maximum of
//           the steps they cover (also a one-step spike among 1000 steps); findLayerSlice finds
//           the step's experts.fwd slice of the layer that SQL finds.
//   widget: in a real offscreen main window, the Expert load dock's "Over time" mode shows the
//           strip at its size (one column per step while they fit), and a QTest click on a cell
//           zooms the timeline to that step's experts.fwd slice of the layer and outlines it.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <QTemporaryDir>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

#include "../source_dir.h"
#include "moewb/engine/config.h"
#include "moewb/gui/expert_load_model.h"
#include "moewb/gui/expert_time_model.h"
#include "moewb/gui/trace_document.h"
#include "moewb/run/training_run.h"
#ifdef MOEWB_GUI_TEST_WIDGETS
#include <QApplication>
#include <QComboBox>
#include <QTest>

#include "expert_strip_view.h"
#include "expert_time_panel.h"
#include "heatmap_panel.h"
#include "heatmap_view.h"
#include "main_window.h"
#include "moewb/gui/palette.h"
#include "theme.h"
#include "timeline_view.h"
#endif

namespace moewb::gui {
namespace {

constexpr int kSteps = 12;

Status trainTiny(const QString& out) {
  auto config = engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  if (!config.isOk()) return config.status();
  config->run.threads = 1;
  config->model.seqLen = 32;
  for (const char* o : {"moe.capacity_factor=1.0", "data.skew=2", "moe.bias_update_rate=0.01"}) {
    MOEWB_RETURN_IF_ERROR(engine::applyOverride(*config, o));
  }
  auto run = run::TrainingRun::create(*config, {.outPath = out.toStdString(), .steps = kSteps});
  if (!run.isOk()) return run.status();
  auto summary = (*run)->run();
  return summary.isOk() ? Status::ok() : summary.status();
}

struct SqlCell {
  int64_t tokens = 0;
  int64_t dropped = 0;
  double bias = 0;
};

// (step, expert) -> cell of `layer`, straight from the expert_load table.
[[maybe_unused]] std::map<std::pair<int64_t, int>, SqlCell> sqlMatrix(const QString& path,
                                                                     int layer) {
  std::map<std::pair<int64_t, int>, SqlCell> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) ==
      SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    const char* sql =
        "SELECT step, expert, SUM(tokens), SUM(dropped), AVG(bias) FROM expert_load "
        "WHERE layer = ? GROUP BY step, expert";
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK) {
      sqlite3_bind_int(stmt, 1, layer);
      while (sqlite3_step(stmt) == SQLITE_ROW) {
        out[{sqlite3_column_int64(stmt, 0), sqlite3_column_int(stmt, 1)}] = {
            sqlite3_column_int64(stmt, 2), sqlite3_column_int64(stmt, 3),
            sqlite3_column_double(stmt, 4)};
      }
      sqlite3_finalize(stmt);
    }
  }
  sqlite3_close(db);
  return out;
}

// The earliest experts.fwd slice of (step, layer): {start_ns, dur_ns}, or {-1, -1}.
std::pair<int64_t, int64_t> sqlExpertsFwd(const QString& path, int64_t step, int layer) {
  std::pair<int64_t, int64_t> out{-1, -1};
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) ==
      SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    const char* sql =
        "SELECT start_ns, dur_ns FROM slice JOIN string ON string.id = slice.name "
        "WHERE string.text = 'experts.fwd' AND step = ? AND layer = ? ORDER BY start_ns LIMIT 1";
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK) {
      sqlite3_bind_int64(stmt, 1, step);
      sqlite3_bind_int(stmt, 2, layer);
      if (sqlite3_step(stmt) == SQLITE_ROW) {
        out = {sqlite3_column_int64(stmt, 0), sqlite3_column_int64(stmt, 1)};
      }
      sqlite3_finalize(stmt);
    }
  }
  sqlite3_close(db);
  return out;
}

class ExpertTimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new QTemporaryDir;
    s_path = s_dir->filePath(QStringLiteral("trace.sqlite"));
    const Status status = trainTiny(s_path);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  static QTemporaryDir* s_dir;
  static QString s_path;
};

QTemporaryDir* ExpertTimeTest::s_dir = nullptr;
QString ExpertTimeTest::s_path;

#ifndef MOEWB_GUI_TEST_WIDGETS
TEST_F(ExpertTimeTest, MatrixEqualsSqlWithDropRateAndImbalance) {
  TraceDocument document;
  ASSERT_TRUE(document.open(s_path).isOk());
  ExpertTimeModel model;
  model.setSource(document.expertLoadModel());
  ASSERT_EQ(model.layerCount(), 2);
  ASSERT_EQ(model.expertCount(), 8);
  int64_t droppedSeen = 0;
  bool biasSeen = false;
  for (int layer = 0; layer < model.layerCount(); ++layer) {
    model.setLayer(layer);
    EXPECT_EQ(model.layer(), layer);
    const auto sql = sqlMatrix(s_path, layer);
    ASSERT_EQ(model.steps().size(), size_t(kSteps));
    ASSERT_EQ(sql.size(), size_t(kSteps) * 8);
    for (int i = 0; i < int(model.steps().size()); ++i) {
      const int64_t step = model.steps()[size_t(i)];
      int64_t sum = 0, max = 0, dropped = 0;
      for (int e = 0; e < 8; ++e) {
        const SqlCell& cell = sql.at({step, e});
        EXPECT_EQ(model.tokens(i, e), cell.tokens) << "layer " << layer << " step " << step;
        EXPECT_EQ(model.dropped(i, e), cell.dropped) << "layer " << layer << " step " << step;
        EXPECT_DOUBLE_EQ(model.bias(i, e), cell.bias) << "layer " << layer << " step " << step;
        sum += cell.tokens;
        max = std::max(max, cell.tokens);
        dropped += cell.dropped;
        biasSeen = biasSeen || cell.bias != 0.0;
      }
      droppedSeen += dropped;
      ASSERT_GT(sum, 0);
      EXPECT_DOUBLE_EQ(model.dropRate(i), double(dropped) / double(sum));
      EXPECT_DOUBLE_EQ(model.imbalance(i), double(max) / (double(sum) / 8.0));
    }
  }
  // The config makes both visible; otherwise the comparisons above would prove little.
  EXPECT_GT(droppedSeen, 0);
  EXPECT_TRUE(biasSeen);
}

TEST_F(ExpertTimeTest, DecimatedColumnsKeepTheMaximumOfTheirSteps) {
  TraceDocument document;
  ASSERT_TRUE(document.open(s_path).isOk());
  ExpertTimeModel model;
  model.setSource(document.expertLoadModel());
  model.setLayer(1);
  const auto sql = sqlMatrix(s_path, 1);
  EXPECT_EQ(model.columns(1000).size(), size_t(kSteps));  // one column per step while they fit
  const auto cols = model.columns(5);
  ASSERT_EQ(cols.size(), 5u);
  int covered = 0;
  for (size_t c = 0; c < cols.size(); ++c) {
    EXPECT_EQ(cols[c].stepCount, int(cols[c].lastStep - cols[c].firstStep + 1));
    covered += cols[c].stepCount;
    double maxImbalance = 0;
    for (int e = 0; e < 8; ++e) {
      int64_t maxTokens = 0, maxDropped = 0;
      for (int64_t s = cols[c].firstStep; s <= cols[c].lastStep; ++s) {
        maxTokens = std::max(maxTokens, sql.at({s, e}).tokens);
        maxDropped = std::max(maxDropped, sql.at({s, e}).dropped);
      }
      EXPECT_EQ(cols[c].tokens[size_t(e)], maxTokens) << "column " << c << " expert " << e;
      EXPECT_EQ(cols[c].dropped[size_t(e)], maxDropped) << "column " << c << " expert " << e;
      EXPECT_DOUBLE_EQ(cols[c].bias[size_t(e)], sql.at({cols[c].lastStep, e}).bias);
    }
    for (int64_t s = cols[c].firstStep; s <= cols[c].lastStep; ++s) {
      maxImbalance = std::max(maxImbalance, model.imbalance(model.stepIndex(s)));
    }
    EXPECT_DOUBLE_EQ(cols[c].imbalance, maxImbalance);
  }
  EXPECT_EQ(covered, kSteps);
}

TEST(ExpertTimeModel, AOneStepSpikeSurvivesDecimationAndFollowsAppends) {
  // 1000 steps of 2 layers x 4 experts, 10 tokens each; layer 1 expert 2 gets 500 at step 637.
  std::vector<storage::ExpertLoadRow> rows;
  for (int64_t s = 0; s < 1000; ++s) {
    for (int l = 0; l < 2; ++l) {
      for (int e = 0; e < 4; ++e) {
        rows.push_back({.step = s, .layer = l, .expert = e, .rank = 0,
                        .tokens = l == 1 && e == 2 && s == 637 ? 500 : 10, .dropped = 0,
                        .bias = 0});
      }
    }
  }
  ExpertLoadModel source;
  source.setRows(rows);
  ExpertTimeModel model;
  model.setSource(&source);
  model.setLayer(1);
  const auto cols = model.columns(50);  // 20 steps per column
  ASSERT_EQ(cols.size(), 50u);
  for (const auto& c : cols) {
    const bool spike = c.firstStep <= 637 && 637 <= c.lastStep;
    EXPECT_EQ(c.tokens[2], spike ? 500 : 10);
    EXPECT_DOUBLE_EQ(c.load[2], spike ? 500.0 / (530.0 / 4.0) : 1.0);
  }
  EXPECT_DOUBLE_EQ(model.maxNormalizedLoad(), 500.0 / (530.0 / 4.0));
  // A live append: the model follows without a new setSource.
  int changes = 0;
  QObject::connect(&model, &ExpertTimeModel::changed, [&] { ++changes; });
  source.appendRows({{.step = 1000, .layer = 1, .expert = 0, .rank = 0, .tokens = 7,
                      .dropped = 3, .bias = 0.25}});
  EXPECT_GT(changes, 0);
  ASSERT_EQ(model.steps().size(), 1001u);
  EXPECT_EQ(model.tokens(1000, 0), 7);
  EXPECT_DOUBLE_EQ(model.dropRate(1000), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(model.bias(1000, 0), 0.25);
}

TEST_F(ExpertTimeTest, FindsTheStepsExpertsForwardSliceOfTheLayer) {
  TraceDocument document;
  ASSERT_TRUE(document.open(s_path).isOk());
  for (int64_t step : {0, 5, 11}) {
    for (int layer : {0, 1}) {
      const auto expected = sqlExpertsFwd(s_path, step, layer);
      ASSERT_GE(expected.first, 0);
      const auto found = findLayerSlice(document.timeline(), document.stepModel()->rows(),
                                        "experts.fwd", step, layer);
      ASSERT_TRUE(found.has_value());
      EXPECT_EQ(found->slice.startNs, expected.first);
      EXPECT_EQ(found->slice.durNs, expected.second);
      EXPECT_EQ(found->slice.step, step);
      EXPECT_EQ(found->slice.layer, layer);
    }
  }
  EXPECT_FALSE(findLayerSlice(document.timeline(), document.stepModel()->rows(), "experts.fwd",
                              kSteps + 5, 0).has_value());
}
#else
TEST_F(ExpertTimeTest, OverTimeStripAndACellClickZoomsTheTimeline) {
  theme::apply(*qApp);
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1600, 1000);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  ASSERT_TRUE(window.openFile(s_path).isOk());
  QApplication::processEvents();

  HeatmapPanel* dock = window.heatmapPanel();
  ExpertTimePanel* panel = dock->timePanel();
  EXPECT_FALSE(panel->isVisible());
  dock->modeChooser()->setCurrentIndex(HeatmapPanel::kOverTimeIndex);
  QApplication::processEvents();
  ASSERT_TRUE(panel->isVisible());
  EXPECT_FALSE(dock->view()->isVisible());
  panel->setLayer(1);
  QApplication::processEvents();
  ASSERT_EQ(panel->model()->layer(), 1);

  ExpertStripView* strip = panel->strip();
  const QRect r = strip->stripRect();
  EXPECT_GE(r.width(), 120);
  EXPECT_GE(r.height(), 40);
  EXPECT_LE(r.right(), strip->width());
  ASSERT_EQ(strip->columns().size(), size_t(std::min(kSteps, r.width())));

  // The hottest expert of step 7 in layer 1.
  const int column = 7;
  int hot = 0;
  for (int e = 1; e < 8; ++e) {
    if (strip->columns()[column].tokens[size_t(e)] > strip->columns()[column].tokens[size_t(hot)]) {
      hot = e;
    }
  }
  const int64_t step = strip->columns()[column].firstStep;
  EXPECT_TRUE(strip->cellText(hot, column).contains(QStringLiteral("step %1").arg(step)));
  QTest::mouseClick(strip, Qt::LeftButton, {}, strip->cellCenter(column, hot));
  QApplication::processEvents();

  const auto expected = sqlExpertsFwd(s_path, step, 1);
  ASSERT_GE(expected.first, 0);
  const TimelineGeometry& g = window.timelineView()->timeGeometry();
  EXPECT_LE(g.startNs, expected.first);
  EXPECT_GE(g.endNs, expected.first + expected.second);
  EXPECT_LT(g.durNs(), 2 * expected.second + 2);  // zoomed to the slice, not the whole run
  ASSERT_EQ(window.timelineView()->highlightedSlices().size(), 1u);
  EXPECT_EQ(window.timelineView()->highlightedSlices()[0].startNs, expected.first);
  EXPECT_EQ(window.timelineView()->highlightedSlices()[0].durNs, expected.second);
  EXPECT_EQ(window.document()->expertLoadModel()->step(), step);
  EXPECT_EQ(dock->modeChooser()->currentIndex(), HeatmapPanel::kOverTimeIndex);

  // The cell is painted in the heat map's colour of its load (beside the step marker line).
  const ExpertTimeModel::Column& col = strip->columns()[column];
  const QImage image = strip->grab().toImage();
  const QPoint inside = strip->cellCenter(column, hot) + QPoint(r.width() / kSteps / 4, 0);
  const QColor want = heatColor(col.load[size_t(hot)] / panel->model()->colorScaleMax());
  EXPECT_EQ(QColor(image.pixel(inside)).name(), want.name());
  if (const char* dir = std::getenv("MOEWB_GUI_SHOT_DIR")) {  // for README screenshots
    dock->grab().save(QString::fromLocal8Bit(dir) + QStringLiteral("/expert_over_time.png"));
  }
}
#endif

}  // namespace
}  // namespace moewb::gui
