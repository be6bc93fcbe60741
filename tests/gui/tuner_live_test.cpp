// The Tuner window's Apply live, offscreen, on real runs of the tiny sample started from a real
// main window (its RunController, as the Live control dock uses it): the pick's live settings go
// to the run as ONE patch with source "tuner" (config_change rows and the timeline's marker say
// "tuner", the next steps drop tokens at the new capacity factor); a layout key (parallel.ep) is
// listed as needing a restart and never sent; a patch the trainer refuses is shown with the
// trainer's message and changes nothing; without a run the button is off and says why. Also the
// plan's settings described for people (tuner_live_plan.h; the plan: tests/tuner). The studies
// are written through the tuner's StudyStore with chosen measurements, so which trial is the
// pick is known.
#include <gtest/gtest.h>

#include <QApplication>
#include <QFile>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <string>
#include <vector>

#include "../source_dir.h"
#include "live_control_panel.h"
#include "main_window.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/gui/trace_document.h"
#include "moewb/gui/tuner_live_plan.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/tuner/study_store.h"
#include "run_controller.h"
#include "theme.h"
#include "timeline_view.h"
#include "tuner_window.h"

namespace moewb::gui {
namespace {

constexpr int kWaitMs = 120'000;  // generous: the machine may be shared

std::string tinyPath() {
  return moewb::test::sourceDir() + "/samples/configs/tiny.toml";
}

engine::RunConfig tiny() {
  auto loaded = engine::loadConfigFile(tinyPath());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().toString();
  return loaded.isOk() ? *loaded : engine::RunConfig{};
}

struct Trial {
  std::string settings;
  double tokensPerSecond;  // the objective: the highest is the pick
};

// A study of `base` with `trials` (verdict ok, 3 steps each) written by the tuner's store.
std::string writeStudy(const QString& path, const engine::RunConfig& base,
                       const std::vector<Trial>& trials) {
  tuner::StudyInfo info;
  info.configPath = tinyPath();
  info.configToml = engine::toToml(base);
  info.objective = "tokens_per_s";
  info.strategy = "exhaustive";
  info.trialSteps = 3;
  info.gateSteps = 3;
  info.startedAt = "2026-12-02T00:00:00Z";
  info.gitCommit = "unknown";
  info.host = "test (cpu)";
  auto store = tuner::StudyStore::create(path.toStdString(), info);
  EXPECT_TRUE(store.isOk()) << store.status().toString();
  if (!store.isOk()) return {};
  for (const Trial& t : trials) {
    tuner::TrialRecord r;
    r.settings = t.settings;
    r.steps = 3;
    r.tokensPerSecond = t.tokensPerSecond;
    r.stepTimeMs = 512.0 * 1000.0 / t.tokensPerSecond;
    r.peakBytes = 1 << 20;
    r.finalLoss = 5.0;
    r.losses = {5.5, 5.2, 5.0};
    r.gradNorms = {1.0, 0.9, 0.8};
    r.stepMs = {r.stepTimeMs, r.stepTimeMs, r.stepTimeMs};
    auto id = (*store)->addTrial(r);
    EXPECT_TRUE(id.isOk()) << id.status().toString();
  }
  return path.toStdString();
}

int64_t stepsIn(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return -1;
  auto runs = reader.value()->runs();
  if (!runs.isOk() || runs.value().empty()) return -1;
  auto steps = reader.value()->steps(runs.value().front().id);
  return steps.isOk() ? int64_t(steps.value().size()) : -1;
}

std::vector<storage::ConfigChangeRow> changesIn(const QString& path) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return {};
  auto rows = reader.value()->configChanges();
  return rows.isOk() ? rows.value() : std::vector<storage::ConfigChangeRow>{};
}

// Assignments dropped by capacity in step `step`, all layers and experts; -1 when unreadable.
int64_t droppedIn(const QString& path, int64_t step) {
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return -1;
  auto rows = reader.value()->expertLoad(step, step);
  if (!rows.isOk() || rows.value().empty()) return -1;
  int64_t dropped = 0;
  for (const storage::ExpertLoadRow& r : rows.value()) dropped += r.dropped;
  return dropped;
}

class TunerLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    theme::apply(*qApp);
  }
  QTemporaryDir m_dir;
};

TEST(TunerLivePlan, DescribesTheTunerPlansSettingsForPeople) {
  // The plan itself is tested in tests/tuner/live_retune_test.cpp; the window shows its settings.
  auto plan = planLiveRetune(
      tiny(), "moe.capacity_factor=0.5,parallel.ep=2,moe.drop_policy=position",
      engine::Trainer::liveKeys());
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->restart.size(), 1u);
  EXPECT_EQ(describeSetting(plan->restart[0]), "parallel.ep = 2 (the run has 1)");
  ASSERT_EQ(plan->send.size(), 2u);
  EXPECT_EQ(describeSetting(plan->send[0]), "moe.capacity_factor = 0.5 (the run has 0.0)");
}

TEST_F(TunerLiveTest, WithoutARunTheButtonIsOffAndSaysWhy) {
  const QString study = QString::fromStdString(
      writeStudy(m_dir.filePath("study.sqlite"), tiny(),
                 {{"moe.capacity_factor=0.0", 1000}, {"moe.capacity_factor=0.5", 1500}}));
  TunerWindow alone;  // no RunController at all
  alone.show();
  ASSERT_TRUE(alone.openStudy(study).isOk()) << alone.errorText().toStdString();
  EXPECT_FALSE(alone.applyLiveButton()->isEnabled());
  EXPECT_TRUE(alone.applyLiveButton()->toolTip().contains("No run in progress"));
  EXPECT_EQ(alone.applyLive().code(), StatusCode::kFailedPrecondition);

  MainWindow window;  // a main window that has not started a run
  window.setErrorDialogsEnabled(false);
  window.show();
  TunerWindow* tuner = openStudyWindow(study, &window);
  ASSERT_EQ(tuner->errorText(), QString());
  EXPECT_FALSE(tuner->applyLiveButton()->isEnabled());
  EXPECT_TRUE(tuner->applyLiveButton()->toolTip().contains("Run > Start run"));
  EXPECT_TRUE(tuner->liveText().contains("no run in progress")) << tuner->liveText().toStdString();
  EXPECT_FALSE(tuner->livePlan().isOk());
}

TEST_F(TunerLiveTest, ThePickGoesToTheRunAsOnePatchWithSourceTuner) {
  const QString study = QString::fromStdString(
      writeStudy(m_dir.filePath("study.sqlite"), tiny(),
                 {{"moe.capacity_factor=0.0,moe.drop_policy=probs", 1000},
                  {"moe.capacity_factor=0.5,moe.drop_policy=position", 1500},  // the pick
                  {"moe.capacity_factor=1.0,moe.drop_policy=probs", 1200}}));
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1400, 900);
  window.show();
  TunerWindow* tuner = openStudyWindow(study, &window);
  ASSERT_EQ(tuner->errorText(), QString());
  ASSERT_EQ(tuner->exportTrial(), std::optional<int64_t>(2));  // the pick is selected
  EXPECT_FALSE(tuner->applyLiveButton()->isEnabled());

  QSignalSpy finished(&window, &MainWindow::runFinished);
  QSignalSpy replies(tuner, &TunerWindow::liveApplyFinished);
  const QString out = m_dir.filePath("live.sqlite");
  ASSERT_TRUE(window.startRun(QString::fromStdString(tinyPath()), out, 100'000).isOk());
  EXPECT_TRUE(tuner->applyLiveButton()->isEnabled()) << tuner->liveText().toStdString();
  EXPECT_TRUE(tuner->liveText().contains("moe.capacity_factor = 0.5 (the run has 0.0)"))
      << tuner->liveText().toStdString();
  EXPECT_FALSE(tuner->liveText().contains("restart"));

  // Paused after a few steps (through the Live control dock), so the patch's step is known.
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) >= 3; }, kWaitMs));
  LiveControlPanel* panel = window.liveControlPanel();
  panel->pause();
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->isPaused(); }, kWaitMs));
  QTest::qWait(300);  // the last step's commit is written by the writer thread
  const int64_t pausedAt = stepsIn(out);
  ASSERT_GE(pausedAt, 3);
  EXPECT_EQ(droppedIn(out, pausedAt - 1), 0) << "dropless before the patch";

  QTest::mouseClick(tuner->applyLiveButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  ASSERT_TRUE(replies.at(0).at(0).toBool()) << replies.at(0).at(1).toString().toStdString();
  EXPECT_TRUE(tuner->liveText().startsWith("Applied trial 2 live"))
      << tuner->liveText().toStdString();
  EXPECT_FALSE(tuner->liveApplyPending());

  // One step with the new settings: the rows say "tuner", the step drops tokens at capacity 0.5.
  panel->stepOnce();
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) == pausedAt + 1; }, kWaitMs));
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->isPaused(); }, kWaitMs));
  const std::vector<storage::ConfigChangeRow> rows = changesIn(out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "moe.capacity_factor");
  EXPECT_EQ(rows[0].oldValue, "0.0");
  EXPECT_EQ(rows[0].newValue, "0.5");
  EXPECT_EQ(rows[1].key, "moe.drop_policy");
  EXPECT_EQ(rows[1].newValue, "\"position\"");
  for (const auto& r : rows) {
    EXPECT_EQ(r.source, "tuner");
    EXPECT_EQ(r.step, pausedAt);  // the first step that uses the new values
  }
  EXPECT_GT(droppedIn(out, pausedAt), 0) << "the step after the patch kept the old capacity";

  // The main window's timeline marks the change with source "tuner" (every marker's tooltip
  // lines, in row order).
  ASSERT_TRUE(QTest::qWaitFor([&] { return !window.document()->isLoading(); }, kWaitMs));
  ASSERT_TRUE(window.document()->refresh().isOk());
  QApplication::processEvents();
  window.timelineView()->fitAll();
  QStringList markers;
  for (int i = 0; i < int(window.timelineView()->configMarkers().size()); ++i) {
    markers << window.timelineView()->configMarkerText(i);
  }
  EXPECT_EQ(markers.join("\n"),
            QString("step %1: moe.capacity_factor 0.0 -> 0.5 (tuner)\n"
                    "step %1: moe.drop_policy \"probs\" -> \"position\" (tuner)")
                .arg(pausedAt));
  // (How many markers the two rows make depends on the zoom: the engine writes them a few ms
  // apart, so on a trace this short they can be more than the timeline's merge distance apart.)

  // The run has the pick now: nothing left to send.
  auto plan = tuner->livePlan();
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_TRUE(plan->send.empty());
  EXPECT_EQ(plan->unchanged.size(), 2u);
  EXPECT_EQ(tuner->applyLive().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(changesIn(out).size(), 2u);
  EXPECT_FALSE(tuner->applyLiveButton()->isEnabled());

  // A change from the Live control dock: once the main window reads its row, the Tuner window
  // offers the pick's capacity factor again.
  ASSERT_TRUE(panel->setValueText("moe.capacity_factor", "1.0"));
  panel->apply();
  ASSERT_TRUE(QTest::qWaitFor([&] { return panel->pendingCount() == 0; }, kWaitMs));
  panel->stepOnce();
  ASSERT_TRUE(QTest::qWaitFor([&] { return changesIn(out).size() == 3u; }, kWaitMs));
  ASSERT_TRUE(window.document()->refresh().isOk());
  QApplication::processEvents();
  EXPECT_TRUE(tuner->applyLiveButton()->isEnabled()) << tuner->liveText().toStdString();
  EXPECT_TRUE(tuner->liveText().contains("moe.capacity_factor = 0.5 (the run has 1.0)"))
      << tuner->liveText().toStdString();

  panel->stop();
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() == 1; }, kWaitMs));
  EXPECT_FALSE(tuner->applyLiveButton()->isEnabled());
  EXPECT_TRUE(tuner->applyLiveButton()->toolTip().contains("No run in progress"));
}

TEST_F(TunerLiveTest, LayoutKeysNeedARestartAndARefusalChangesNothing) {
  engine::RunConfig base = tiny();
  base.parallel.worldSize = 2;  // the study ran on two ranks; the run below has one
  const QString study = QString::fromStdString(
      writeStudy(m_dir.filePath("study.sqlite"), base,
                 {{"moe.capacity_factor=0.0,moe.top_k=2,parallel.ep=1", 1000},
                  {"moe.capacity_factor=0.5,moe.top_k=2,parallel.ep=2", 1500},  // the pick
                  {"moe.capacity_factor=0.5,moe.top_k=9,parallel.ep=1", 1200}}));
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  TunerWindow* tuner = openStudyWindow(study, &window);
  ASSERT_EQ(tuner->errorText(), QString());
  QSignalSpy replies(tuner, &TunerWindow::liveApplyFinished);
  const QString out = m_dir.filePath("live.sqlite");
  ASSERT_TRUE(window.startRun(QString::fromStdString(tinyPath()), out, 100'000).isOk());
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) >= 2; }, kWaitMs));

  // Trial 3: top_k 9 of 8 experts. The trainer refuses the whole patch, naming the key.
  ASSERT_TRUE(tuner->selectTrial(3));
  EXPECT_TRUE(tuner->applyLiveButton()->isEnabled()) << tuner->liveText().toStdString();
  QTest::mouseClick(tuner->applyLiveButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 1; }, kWaitMs));
  EXPECT_FALSE(replies.at(0).at(0).toBool());
  EXPECT_TRUE(replies.at(0).at(1).toString().contains("moe.top_k"))
      << replies.at(0).at(1).toString().toStdString();
  EXPECT_TRUE(tuner->liveText().startsWith("Refused by the run, nothing changed"));
  EXPECT_TRUE(tuner->liveText().contains("moe.top_k")) << tuner->liveText().toStdString();
  EXPECT_TRUE(tuner->liveText().contains("accepted: 1..8")) << tuner->liveText().toStdString();
  const int64_t afterRefusal = stepsIn(out);
  ASSERT_TRUE(QTest::qWaitFor([&] { return stepsIn(out) >= afterRefusal + 2; }, kWaitMs));
  EXPECT_TRUE(changesIn(out).empty()) << "a refused patch left a config_change row";
  EXPECT_EQ(droppedIn(out, afterRefusal + 1), 0) << "the refused patch's capacity was applied";

  // The pick: parallel.ep = 2 is listed as needing a restart and only the capacity is sent.
  ASSERT_TRUE(tuner->selectTrial(2));
  EXPECT_FALSE(tuner->liveText().contains("Refused")) << "the old outcome stayed";
  EXPECT_TRUE(tuner->liveText().contains("needs a restart"));
  EXPECT_TRUE(tuner->liveText().contains("parallel.ep = 2 (the run has 1)"))
      << tuner->liveText().toStdString();
  auto plan = tuner->livePlan();
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->send.size(), 1u);
  EXPECT_EQ(plan->send[0].key, "moe.capacity_factor");
  ASSERT_EQ(plan->restart.size(), 1u);
  EXPECT_EQ(plan->restart[0].key, "parallel.ep");
  QTest::mouseClick(tuner->applyLiveButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return replies.count() == 2; }, kWaitMs));
  ASSERT_TRUE(replies.at(1).at(0).toBool()) << replies.at(1).at(1).toString().toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !changesIn(out).empty(); }, kWaitMs));
  const std::vector<storage::ConfigChangeRow> rows = changesIn(out);
  ASSERT_EQ(rows.size(), 1u) << "a layout key was sent";
  EXPECT_EQ(rows[0].key, "moe.capacity_factor");
  EXPECT_EQ(rows[0].source, "tuner");
  EXPECT_TRUE(tuner->liveText().contains("parallel.ep = 2")) << "the restart list went away";

  // The layout still exports, as moewb tune --export writes it.
  const QString exported = m_dir.filePath("pick.toml");
  ASSERT_TRUE(tuner->exportTo(tuner::ExportFormat::kToml, exported).isOk());
  QFile file(exported);
  ASSERT_TRUE(file.open(QIODevice::ReadOnly));
  EXPECT_TRUE(QString::fromUtf8(file.readAll()).contains("ep = 2"));
  window.runController()->requestStop();
}

}  // namespace
}  // namespace moewb::gui
