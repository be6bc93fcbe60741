// Offscreen render test: the main window on a real trace file draws a non-blank timeline and
// heat map; errors opening a file reach the status bar instead of crashing.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <QApplication>
#include <QDateTime>
#include <QFileInfo>
#include <QImage>
#include <QMouseEvent>
#include <QSet>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>

#include "chart_view.h"
#include "heatmap_panel.h"
#include "heatmap_view.h"
#include "main_window.h"
#include "run_controller.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"
#include "../source_dir.h"

namespace moewb::gui {
namespace {

struct ImageStats {
  int distinctColors = 0;
  double nonBackgroundFraction = 0;
};

ImageStats imageStats(const QImage& image, const QColor& background) {
  QSet<QRgb> colors;
  int64_t nonBackground = 0;
  const QImage img = image.convertToFormat(QImage::Format_RGB32);
  for (int y = 0; y < img.height(); ++y) {
    for (int x = 0; x < img.width(); ++x) {
      const QRgb px = img.pixel(x, y);
      colors.insert(px);
      if (px != background.rgb()) ++nonBackground;
    }
  }
  return {int(colors.size()), double(nonBackground) / double(img.width() * img.height())};
}

class MainWindowRenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    m_file = m_dir.filePath(QStringLiteral("render.sqlite"));
    auto trace = testing::TestTrace::create(m_file.toStdString(), 4, 8);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    for (int s = 0; s < 6; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    theme::apply(*qApp);
  }
  QTemporaryDir m_dir;
  QString m_file;
};

TEST_F(MainWindowRenderTest, TimelineAndHeatmapAreNotBlank) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1400, 900);
  window.show();
  Status status = window.openFile(m_file);
  ASSERT_TRUE(status.isOk()) << status.toString();
  QApplication::processEvents();

  TimelineView* timeline = window.timelineView();
  EXPECT_GT(timeline->drawList().items.size(), 10u);
  const QImage timelineImage = timeline->grab().toImage();
  ASSERT_FALSE(timelineImage.isNull());
  const ImageStats t = imageStats(timelineImage, theme::base());
  EXPECT_GT(t.distinctColors, 12) << "timeline looks blank";
  EXPECT_GT(t.nonBackgroundFraction, 0.25);

  HeatmapView* heatmap = window.heatmapPanel()->view();
  const QImage heatImage = heatmap->grab().toImage();
  ASSERT_FALSE(heatImage.isNull());
  const ImageStats h = imageStats(heatImage, theme::base());
  EXPECT_GT(h.distinctColors, 8) << "heat map looks blank";
  EXPECT_GT(h.nonBackgroundFraction, 0.4);

  // Zooming in keeps drawing; fitting again restores the full window.
  timeline->zoomBy(8.0, timeline->timeGeometry().widthPx / 2);
  EXPECT_LT(timeline->timeGeometry().durNs(), 6 * testing::TestTrace::kStepNs / 4);
  EXPECT_GT(imageStats(timeline->grab().toImage(), theme::base()).distinctColors, 6);
  timeline->fitAll();
  EXPECT_EQ(timeline->timeGeometry().durNs(), 6 * testing::TestTrace::kStepNs);
}

TEST_F(MainWindowRenderTest, OpenErrorsGoToTheStatusBar) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.show();
  const QString missing = m_dir.filePath(QStringLiteral("nope.sqlite"));
  EXPECT_FALSE(window.openFile(missing).isOk());
  EXPECT_TRUE(window.lastError().contains(QStringLiteral("nope.sqlite")))
      << window.lastError().toStdString();
  EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("nope.sqlite")));
  EXPECT_FALSE(window.document()->isOpen());
  ASSERT_TRUE(window.openFile(m_file).isOk());
  EXPECT_EQ(window.document()->stepModel()->rowCount(), 6);
}

TEST_F(MainWindowRenderTest, BadRunConfigIsReportedAndNothingRuns) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  const QString config = m_dir.filePath(QStringLiteral("bad.toml"));
  {
    QFile f(config);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("[moe]\ntop_k = 99\n");
  }
  const QString out = m_dir.filePath(QStringLiteral("bad-run.sqlite"));
  EXPECT_FALSE(window.startRun(config, out).isOk());
  EXPECT_FALSE(window.lastError().isEmpty());
  EXPECT_FALSE(QFile::exists(out));
}

TEST_F(MainWindowRenderTest, RunTrainsAndShowsTheTraceLive) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  QSignalSpy finished(&window, &MainWindow::runFinished);
  const QString config = QString::fromStdString(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  const QString out = m_dir.filePath(QStringLiteral("runs/live.sqlite"));
  Status status = window.startRun(config, out, 4);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_TRUE(window.runController()->isRunning());
  ASSERT_TRUE(finished.wait(120'000)) << "the run did not finish";
  EXPECT_TRUE(finished.at(0).at(0).toBool()) << finished.at(0).at(1).toString().toStdString();
  EXPECT_FALSE(window.runController()->isRunning());
  ASSERT_TRUE(window.document()->isOpen());
  EXPECT_EQ(window.document()->path(), QFileInfo(out).absoluteFilePath());
  EXPECT_EQ(window.document()->stepModel()->rowCount(), 4);
  EXPECT_EQ(window.document()->run()->status, "completed");
  EXPECT_GT(window.document()->timeline().sliceCount(), 4);
  EXPECT_GT(window.document()->expertLoadModel()->rowCount(), 0);
  EXPECT_EQ(window.lossChart()->points().size(), 4u);
}

TEST_F(MainWindowRenderTest, StopEndsARunEarly) {
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  QSignalSpy finished(&window, &MainWindow::runFinished);
  const QString config = QString::fromStdString(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  const QString out = m_dir.filePath(QStringLiteral("stopped.sqlite"));
  ASSERT_TRUE(window.startRun(config, out, 100'000).isOk());
  // A second run cannot start while one is going.
  EXPECT_FALSE(window.startRun(config, m_dir.filePath(QStringLiteral("second.sqlite"))).isOk());
  QTest::qWait(300);
  window.runController()->requestStop();
  ASSERT_TRUE(finished.wait(120'000));
  EXPECT_TRUE(finished.at(0).at(0).toBool());
  EXPECT_TRUE(finished.at(0).at(1).toString().startsWith(QStringLiteral("Stopped")))
      << finished.at(0).at(1).toString().toStdString();
  EXPECT_EQ(window.document()->run()->status, "stopped");
  EXPECT_LT(window.document()->stepModel()->rowCount(), 100'000);
}

// Issue 19, item 7: a trace still marked "running" says in the status bar whether its writer is
// alive, from the writer's heartbeat (meta heartbeat_unix_ms).
TEST_F(MainWindowRenderTest, StatusBarTellsALiveWriterFromADeadOne) {
  const QString file = m_dir.filePath(QStringLiteral("unfinished.sqlite"));
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  {
    auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    ASSERT_TRUE(trace.value()->addStep(0).isOk());
    ASSERT_TRUE(window.openFile(file).isOk());
    EXPECT_TRUE(window.runStatusText().startsWith(QStringLiteral("run: running (last heartbeat ")))
        << window.runStatusText().toStdString();
  }  // the writer goes away without finishing the run, as after a SIGKILL
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.toUtf8().constData(), &db), SQLITE_OK);
  const std::string sql = "UPDATE meta SET value = '" +
                          std::to_string(QDateTime::currentMSecsSinceEpoch() - 3'600'000) +
                          "' WHERE key = 'heartbeat_unix_ms'";
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_EQ(sqlite3_changes(db), 1);
  sqlite3_close(db);
  ASSERT_TRUE(window.openFile(file).isOk());
  EXPECT_EQ(window.document()->run()->status, "running");
  EXPECT_TRUE(window.runStatusText().startsWith(
      QStringLiteral("run: ended without closing (writer died; last heartbeat 60 min ago)")))
      << window.runStatusText().toStdString();
  // A finished trace just says how it ended.
  ASSERT_TRUE(window.openFile(m_file).isOk());
  EXPECT_EQ(window.runStatusText(), QStringLiteral("run: completed"));
}

TEST_F(MainWindowRenderTest, MemoryChartDrawsFourSeriesOrSaysThereAreNone) {
  const QString file = m_dir.filePath(QStringLiteral("memory.sqlite"));
  {
    auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setMemoryCounters(true);
    for (int s = 0; s < 8; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    trace.value()->addConfigChange(4, "optim.lr", "0.003", "0.001");
    ASSERT_TRUE(trace.value()->finish().isOk());
  }
  MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1600, 1000);
  window.show();
  // A trace without memory counters: an empty chart with a note.
  ASSERT_TRUE(window.openFile(m_file).isOk());
  ChartView* chart = window.memoryChart();
  EXPECT_TRUE(chart->points().empty());
  EXPECT_EQ(chart->emptyText(), QStringLiteral("no memory counters in this trace"));
  const ImageStats empty = imageStats(chart->grab().toImage(), theme::base());

  ASSERT_TRUE(window.openFile(file).isOk());
  QApplication::processEvents();
  ASSERT_EQ(chart->series().size(), 4u);
  for (const ChartSeries& s : chart->series()) {
    ASSERT_EQ(s.points.size(), 8u) << s.name.toStdString();
  }
  EXPECT_EQ(chart->series()[0].name, QStringLiteral("weights"));
  EXPECT_DOUBLE_EQ(chart->series()[2].points[0].y(), 16.0);  // optimizer, MiB
  EXPECT_DOUBLE_EQ(chart->series()[3].points[4].y(), 4.0);   // activations at step 4
  EXPECT_EQ(chart->markers().size(), 1u);
  const QImage image = chart->grab().toImage();
  ASSERT_FALSE(image.isNull());
  const ImageStats drawn = imageStats(image, theme::base());
  EXPECT_GT(drawn.distinctColors, empty.distinctColors + 4) << "memory chart looks blank";
  EXPECT_GT(drawn.nonBackgroundFraction, empty.nonBackgroundFraction);
  // Every series colour appears in the picture.
  for (const ChartSeries& s : chart->series()) {
    bool found = false;
    const QImage rgb = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < rgb.height() && !found; ++y) {
      for (int x = 0; x < rgb.width() && !found; ++x) found = rgb.pixel(x, y) == s.color.rgb();
    }
    EXPECT_TRUE(found) << s.name.toStdString();
  }
  // Hovering the plot draws the readout of every series at the nearest step.
  QMouseEvent move(QEvent::MouseMove, QPointF(chart->width() * 0.6, chart->height() * 0.6),
                   chart->mapToGlobal(QPointF(chart->width() * 0.6, chart->height() * 0.6)),
                   Qt::NoButton, Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(chart, &move);
  const QImage hovered = chart->grab().toImage();
  EXPECT_NE(hovered, image) << "no hover readout";
}

TEST_F(MainWindowRenderTest, HeatmapDescribesCells) {
  MainWindow window;
  ASSERT_TRUE(window.openFile(m_file).isOk());
  HeatmapView* heatmap = window.heatmapPanel()->view();
  const QString text = heatmap->cellText(1, 0);
  const qint64 tokens = testing::TestTrace::tokensFor(5, 1, 0);
  EXPECT_TRUE(text.contains(QStringLiteral("layer 1, expert 0: %1 tokens").arg(tokens)))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("x layer mean"))) << text.toStdString();
  EXPECT_GE(heatmap->colorScaleMax(), 1.5);
}

}  // namespace
}  // namespace moewb::gui
