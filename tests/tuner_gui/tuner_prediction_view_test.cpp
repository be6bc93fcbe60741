// TunerPredictionView offscreen: the error of a known point set, the shared axis (over the
// points' range) and the diagonal's geometry, hit testing and a click, the pixels of a rendered dot; and the Tuner
// window on real studies: a model-strategy study shows one point per predicted trial, a halving
// study (no predictions) hides the chart; moewb-gui --study --screenshot renders that window.
#include "tuner_prediction_view.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <QImage>
#include <QProcess>
#include <QSignalSpy>
#include <QTest>

#include "../tuner/tuner_test_util.h"
#include "moewb/tuner/study.h"
#include "theme.h"
#include "tuner_window.h"

namespace moewb::gui {
namespace {

std::vector<TunerPredictionPoint> threePoints() {
  return {{1, 10.0, 8.0, false},    // |10 - 8| / 8 = 25%
          {2, 9.0, 10.0, true},     // 10%
          {3, 20.0, 20.0, false}};  // 0%
}

TEST(TunerPredictionView, ErrorIsMedianAndMaxOfRelativeErrors) {
  const PredictionError e = predictionError(threePoints());
  EXPECT_EQ(e.count, 3u);
  EXPECT_NEAR(e.median, 0.10, 1e-12);
  EXPECT_NEAR(e.max, 0.25, 1e-12);
  EXPECT_EQ(predictionError({{1, 5, 0, false}}).count, 0u) << "no measurement, no error";
}

TEST(TunerPredictionView, SharedAxisDiagonalHitsAndClicks) {
  TunerPredictionView view;
  view.resize(400, 300);
  view.setPoints(threePoints());
  // The shared axis spans the points (8 .. 20 ms) with a margin, not from 0.
  EXPECT_GT(view.axis().min, 0);
  EXPECT_LE(view.axis().min, 8);
  EXPECT_GE(view.axis().max, 20);
  EXPECT_EQ(view.titleText(), "Predicted vs measured: 3 trials, error median 10.0%, max 25.0%");
  // Prediction = measurement lies on the diagonal; above it the model was optimistic.
  const QPointF lo = view.toScreen(8, 8), hi = view.toScreen(20, 20);
  EXPECT_LT(lo.x(), hi.x());
  EXPECT_GT(lo.y(), hi.y());
  const QPointF on = view.pointPosition(2);
  EXPECT_NEAR(on.x(), hi.x(), 1e-9);
  EXPECT_NEAR(on.y(), hi.y(), 1e-9);
  EXPECT_LT(view.pointPosition(1).y(), view.toScreen(9, 9).y()) << "measured 10 > predicted 9";
  EXPECT_EQ(view.trialAt(view.pointPosition(0)), 1);
  EXPECT_FALSE(view.trialAt(QPointF(1, 1)).has_value());

  QSignalSpy clicked(&view, &TunerPredictionView::trialClicked);
  QTest::mouseClick(&view, Qt::LeftButton, {}, view.pointPosition(1).toPoint());
  ASSERT_EQ(clicked.count(), 1);
  EXPECT_EQ(clicked.at(0).at(0).toLongLong(), 2);
  EXPECT_EQ(view.selectedTrial(), 2);
}

// Points that reach near 0 keep the axis from 0; one study's trials within a few percent of each
// other get an axis around them.
TEST(TunerPredictionView, AxisStartsAtZeroOnlyWhenThePointsReachNearIt) {
  TunerPredictionView view;
  view.setPoints({{1, 1.0, 2.0, false}, {2, 20.0, 21.0, false}});
  EXPECT_EQ(view.axis().min, 0);
  view.setPoints({{1, 231.5, 228.8, true}, {2, 232.6, 252.4, false}});
  EXPECT_GE(view.axis().min, 200);
  EXPECT_LE(view.axis().min, 228.8);
  EXPECT_GE(view.axis().max, 252.4);
  EXPECT_LE(view.axis().max, 280);
}

TEST(TunerPredictionView, RendersTheDotsInTheSeriesColour) {
  TunerPredictionView view;
  view.resize(400, 300);
  view.setPoints({{7, 12.0, 5.0, false}});
  QImage image(view.size(), QImage::Format_ARGB32);
  view.render(&image);
  const QPoint dot = view.pointPosition(0).toPoint();
  EXPECT_EQ(image.pixelColor(dot).rgb(), theme::series(0).rgb());
  EXPECT_EQ(image.pixelColor(5, view.height() - 5).rgb(), theme::base().rgb());
}

tuner::StudyOptions tinyStudy(const std::string& path, const std::string& strategy) {
  tuner::StudyOptions o;
  o.studyPath = path;
  o.configPath = tuner::testing::tinyPath();
  o.base = tuner::testing::quickTiny();
  o.knobs = {{"loss.kind", {}}};
  o.strategy = strategy;
  o.modelTopK = 2;
  o.steps = 2;
  o.maxSteps = 4;
  return o;
}

TEST(TunerPredictionView, TheWindowShowsPredictionsOfModelStudiesOnly) {
  tuner::testing::TempDir dir("prediction-view");
  const auto model = tuner::runStudy(tinyStudy(dir.file("model.sqlite"), "model"));
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  const auto halving = tuner::runStudy(tinyStudy(dir.file("halving.sqlite"), "halving"));
  ASSERT_TRUE(halving.isOk()) << halving.status().toString();

  TunerWindow window;
  ASSERT_TRUE(window.openStudy(QString::fromStdString(dir.file("model.sqlite"))).isOk());
  EXPECT_TRUE(window.predictionChart()->isVisibleTo(&window));
  EXPECT_EQ(int64_t(window.predictionChart()->points().size()), model->model.compared);
  EXPECT_GT(model->model.compared, 0);
  for (const auto& p : window.predictionChart()->points()) {
    EXPECT_GT(p.predictedMs, 0);
    EXPECT_GT(p.measuredMs, 0);
  }
  const int64_t picked = model->best->trial.id;
  ASSERT_TRUE(window.selectTrial(picked));
  EXPECT_EQ(window.predictionChart()->selectedTrial(), picked);

  ASSERT_TRUE(window.openStudy(QString::fromStdString(dir.file("halving.sqlite"))).isOk());
  EXPECT_FALSE(window.predictionChart()->isVisibleTo(&window));
  EXPECT_TRUE(window.predictionChart()->points().empty());
}

// moewb-gui --study S --screenshot OUT --size WxH renders the Tuner window alone and exits 0; a
// file that is not a study exits 1 and is left as it was.
TEST(TunerApp, StudyScreenshotRendersTheTunerWindowAlone) {
  tuner::testing::TempDir dir("study-shot");
  const auto model = tuner::runStudy(tinyStudy(dir.file("model.sqlite"), "model"));
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  auto runApp = [&](const std::string& study, const std::string& out) {
    QProcess app;
    app.start(QStringLiteral(MOEWB_GUI_PATH),
              {QStringLiteral("--study"), QString::fromStdString(study),
               QStringLiteral("--screenshot"), QString::fromStdString(out),
               QStringLiteral("--size"), QStringLiteral("1600x700")});
    EXPECT_TRUE(app.waitForFinished(60000)) << "moewb-gui did not exit";
    return app.exitStatus() == QProcess::NormalExit ? app.exitCode() : -1;
  };
  EXPECT_EQ(runApp(dir.file("model.sqlite"), dir.file("shot.png")), 0);
  const QImage shot(QString::fromStdString(dir.file("shot.png")));
  ASSERT_FALSE(shot.isNull());
  // (wide enough for the header, which names the study and config paths at their length)
  EXPECT_EQ(shot.size(), QSize(1600, 700));

  const std::string text = dir.file("notes.txt");
  { std::ofstream(text) << "not a study\n"; }
  EXPECT_EQ(runApp(text, dir.file("refused.png")), 1);
  std::ifstream in(text);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "not a study");
}

}  // namespace
}  // namespace moewb::gui
