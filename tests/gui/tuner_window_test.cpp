// The Tuner window, offscreen, on a real study (tuner_test_study.h): the table's rows are the
// study's trials with the pick selected, the chart holds the measured candidates with the pick
// and the Pareto front, a runner-up's "why not" line, exports byte-equal to what
// `moewb tune --export` writes for the same trial (the CLI binary, run here), and refused files
// (not a study, damaged, a newer schema): the message shown, no rows, nothing written, the file
// byte-identical.
#include "tuner_window.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <QAction>
#include <QImage>
#include <QMenu>
#include <QMenuBar>
#include <QTableView>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "main_window.h"
#include "tuner_scatter_view.h"
#include "tuner_test_study.h"

namespace moewb::gui {
namespace {

using testing::sharedStudy;
using tuner::testing::fileBytes;
using tuner::testing::TempDir;

// Runs `moewb tune --export` as a user would; true when it exits 0.
bool cliExport(const std::string& study, const char* format, int64_t trial,
               const std::string& out) {
  const std::string cmd = std::string("'") + MOEWB_CLI_PATH + "' tune --export '" + study +
                          "' --format " + format + " --trial " + std::to_string(trial) + " -o '" +
                          out + "' > /dev/null";
  return std::system(cmd.c_str()) == 0;
}

TEST(TunerWindow, ShowsEveryTrialThePickAndTheParetoFront) {
  const auto& s = sharedStudy();
  ASSERT_TRUE(s.result.best.has_value());
  const int64_t pickId = s.result.best->trial.id;
  TunerWindow window;
  window.show();
  ASSERT_TRUE(window.openStudy(QString::fromStdString(s.path)).isOk())
      << window.errorText().toStdString();
  EXPECT_TRUE(window.errorText().isEmpty());
  EXPECT_EQ(window.table()->model()->rowCount(), int(s.trials.size()));
  EXPECT_TRUE(window.headerText().contains(QString("pick: trial %1").arg(pickId)))
      << window.headerText().toStdString();
  EXPECT_EQ(window.exportTrial(), pickId);  // the pick is selected on open
  EXPECT_TRUE(window.whyNotLine().contains("is the pick")) << window.whyNotLine().toStdString();

  const auto& points = window.chart()->points();
  ASSERT_EQ(points.size(), 5u);
  int picks = 0;
  for (const TunerScatterPoint& p : points) {
    const int row = window.model()->rowOfTrial(p.trialId);
    ASSERT_GE(row, 0);
    const TunerTrialRow& r = window.model()->study().rows[size_t(row)];
    EXPECT_EQ(p.onPareto, r.onPareto);
    EXPECT_EQ(p.isPick, p.trialId == pickId);
    picks += p.isPick;
    // A click on a point selects its trial.
    EXPECT_EQ(window.chart()->trialAt(window.chart()->pointPosition(size_t(&p - points.data()))),
              std::optional<int64_t>(p.trialId));
  }
  EXPECT_EQ(picks, 1);

  // A runner-up: the slowest measured trial says how much slower than the pick it is.
  const tuner::TrialRecord* slowest = nullptr;
  for (const auto& t : s.trials) {
    if (t.verdict == tuner::Verdict::kOk && (!slowest || t.stepTimeMs > slowest->stepTimeMs)) {
      slowest = &t;
    }
  }
  ASSERT_NE(slowest, nullptr);
  ASSERT_NE(slowest->id, pickId);
  ASSERT_TRUE(window.selectTrial(slowest->id));
  EXPECT_TRUE(window.whyNotLine().contains("slower by")) << window.whyNotLine().toStdString();
  EXPECT_EQ(window.chart()->selectedTrial(), slowest->id);
  EXPECT_EQ(window.exportTrial(), slowest->id);
  EXPECT_FALSE(window.selectTrial(999999));

  const QImage image = window.grab().toImage();
  EXPECT_FALSE(image.isNull());
  // MOEWB_TUNER_SHOT=FILE.png keeps the rendering (the README's screenshot of a real study).
  if (const char* shot = std::getenv("MOEWB_TUNER_SHOT")) {
    ASSERT_TRUE(window.selectTrial(pickId));
    EXPECT_TRUE(window.grab().save(shot));
  }
}

TEST(TunerWindow, ExportsEqualWhatMoewbTuneExportWrites) {
  const auto& s = sharedStudy();
  ASSERT_TRUE(s.result.best.has_value());
  const std::string before = fileBytes(s.path);
  TunerWindow window;
  ASSERT_TRUE(window.openStudy(QString::fromStdString(s.path)).isOk());
  TempDir dir("gui-export");
  int64_t runnerUp = 0;
  for (const auto& t : s.trials) {
    if (t.verdict == tuner::Verdict::kOk && t.id != s.result.best->trial.id) runnerUp = t.id;
  }
  ASSERT_NE(runnerUp, 0);
  for (int64_t trial : {s.result.best->trial.id, runnerUp}) {
    ASSERT_TRUE(window.selectTrial(trial));
    for (auto format : {tuner::ExportFormat::kToml, tuner::ExportFormat::kMegatron,
                        tuner::ExportFormat::kTorchtitan}) {
      const char* name = tuner::exportFormatName(format);
      const std::string gui = dir.file("gui-" + std::to_string(trial) + "." + name);
      const std::string cli = dir.file("cli-" + std::to_string(trial) + "." + name);
      const Status written = window.exportTo(format, QString::fromStdString(gui));
      ASSERT_TRUE(written.isOk()) << written.toString();
      ASSERT_TRUE(cliExport(s.path, name, trial, cli)) << name;
      EXPECT_EQ(fileBytes(gui), fileBytes(cli)) << name << " trial " << trial;
      EXPECT_NE(fileBytes(gui).find("trial " + std::to_string(trial)), std::string::npos);
    }
  }
  // An invalid trial is never exported: the buttons fall back to the pick.
  for (const auto& t : s.trials) {
    if (t.verdict != tuner::Verdict::kInvalid) continue;
    ASSERT_TRUE(window.selectTrial(t.id));
    EXPECT_EQ(window.exportTrial(), s.result.best->trial.id);
    EXPECT_TRUE(window.whyNotLine().contains("invalid")) << window.whyNotLine().toStdString();
    break;
  }
  // The study itself is never an export target, and is only read.
  EXPECT_FALSE(window.exportTo(tuner::ExportFormat::kToml, QString::fromStdString(s.path)).isOk());
  EXPECT_EQ(fileBytes(s.path), before);
}

// Opens `path` in a fresh window: refused, the message shown, no rows, nothing exportable, the
// file byte-identical. Returns the message.
std::string expectRefused(const std::string& path, const TempDir& dir) {
  const std::string before = fileBytes(path);
  TunerWindow window;
  window.show();
  const Status opened = window.openStudy(QString::fromStdString(path));
  EXPECT_FALSE(opened.isOk()) << path;
  EXPECT_FALSE(window.errorText().isEmpty());
  EXPECT_EQ(window.headerText(), window.errorText());
  EXPECT_TRUE(window.errorText().contains(QString::fromStdString(path)));
  EXPECT_EQ(window.table()->model()->rowCount(), 0);
  EXPECT_TRUE(window.chart()->points().empty());
  EXPECT_FALSE(window.exportTrial().has_value());
  const std::string out = dir.file("never.toml");
  EXPECT_FALSE(window.exportTo(tuner::ExportFormat::kToml, QString::fromStdString(out)).isOk());
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(fileBytes(path), before) << path;
  EXPECT_FALSE(std::filesystem::exists(path + "-journal"));
  return window.errorText().toStdString();
}

TEST(TunerWindow, RefusedFilesShowTheReadersMessageAndStayUntouched) {
  TempDir dir("gui-refused");
  const std::string text = dir.file("notes.sqlite");
  std::ofstream(text) << "these are my notes, not a study\n";
  const std::string notStudy = expectRefused(text, dir);
  std::printf("not a study: %s\n", notStudy.c_str());
  EXPECT_NE(notStudy.find("not"), std::string::npos) << notStudy;
  EXPECT_EQ(notStudy.find("data loss"), std::string::npos) << notStudy;  // plain words

  const auto& s = sharedStudy();
  const std::string truncated = dir.file("truncated.sqlite");
  std::filesystem::copy_file(s.path, truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 3);
  expectRefused(truncated, dir);

  const std::string newer = dir.file("newer.sqlite");
  std::filesystem::copy_file(s.path, newer);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string schema = expectRefused(newer, dir);
  std::printf("newer schema: %s\n", schema.c_str());
  EXPECT_NE(schema.find("99"), std::string::npos) << schema;

  TunerWindow window;
  EXPECT_FALSE(window.openStudy(QString::fromStdString(dir.file("missing.sqlite"))).isOk());
  EXPECT_FALSE(window.errorText().isEmpty());
}

TEST(TunerWindow, TheMainWindowsFileMenuOpensAStudy) {
  MainWindow main;
  QStringList texts;
  for (QAction* menu : main.menuBar()->actions()) {
    if (menu->menu() == nullptr || menu->text() != QStringLiteral("&File")) continue;
    for (QAction* action : menu->menu()->actions()) texts << action->text();
  }
  EXPECT_TRUE(texts.contains(QStringLiteral("Open &study..."))) << texts.join(',').toStdString();
  // What the action (and the lead's command line) does after its dialog.
  TunerWindow* window = openStudyWindow(QString::fromStdString(sharedStudy().path), &main);
  ASSERT_NE(window, nullptr);
  EXPECT_TRUE(window->isVisible());
  EXPECT_TRUE(window->errorText().isEmpty()) << window->errorText().toStdString();
  EXPECT_EQ(window->model()->rowCount(), int(sharedStudy().trials.size()));
  window->close();  // deleted on close
}

}  // namespace
}  // namespace moewb::gui
