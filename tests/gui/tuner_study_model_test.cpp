// TunerStudyModel and its helpers on a real study made by the tuner library (tuner_test_study.h):
// one row per stored trial with the settings changed from the base, the pick marked (the trial
// `moewb tune` picks), chart points and the Pareto front checked against a brute-force dominance
// test, the "why not" line, sorting through a proxy; the Pareto sweep and the settings diff on
// hand-made inputs.
#include "moewb/gui/tuner_study_model.h"

#include <gtest/gtest.h>

#include <QSortFilterProxyModel>
#include <algorithm>
#include <map>

#include "model_check.h"
#include "tuner_test_study.h"

namespace moewb::gui {
namespace {

using testing::sharedStudy;

TEST(TunerStudyModel, RowsAreTheStudysTrialsWithTheBaseAndThePickMarked) {
  const auto& s = sharedStudy();
  ASSERT_EQ(s.trials.size(), 8u);  // 5 measured + 3 invalid
  ASSERT_TRUE(s.result.best.has_value());
  auto study = loadTunerStudy(s.path);
  ASSERT_TRUE(study.isOk()) << study.status().toString();
  TunerStudyModel model;
  testing::ModelCheck check(&model);
  model.setStudy(std::move(*study));
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join("\n").toStdString();
  ASSERT_EQ(model.rowCount(), int(s.trials.size()));
  EXPECT_EQ(model.study().baseSettings,
            "parallel.ep=1,fusion.permute_into_experts=false,fusion.combine_into_experts=false");
  int picks = 0, bases = 0;
  for (int r = 0; r < model.rowCount(); ++r) {
    const auto& t = s.trials[size_t(r)];
    auto cell = [&](int column) { return model.index(r, column).data().toString(); };
    EXPECT_EQ(model.index(r, 0).data(TunerStudyModel::kTrialIdRole).toLongLong(), t.id);
    EXPECT_EQ(cell(TunerStudyModel::kVerdict), tuner::verdictName(t.verdict));
    EXPECT_EQ(cell(TunerStudyModel::kReason).toStdString(), t.message);
    const bool pick = model.index(r, 0).data(TunerStudyModel::kPickRole).toBool();
    EXPECT_EQ(pick, t.id == s.result.best->trial.id) << t.id;
    EXPECT_EQ(cell(TunerStudyModel::kTrial).contains("(pick)"), pick);
    picks += pick;
    const QString changes = cell(TunerStudyModel::kSettings);
    if (t.settings == model.study().baseSettings) {
      EXPECT_EQ(changes, "(base)");
      ++bases;
    } else {
      // Only the differing knobs, each as the trial set it.
      ASSERT_FALSE(changes.isEmpty());
      for (const QString& kv : changes.split(',')) {
        EXPECT_TRUE(QString::fromStdString(t.settings).contains(kv)) << kv.toStdString();
        EXPECT_FALSE(QString::fromStdString(model.study().baseSettings).contains(kv))
            << kv.toStdString();
      }
    }
    EXPECT_EQ(cell(TunerStudyModel::kPredictedStepTime),
              t.predictedStepTimeMs > 0 ? QString::number(t.predictedStepTimeMs, 'f', 2) : "-");
    if (t.verdict == tuner::Verdict::kOk) {
      EXPECT_EQ(cell(TunerStudyModel::kStepTime), QString::number(t.stepTimeMs, 'f', 2));
      EXPECT_EQ(cell(TunerStudyModel::kPeak), QString::number(t.peakBytes / 1048576.0, 'f', 2));
    } else {
      EXPECT_EQ(t.verdict, tuner::Verdict::kInvalid);
      EXPECT_EQ(cell(TunerStudyModel::kStepTime), "-");
      EXPECT_FALSE(t.message.empty());
    }
  }
  EXPECT_EQ(picks, 1);
  EXPECT_EQ(bases, 1);
}

TEST(TunerStudyModel, ParetoFrontIsTheUndominatedMeasuredTrials) {
  const auto& s = sharedStudy();
  auto study = loadTunerStudy(s.path);
  ASSERT_TRUE(study.isOk()) << study.status().toString();
  size_t points = 0, front = 0;
  for (const TunerTrialRow& a : study->rows) {
    EXPECT_EQ(a.isPoint, a.trial.verdict == tuner::Verdict::kOk) << a.trial.id;
    if (!a.isPoint) {
      EXPECT_FALSE(a.onPareto);
      continue;
    }
    ++points;
    bool dominated = false;
    for (const TunerTrialRow& b : study->rows) {
      if (!b.isPoint || &a == &b) continue;
      const bool noWorse =
          b.trial.stepTimeMs <= a.trial.stepTimeMs && b.trial.peakBytes <= a.trial.peakBytes;
      const bool better =
          b.trial.stepTimeMs < a.trial.stepTimeMs || b.trial.peakBytes < a.trial.peakBytes;
      dominated = dominated || (noWorse && better);
    }
    EXPECT_EQ(a.onPareto, !dominated) << "trial " << a.trial.id;
    front += a.onPareto;
  }
  EXPECT_EQ(points, 5u);
  EXPECT_GE(front, 1u);
  // The pick has the most tokens/s, i.e. the shortest step time: always on the front.
  ASSERT_GE(study->pickRow, 0);
  EXPECT_TRUE(study->rows[size_t(study->pickRow)].onPareto);
}

TEST(TunerStudyModel, WhyNotNamesThePickTheRefusalOrTheDifference) {
  auto study = loadTunerStudy(sharedStudy().path);
  ASSERT_TRUE(study.isOk()) << study.status().toString();
  const auto& pick = study->rows[size_t(study->pickRow)].trial;
  for (size_t r = 0; r < study->rows.size(); ++r) {
    const auto& row = study->rows[r];
    const std::string why = whyNotText(*study, int(r)).toStdString();
    if (row.isPick) {
      EXPECT_NE(why.find("is the pick"), std::string::npos) << why;
    } else if (row.trial.verdict == tuner::Verdict::kInvalid) {
      EXPECT_NE(why.find("invalid: " + row.trial.message), std::string::npos) << why;
    } else if (row.trial.stepTimeMs > pick.stepTimeMs) {
      EXPECT_NE(why.find("slower by"), std::string::npos) << why;
      EXPECT_NE(why.find("trial " + std::to_string(pick.id)), std::string::npos) << why;
    }
  }
  EXPECT_EQ(whyNotText(*study, -1), "");
  EXPECT_EQ(whyNotText(*study, int(study->rows.size())), "");
}

TEST(TunerStudyModel, SortsNumericallyThroughAProxy) {
  auto study = loadTunerStudy(sharedStudy().path);
  ASSERT_TRUE(study.isOk()) << study.status().toString();
  TunerStudyModel model;
  model.setStudy(std::move(*study));
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&model);
  proxy.setSortRole(TunerStudyModel::kSortRole);
  proxy.sort(TunerStudyModel::kPeak, Qt::DescendingOrder);
  for (int r = 1; r < proxy.rowCount(); ++r) {
    EXPECT_GE(
        proxy.index(r - 1, TunerStudyModel::kPeak).data(TunerStudyModel::kSortRole).toLongLong(),
        proxy.index(r, TunerStudyModel::kPeak).data(TunerStudyModel::kSortRole).toLongLong());
  }
}

TEST(TunerStudyModel, HalvingStudyPlotsEachCandidatesFurthestRungAndExplainsThePruned) {
  tuner::testing::TempDir dir("gui-halving");
  tuner::StudyOptions o;
  o.studyPath = dir.file("study.sqlite");
  o.configPath = tuner::testing::tinyPath();
  o.base = tuner::testing::quickTiny();
  o.knobs = {{"fusion.permute_into_experts", {}}, {"loss.kind", {}}};
  o.knobsText = "fusion.permute_into_experts,loss.kind";
  o.strategy = "halving";
  o.steps = 2;
  o.maxSteps = 8;
  auto result = tuner::runStudy(o);
  ASSERT_TRUE(result.isOk()) << result.status().toString();
  ASSERT_TRUE(result->best.has_value());
  auto study = loadTunerStudy(o.studyPath);
  ASSERT_TRUE(study.isOk()) << study.status().toString();
  ASSERT_GE(study->pickRow, 0);
  EXPECT_EQ(study->rows[size_t(study->pickRow)].trial.id, result->best->trial.id);
  std::map<std::string, int> pointsPerCandidate, maxRung;
  for (const TunerTrialRow& r : study->rows) {
    maxRung[r.trial.settings] = std::max(maxRung[r.trial.settings], r.trial.rung);
    pointsPerCandidate[r.trial.settings] += r.isPoint;
  }
  EXPECT_EQ(pointsPerCandidate.size(), 6u);  // 2 x 3 candidates, all valid and measured
  bool sawEarlier = false, sawPruned = false;
  for (size_t i = 0; i < study->rows.size(); ++i) {
    const TunerTrialRow& r = study->rows[i];
    EXPECT_EQ(pointsPerCandidate[r.trial.settings], 1) << r.trial.settings;
    EXPECT_EQ(r.isPoint, r.trial.rung == maxRung[r.trial.settings]) << r.trial.id;
    const std::string why = whyNotText(*study, int(i)).toStdString();
    if (!r.isPoint) {
      EXPECT_NE(why.find("earlier rung"), std::string::npos) << why;
      sawEarlier = true;
    } else if (r.trial.verdict == tuner::Verdict::kPruned) {
      EXPECT_NE(why.find("pruned at rung"), std::string::npos) << why;
      sawPruned = true;
    }
  }
  EXPECT_TRUE(sawEarlier);
  EXPECT_TRUE(sawPruned);
}

// The predicted columns: the cost model's step time and peak where the trial has them, "-" where
// it has none (an exhaustive study without a calibration trace), numbers for sorting.
TEST(TunerStudyModel, PredictedColumnsShowTheCostModelsFigures) {
  TunerStudy study;
  TunerTrialRow predicted;
  predicted.trial.id = 1;
  predicted.trial.verdict = tuner::Verdict::kOk;
  predicted.trial.steps = 3;
  predicted.trial.stepTimeMs = 10.0;
  predicted.trial.peakBytes = int64_t(2) << 20;
  predicted.trial.predictedStepTimeMs = 9.5;
  predicted.trial.predictedPeakBytes = int64_t(3) << 20;
  TunerTrialRow without = predicted;
  without.trial.id = 2;
  without.trial.predictedStepTimeMs = 0;
  without.trial.predictedPeakBytes = 0;
  study.rows = {predicted, without};
  TunerStudyModel model;
  testing::ModelCheck check(&model);
  model.setStudy(std::move(study));
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join("\n").toStdString();
  auto cell = [&](int row, int column, int role = Qt::DisplayRole) {
    return model.index(row, column).data(role);
  };
  EXPECT_EQ(cell(0, TunerStudyModel::kPredictedStepTime).toString(), "9.50");
  EXPECT_EQ(cell(0, TunerStudyModel::kPredictedPeak).toString(), "3.00");
  EXPECT_EQ(cell(0, TunerStudyModel::kStepTime).toString(), "10.00");
  EXPECT_EQ(cell(1, TunerStudyModel::kPredictedStepTime).toString(), "-");
  EXPECT_EQ(cell(1, TunerStudyModel::kPredictedPeak).toString(), "-");
  EXPECT_DOUBLE_EQ(cell(0, TunerStudyModel::kPredictedStepTime, TunerStudyModel::kSortRole)
                       .toDouble(), 9.5);
  EXPECT_EQ(cell(0, TunerStudyModel::kPredictedPeak, TunerStudyModel::kSortRole).toLongLong(),
            int64_t(3) << 20);
  EXPECT_EQ(model.headerData(TunerStudyModel::kPredictedStepTime, Qt::Horizontal).toString(),
            "Predicted (ms)");
  EXPECT_EQ(model.headerData(TunerStudyModel::kPredictedPeak, Qt::Horizontal).toString(),
            "Predicted (MiB)");
}

TEST(TunerParetoFront, KeepsUndominatedPointsAndTies) {
  // 0 and 4 are identical (both on the front); 1 is dominated by 0; 2 is the fastest; 3 ties 2
  // on step time with more memory (dominated); 5 has the least memory.
  const std::vector<TunerPoint> points = {{10, 50}, {12, 60}, {5, 80}, {5, 90}, {10, 50}, {20, 10}};
  EXPECT_EQ(paretoFront(points), (std::vector<size_t>{2, 0, 4, 5}));
  EXPECT_TRUE(paretoFront({}).empty());
  EXPECT_EQ(paretoFront({{3, 3}}), (std::vector<size_t>{0}));
}

TEST(TunerSettingsChange, ListsOnlyTheKnobsThatDiffer) {
  EXPECT_EQ(settingsChange("a.x=1,b.y=true", "a.x=1,b.y=false"), "b.y=true");
  EXPECT_EQ(settingsChange("a.x=1,b.y=false", "a.x=1,b.y=false"), "(base)");
  // Different knobs or unparsable text: the settings as they are.
  EXPECT_EQ(settingsChange("a.x=2", "a.x=1,b.y=false"), "a.x=2");
  EXPECT_EQ(settingsChange("c.z=2,b.y=false", "a.x=1,b.y=false"), "c.z=2,b.y=false");
}

}  // namespace
}  // namespace moewb::gui
