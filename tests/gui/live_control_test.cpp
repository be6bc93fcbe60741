// Live control from the main window on a real run: the panel pauses it (the step count stops
// growing), applies one patch of optim.lr and optim.warmup_steps (handled at once while paused,
// used from the next step, recorded as config_change rows that the Config changes model, the
// timeline and the charts show), refuses an out-of-range optim.beta1 naming the key without
// writing a row, and stops the run. Also: markers of a trace opened from disk, and a panel that
// stays off without a run.
#include <gtest/gtest.h>

#include <QApplication>
#include <QImage>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <fstream>
#include <string>

#include "chart_view.h"
#include "live_control_panel.h"
#include "main_window.h"
#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"
#include "moewb/storage/trace_reader.h"
#include "run_controller.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"
#include "../source_dir.h"

namespace moewb::gui {
namespace {

using Kind = engine::TrainerCommand::Kind;
constexpr int kWaitMs = 120'000;  // generous: the machine may be shared

// Committed steps of the trace's run, as a second reader sees them.
int64_t stepsIn(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return -1;
  auto runs = reader.value()->runs();
  if (!runs.isOk() || runs.value().empty()) return -1;
  auto steps = reader.value()->steps(runs.value().front().id);
  return steps.isOk() ? int64_t(steps.value().size()) : -1;
}

std::vector<storage::StepRow> stepRowsIn(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return {};
  auto runs = reader.value()->runs();
  if (!runs.isOk() || runs.value().empty()) return {};
  auto steps = reader.value()->steps(runs.value().front().id);
  return steps.isOk() ? steps.value() : std::vector<storage::StepRow>{};
}

std::vector<storage::ConfigChangeRow> changesIn(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return {};
  auto rows = reader.value()->configChanges();
  return rows.isOk() ? rows.value() : std::vector<storage::ConfigChangeRow>{};
}

// Pixels of `image` within a small distance of the marker colour.
int markerPixels(const QImage& image) {
  const QImage img = image.convertToFormat(QImage::Format_RGB32);
  const QColor m = theme::marker();
  int count = 0;
  for (int y = 0; y < img.height(); ++y) {
    for (int x = 0; x < img.width(); ++x) {
      const QColor c = QColor::fromRgb(img.pixel(x, y));
      if (std::abs(c.red() - m.red()) + std::abs(c.green() - m.green()) +
              std::abs(c.blue() - m.blue()) <
          30) {
        ++count;
      }
    }
  }
  return count;
}

class LiveControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    theme::apply(*qApp);
  }
  QTemporaryDir m_dir;
};

TEST_F(LiveControlTest, PausePatchRefuseAndStopARunThroughThePanel) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1500, 950);
  window.show();
  LiveControlPanel* panel = window.liveControlPanel();
  ASSERT_NE(panel, nullptr);
  EXPECT_FALSE(panel->pauseButton()->isEnabled()) << "no run yet";
  EXPECT_EQ(panel->keys().size(), qsizetype(run::TrainingRun::liveKeys().size() +
                                            engine::Trainer::layoutKeys().size()));

  QSignalSpy finished(&window, &MainWindow::runFinished);
  QSignalSpy replies(panel, &LiveControlPanel::commandFinished);
  const QString config = QString::fromStdString(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  const QString out = m_dir.filePath(QStringLiteral("live-control.sqlite"));
  ASSERT_TRUE(window.startRun(config, out, 100'000).isOk());
  EXPECT_TRUE(panel->pauseButton()->isEnabled());
  EXPECT_TRUE(panel->stopButton()->isEnabled());
  EXPECT_FALSE(panel->resumeButton()->isEnabled());
  EXPECT_FALSE(panel->stepButton()->isEnabled());
  EXPECT_EQ(panel->currentValue(QStringLiteral("optim.lr")), "0.003");
  EXPECT_EQ(panel->currentValue(QStringLiteral("optim.warmup_steps")), "10");
  ASSERT_NE(panel->editor(QStringLiteral("parallel.ep")), nullptr);
  EXPECT_FALSE(panel->editor(QStringLiteral("parallel.ep"))->isEnabled()) << "one rank";
  EXPECT_EQ(panel->currentValue(QStringLiteral("parallel.ep")), "1");

  // Past the 10 warm-up steps, so a step's lr is the peak lr itself.
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) >= 12; }, kWaitMs));

  // Pause: the trainer stops between steps and the count stops growing.
  QTest::mouseClick(panel->pauseButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->isPaused(); }, kWaitMs));
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  EXPECT_EQ(replies.at(0).at(0).toInt(), int(Kind::kPause));
  EXPECT_FALSE(panel->pauseButton()->isEnabled());
  EXPECT_TRUE(panel->resumeButton()->isEnabled());
  EXPECT_TRUE(panel->stepButton()->isEnabled());
  QTest::qWait(300);  // the last step's commit is written by the writer thread
  const int64_t pausedAt = stepsIn(out);
  QTest::qWait(1000);
  EXPECT_EQ(stepsIn(out), pausedAt) << "steps went on while paused";

  // optim.lr and optim.warmup_steps typed into their editors and applied: ONE kApplyPatch,
  // handled at once while paused. (Past step 12, a warm-up of 5 leaves the lr at its peak.)
  QLineEdit* lr = panel->editor(QStringLiteral("optim.lr"));
  ASSERT_NE(lr, nullptr);
  lr->selectAll();
  QTest::keyClicks(lr, QStringLiteral("1e-3"));
  QLineEdit* warmup = panel->editor(QStringLiteral("optim.warmup_steps"));
  ASSERT_NE(warmup, nullptr);
  warmup->selectAll();
  QTest::keyClicks(warmup, QStringLiteral("5"));
  EXPECT_EQ(panel->editedAssignments(), (QStringList{QStringLiteral("optim.lr=0.001"),
                                                     QStringLiteral("optim.warmup_steps=5")}));
  EXPECT_TRUE(panel->applyButton()->isEnabled());
  replies.clear();
  QTest::mouseClick(panel->applyButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  EXPECT_EQ(replies.at(0).at(0).toInt(), int(Kind::kApplyPatch));
  ASSERT_TRUE(replies.at(0).at(1).toBool()) << replies.at(0).at(2).toString().toStdString();
  EXPECT_EQ(panel->currentValue(QStringLiteral("optim.lr")), "0.001");
  EXPECT_EQ(panel->currentValue(QStringLiteral("optim.warmup_steps")), "5");
  EXPECT_TRUE(panel->editedAssignments().isEmpty());
  QTest::qWait(200);
  EXPECT_EQ(replies.count(), 1) << "Apply sent more than one command";
  EXPECT_TRUE(panel->resultText().contains(QStringLiteral("optim.lr 0.003 -> 0.001")))
      << panel->resultText().toStdString();
  EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("optim.lr")));
  EXPECT_EQ(stepsIn(out), pausedAt);

  // Step: exactly one step runs, with the new lr, and the change row is committed with it.
  QTest::mouseClick(panel->stepButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) == pausedAt + 1; }, kWaitMs));
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->isPaused(); }, kWaitMs));
  QTest::qWait(500);
  EXPECT_EQ(stepsIn(out), pausedAt + 1) << "Step ran more than one step";
  const std::vector<storage::ConfigChangeRow> rows = changesIn(out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "optim.lr");
  EXPECT_EQ(rows[0].step, pausedAt);  // the first step that uses the new value
  EXPECT_EQ(rows[0].source, "gui");
  EXPECT_DOUBLE_EQ(std::stod(rows[0].oldValue), 3e-3);
  EXPECT_DOUBLE_EQ(std::stod(rows[0].newValue), 1e-3);
  EXPECT_EQ(rows[1].key, "optim.warmup_steps");
  EXPECT_EQ(rows[1].step, pausedAt);
  EXPECT_EQ(rows[1].oldValue, "10");
  EXPECT_EQ(rows[1].newValue, "5");
  const std::vector<storage::StepRow> stepRows = stepRowsIn(out);
  ASSERT_EQ(int64_t(stepRows.size()), pausedAt + 1);
  EXPECT_DOUBLE_EQ(stepRows.back().lr, 1e-3);
  EXPECT_DOUBLE_EQ(stepRows[stepRows.size() - 2].lr, 3e-3);

  // The window shows it: the Config changes model, the timeline and both charts.
  ASSERT_TRUE(window.document()->refresh().isOk());
  QApplication::processEvents();
  ConfigChangeModel* model = window.document()->configChangeModel();
  ASSERT_EQ(model->rowCount(), 2);
  EXPECT_EQ(model->data(model->index(0, ConfigChangeModel::kNewValue)).toString(), "0.001");
  EXPECT_EQ(window.configChangeTable()->model(), model);
  window.timelineView()->fitAll();
  ASSERT_EQ(window.timelineView()->configMarkers().size(), 1u);  // one patch, one marker
  EXPECT_EQ(window.timelineView()->configMarkerText(0),
            QStringLiteral("step %1: optim.lr 0.003 -> 0.001 (gui)\n"
                           "step %1: optim.warmup_steps 10 -> 5 (gui)")
                .arg(pausedAt));
  EXPECT_GT(markerPixels(window.timelineView()->grab().toImage()), 20);
  ASSERT_EQ(window.lossChart()->markers().size(), 1u);
  EXPECT_DOUBLE_EQ(window.lossChart()->markers()[0].x, double(pausedAt));
  EXPECT_TRUE(window.lossChart()->markers()[0].text.contains(QStringLiteral("optim.lr")));
  EXPECT_EQ(window.stepTimeChart()->markers().size(), 1u);
  EXPECT_GT(markerPixels(window.lossChart()->grab().toImage()), 10);

  // Out of range: the engine refuses it, the message names the key, nothing is written.
  replies.clear();
  ASSERT_TRUE(panel->setValueText(QStringLiteral("optim.beta1"), QStringLiteral("2")));
  QTest::mouseClick(panel->applyButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  EXPECT_FALSE(replies.at(0).at(1).toBool());
  EXPECT_TRUE(replies.at(0).at(2).toString().contains(QStringLiteral("optim.beta1")))
      << replies.at(0).at(2).toString().toStdString();
  EXPECT_TRUE(panel->resultText().startsWith(QStringLiteral("Refused")));
  EXPECT_TRUE(panel->resultText().contains(QStringLiteral("optim.beta1")));
  EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("optim.beta1")));
  EXPECT_EQ(panel->currentValue(QStringLiteral("optim.beta1")), "0.9");
  QTest::mouseClick(panel->stepButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) == pausedAt + 2; }, kWaitMs));
  EXPECT_EQ(changesIn(out).size(), 2u) << "a refused patch left a config_change row";

  // Stop ends the run; the panel goes off.
  QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() == 1; }, kWaitMs));
  EXPECT_TRUE(finished.at(0).at(0).toBool()) << finished.at(0).at(1).toString().toStdString();
  EXPECT_EQ(window.document()->run()->status, "stopped");
  EXPECT_EQ(window.document()->configChangeModel()->rowCount(), 2);
  EXPECT_FALSE(panel->pauseButton()->isEnabled());
  EXPECT_FALSE(panel->stopButton()->isEnabled());
  EXPECT_FALSE(panel->applyButton()->isEnabled());
}

// A run of two in-process ranks: the parallel layout's editors are on, and parallel.ep = 2 sent
// from the panel re-shards the run at the step boundary (one config_change row, source gui); the
// run goes on in the new layout.
TEST_F(LiveControlTest, LayoutEditorsReshardARunOfTwoRanks) {
  const QString config = m_dir.filePath(QStringLiteral("two-ranks.toml"));
  {
    std::ifstream in(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
    std::ofstream out(config.toStdString());
    out << in.rdbuf() << "\n[parallel]\nworld_size = 2\n";
  }
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  LiveControlPanel* panel = window.liveControlPanel();
  ASSERT_NE(panel, nullptr);
  QSignalSpy finished(&window, &MainWindow::runFinished);
  QSignalSpy replies(panel, &LiveControlPanel::commandFinished);
  const QString out = m_dir.filePath(QStringLiteral("two-ranks.sqlite"));
  ASSERT_TRUE(window.startRun(config, out, 100'000).isOk());
  QLineEdit* ep = panel->editor(QStringLiteral("parallel.ep"));
  ASSERT_NE(ep, nullptr);
  EXPECT_TRUE(ep->isEnabled());
  EXPECT_EQ(panel->currentValue(QStringLiteral("parallel.ep")), "1");
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) >= 3; }, kWaitMs));
  QTest::mouseClick(panel->pauseButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->isPaused() && replies.count() == 1; },
                              kWaitMs));
  replies.clear();
  ASSERT_TRUE(panel->setValueText(QStringLiteral("parallel.ep"), QStringLiteral("2")));
  QTest::mouseClick(panel->applyButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  ASSERT_TRUE(replies.at(0).at(1).toBool()) << replies.at(0).at(2).toString().toStdString();
  EXPECT_EQ(panel->currentValue(QStringLiteral("parallel.ep")), "2");
  QTest::qWait(300);
  const int64_t pausedAt = stepsIn(out);
  QTest::mouseClick(panel->stepButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) > pausedAt; }, kWaitMs));
  const std::vector<storage::ConfigChangeRow> rows = changesIn(out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key, "parallel.ep");
  EXPECT_EQ(rows[0].oldValue, "1");
  EXPECT_EQ(rows[0].newValue, "2");
  EXPECT_EQ(rows[0].source, "gui");
  QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() == 1; }, kWaitMs));
  EXPECT_TRUE(finished.at(0).at(0).toBool()) << finished.at(0).at(1).toString().toStdString();
}

// The editors flag what the engine's typed bounds refuse (engine::ConfigKeyInfo), for every live
// key at its bounds and for whole numbers, choices and booleans; no run is needed.
TEST_F(LiveControlTest, EditorsFlagValuesOutsideTheTypedBounds) {
  LiveControlPanel panel;
  auto flagged = [&](const QString& key, const QString& text) {
    EXPECT_TRUE(panel.setValueText(key, text)) << key.toStdString();
    return panel.isFlagged(key);
  };
  auto number = [](double v) { return QString::number(v, 'g', 17); };
  int checked = 0;
  for (const engine::ConfigKeyInfo& info : engine::configKeys()) {
    const QString key = QString::fromStdString(info.key);
    if (!panel.keys().contains(key) || !info.min) continue;
    SCOPED_TRACE(info.key);
    const double lo = *info.min;
    EXPECT_EQ(flagged(key, number(lo)), info.minExclusive);
    EXPECT_TRUE(flagged(key, number(info.integer ? lo - 1 : lo - 1e-9)));
    if (info.max) {
      EXPECT_FALSE(flagged(key, number(*info.max)));
      EXPECT_TRUE(flagged(key, number(*info.max + (info.integer ? 1 : 1e-6))));
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);

  EXPECT_TRUE(flagged(QStringLiteral("optim.warmup_steps"), QStringLiteral("1.5")));
  EXPECT_FALSE(flagged(QStringLiteral("optim.warmup_steps"), QStringLiteral("100")));
  EXPECT_FALSE(flagged(QStringLiteral("moe.drop_policy"), QStringLiteral("position")));
  EXPECT_TRUE(flagged(QStringLiteral("moe.drop_policy"), QStringLiteral("bogus")));
  const QString tip = panel.editor(QStringLiteral("moe.drop_policy"))->toolTip();
  EXPECT_TRUE(tip.contains(QStringLiteral("not accepted"))) << tip.toStdString();
  EXPECT_FALSE(flagged(QStringLiteral("loss.kind"), QStringLiteral("cce")));
  EXPECT_TRUE(flagged(QStringLiteral("loss.kind"), QStringLiteral("CCE")));
  EXPECT_FALSE(flagged(QStringLiteral("fusion.permute_into_experts"), QStringLiteral("True")));
  EXPECT_TRUE(flagged(QStringLiteral("fusion.permute_into_experts"), QStringLiteral("yes")));
  EXPECT_FALSE(panel.isFlagged(QStringLiteral("no.such_key")));
}

TEST_F(LiveControlTest, MarkersShowForATraceOpenedFromDisk) {
  const QString file = m_dir.filePath(QStringLiteral("changes.sqlite"));
  auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
  ASSERT_TRUE(trace.isOk()) << trace.status().toString();
  for (int s = 0; s < 8; ++s) {
    if (s == 3) trace.value()->addConfigChange(3, "optim.lr", "0.0030000000000000001", "0.001");
    if (s == 6) {
      trace.value()->addConfigChange(6, "data.skew", "1.0", "2.5", "tuner");
      trace.value()->addConfigChange(6, "data.noise", "0.10000000000000001", "0.2", "tuner");
    }
    ASSERT_TRUE(trace.value()->addStep(s).isOk());
  }
  ASSERT_TRUE(trace.value()->finish().isOk());

  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1400, 900);
  window.show();
  ASSERT_TRUE(window.openFile(file).isOk());
  QApplication::processEvents();
  EXPECT_EQ(window.document()->configChangeModel()->rowCount(), 3);

  TimelineView* timeline = window.timelineView();
  ASSERT_EQ(timeline->configMarkers().size(), 2u);  // one patch of two keys = one marker
  EXPECT_EQ(timeline->configMarkerText(0), "step 3: optim.lr 0.003 -> 0.001 (gui)");
  EXPECT_EQ(timeline->configMarkerText(1),
            "step 6: data.skew 1.0 -> 2.5 (tuner)\nstep 6: data.noise 0.1 -> 0.2 (tuner)");
  // The marker sits at the step's start time.
  const double x = timeline->configMarkers()[0].x;
  EXPECT_NEAR(
      x,
      timeline->timeGeometry().xOf(testing::TestTrace::kOriginNs + 3 * testing::TestTrace::kStepNs),
      1e-9);
  EXPECT_GT(markerPixels(timeline->grab().toImage()), 40);

  // Zoomed into steps 0..2 the markers are out of the window.
  timeline->showTimeRange({testing::TestTrace::kOriginNs,
                           testing::TestTrace::kOriginNs + 2 * testing::TestTrace::kStepNs});
  EXPECT_TRUE(timeline->configMarkers().empty());
  timeline->fitAll();
  EXPECT_EQ(timeline->configMarkers().size(), 2u);

  ASSERT_EQ(window.lossChart()->markers().size(), 2u);
  EXPECT_DOUBLE_EQ(window.lossChart()->markers()[1].x, 6.0);
  EXPECT_GT(markerPixels(window.stepTimeChart()->grab().toImage()), 10);

  // Without a run from this window the panel stays off.
  LiveControlPanel* panel = window.liveControlPanel();
  EXPECT_FALSE(panel->pauseButton()->isEnabled());
  EXPECT_FALSE(panel->stepButton()->isEnabled());
  EXPECT_FALSE(panel->applyButton()->isEnabled());
  EXPECT_FALSE(panel->editor(QStringLiteral("optim.lr"))->isEnabled());
  EXPECT_EQ(panel->editor(QStringLiteral("model.d_model")), nullptr);
}

}  // namespace
}  // namespace moewb::gui
