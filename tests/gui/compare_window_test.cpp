// The Compare window in a real (offscreen) window on two real traces the engine trains here (tiny
// config, 10 steps; B with moe.top_k = 1 and skewed data): the table holds one row per phase
// name with the numbers storage::compareSamples gives, sorted by |delta|, coloured only where
// significant; the summary has step time, tokens/s, loss and one imbalance row per layer; the
// loss and step-time charts overlay both runs. A missing file and a trace without a config change
// to split at show a plain message; a written trace with a config change splits at it. The main
// window's File menu has the two compare actions.
#include "compare_window.h"

#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QMenu>
#include <QMenuBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <set>

#include "../source_dir.h"
#include "chart_view.h"
#include "main_window.h"
#include "model_check.h"
#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

constexpr int kSteps = 10;

Status trainTiny(const QString& out, const std::vector<std::string>& overrides) {
  auto config = engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  if (!config.isOk()) return config.status();
  config->run.threads = 1;
  config->model.seqLen = 32;
  for (const std::string& o : overrides) MOEWB_RETURN_IF_ERROR(engine::applyOverride(*config, o));
  auto run = run::TrainingRun::create(*config, {.outPath = out.toStdString(), .steps = kSteps});
  if (!run.isOk()) return run.status();
  auto summary = (*run)->run();
  return summary.isOk() ? Status::ok() : summary.status();
}

class CompareWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new QTemporaryDir;
    s_a = s_dir->filePath(QStringLiteral("a.sqlite"));
    s_b = s_dir->filePath(QStringLiteral("b.sqlite"));
    ASSERT_TRUE(trainTiny(s_a, {}).isOk());
    ASSERT_TRUE(trainTiny(s_b, {"moe.top_k=1", "data.skew=2"}).isOk());
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }
  static QTemporaryDir* s_dir;
  static QString s_a, s_b;
};

QTemporaryDir* CompareWindowTest::s_dir = nullptr;
QString CompareWindowTest::s_a, CompareWindowTest::s_b;

TEST_F(CompareWindowTest, ShowsTheTableTheSummaryAndBothRunsOnTheCharts) {
  CompareWindow window;
  testing::ModelCheck checkNames(window.namesModel());
  testing::ModelCheck checkSummary(window.summaryModel());
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  const Status status = window.compare({.pathA = s_a, .pathB = s_b});
  ASSERT_TRUE(status.isOk()) << status.toString();

  // The same comparison computed here from the storage functions.
  auto readerA = storage::TraceReader::open(s_a.toStdString());
  auto readerB = storage::TraceReader::open(s_b.toStdString());
  ASSERT_TRUE(readerA.isOk() && readerB.isOk());
  auto a = storage::sampleTrace(**readerA);
  auto b = storage::sampleTrace(**readerB);
  ASSERT_TRUE(a.isOk() && b.isOk());
  const storage::SampleComparison expected = storage::compareSamples(*a, *b);

  const CompareModel* names = window.namesModel();
  ASSERT_EQ(names->rowCount(), int(expected.names.size()));
  std::set<QString> shown;
  for (int r = 0; r < names->rowCount(); ++r) {
    shown.insert(names->data(names->index(r, CompareModel::kName)).toString());
    const bool significant = names->rows()[size_t(r)].delta.significant;
    EXPECT_EQ(names->data(names->index(r, CompareModel::kFlag)).toString(),
              significant ? QStringLiteral("*") : QString());
    // Coloured only when significant.
    EXPECT_EQ(names->data(names->index(r, CompareModel::kDelta), Qt::ForegroundRole).isValid(),
              significant && names->rows()[size_t(r)].delta.delta != 0);
  }
  for (const char* phase : {"step", "forward", "experts.fwd", "experts.bwd", "optimizer"}) {
    EXPECT_TRUE(shown.contains(QString::fromLatin1(phase))) << phase;
  }
  for (size_t i = 0; i < expected.names.size(); ++i) {
    EXPECT_DOUBLE_EQ(names->rows()[i].delta.a.mean, expected.names[i].perStepNs.a.mean);
  }
  // The view's first row (sorted by |delta|, descending) is the largest |delta|.
  QAbstractItemModel* view = window.namesTable()->model();
  double previous = INFINITY;
  for (int r = 0; r < view->rowCount(); ++r) {
    const double magnitude =
        view->data(view->index(r, CompareModel::kDelta), CompareModel::kSortRole).toDouble();
    EXPECT_LE(magnitude, previous) << r;
    previous = magnitude;
  }

  const CompareModel* summary = window.summaryModel();
  ASSERT_EQ(summary->rowCount(), 4 + 1 + 2);  // run rows, all layers, layers 0 and 1
  EXPECT_EQ(summary->data(summary->index(0, CompareModel::kName)).toString(),
            QStringLiteral("step time"));
  EXPECT_EQ(summary->data(summary->index(6, CompareModel::kName)).toString(),
            QStringLiteral("layer 1"));
  EXPECT_DOUBLE_EQ(summary->rows()[6].delta.b.mean, expected.layers[1].maxOverMean.b.mean);

  ASSERT_EQ(window.lossChart()->series().size(), 2u);
  EXPECT_EQ(window.lossChart()->series()[0].points.size(), size_t(kSteps - 1));
  EXPECT_EQ(window.lossChart()->series()[1].points.size(), size_t(kSteps - 1));
  EXPECT_EQ(window.stepTimeChart()->series().size(), 2u);
  EXPECT_TRUE(window.headerText().contains(QStringLiteral("steps 1..9 (9 steps)")))
      << window.headerText().toStdString();
  EXPECT_TRUE(checkNames.failures().isEmpty()) << checkNames.failures().join('\n').toStdString();
  EXPECT_TRUE(checkSummary.failures().isEmpty());
  EXPECT_FALSE(window.grab().isNull());  // paints
}

TEST_F(CompareWindowTest, BadInputShowsAPlainMessage) {
  CompareWindow window;
  const QString missing = s_dir->filePath(QStringLiteral("missing.sqlite"));
  Status status = window.compare({.pathA = s_a, .pathB = missing});
  EXPECT_FALSE(status.isOk());
  EXPECT_TRUE(window.headerText().contains(missing)) << window.headerText().toStdString();
  EXPECT_EQ(window.namesModel()->rowCount(), 0);

  status = window.compare({.pathA = s_a, .splitAtPatch = true});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(window.headerText().contains(QStringLiteral("no live config change")))
      << window.headerText().toStdString();
  EXPECT_FALSE(window.headerText().contains(QStringLiteral("invalid argument")));
}

// Before/after a config change: a written trace (TestTrace) with GPU kernels and a change at
// step 6; A is steps 1..5, B 6..11, the kernel rows are there, the header names the change.
TEST_F(CompareWindowTest, SplitsATraceAtItsConfigChange) {
  const QString path = s_dir->filePath(QStringLiteral("split.sqlite"));
  auto trace = testing::TestTrace::create(path.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk()) << trace.status().toString();
  trace.value()->setGpuActivity(true);
  trace.value()->addConfigChange(6, "moe.top_k", "2", "1");
  for (int s = 0; s < 12; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
  ASSERT_TRUE(trace.value()->finish().isOk());
  CompareWindow window;
  const Status status = window.compare({.pathA = path, .splitAtPatch = true});
  ASSERT_TRUE(status.isOk()) << status.toString();
  const QString header = window.headerText();
  EXPECT_TRUE(header.contains(QStringLiteral("steps 1..5 (5 steps), 5 with GPU work")))
      << header.toStdString();
  EXPECT_TRUE(header.contains(QStringLiteral("steps 6..11 (6 steps")));
  EXPECT_TRUE(header.contains(QStringLiteral("split at step 6: moe.top_k 2 -> 1 (gui)")));
  bool kernelRow = false;
  const CompareModel* names = window.namesModel();
  for (int r = 0; r < names->rowCount(); ++r) {
    if (names->data(names->index(r, CompareModel::kKind)).toString() == QStringLiteral("gpu")) {
      kernelRow = true;
    }
  }
  EXPECT_TRUE(kernelRow);
}

TEST_F(CompareWindowTest, MainWindowFileMenuHasTheCompareActions) {
  MainWindow window;
  QStringList texts;
  for (QAction* menu : window.menuBar()->actions()) {
    if (menu->menu() == nullptr) continue;
    for (QAction* action : menu->menu()->actions()) texts << action->text();
  }
  EXPECT_TRUE(texts.contains(QStringLiteral("&Compare with..."))) << texts.join(',').toStdString();
  EXPECT_TRUE(texts.contains(QStringLiteral("Compare before/after config &change")));
}

}  // namespace
}  // namespace moewb::gui
