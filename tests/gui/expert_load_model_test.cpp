// ExpertLoadModel: model-tester clean while steps stream in; per-step, max and mean values and the
// normalised load equal hand-computed numbers; ranks are summed; the grid grows.
#include "moewb/gui/expert_load_model.h"

#include <gtest/gtest.h>

#include "model_check.h"

namespace moewb::gui {
namespace {

using Mode = ExpertLoadModel::Mode;

// Rows for one step: tokens[layer][expert] on rank 0.
std::vector<storage::ExpertLoadRow> stepRows(int64_t step,
                                             const std::vector<std::vector<int64_t>>& tokens) {
  std::vector<storage::ExpertLoadRow> rows;
  for (size_t l = 0; l < tokens.size(); ++l) {
    for (size_t e = 0; e < tokens[l].size(); ++e) {
      storage::ExpertLoadRow r;
      r.step = step;
      r.layer = int32_t(l);
      r.expert = int32_t(e);
      r.tokens = tokens[l][e];
      r.dropped = int64_t(e);
      rows.push_back(r);
    }
  }
  return rows;
}

// Two layers, three experts, three steps.
//   step 0: L0 = {10, 20, 30}  L1 = {6, 6, 6}
//   step 1: L0 = {40, 10, 10}  L1 = {0, 3, 15}
//   step 2: L0 = {10, 50, 0}   L1 = {9, 0, 9}
std::vector<storage::ExpertLoadRow> threeSteps() {
  auto rows = stepRows(0, {{10, 20, 30}, {6, 6, 6}});
  auto s1 = stepRows(1, {{40, 10, 10}, {0, 3, 15}});
  auto s2 = stepRows(2, {{10, 50, 0}, {9, 0, 9}});
  rows.insert(rows.end(), s1.begin(), s1.end());
  rows.insert(rows.end(), s2.begin(), s2.end());
  return rows;
}

double cell(const ExpertLoadModel& m, int layer, int expert, int role = Qt::DisplayRole) {
  return m.data(m.index(layer, expert), role).toDouble();
}

TEST(ExpertLoadModel, StepValuesAndNormalisedLoad) {
  ExpertLoadModel model;
  model.setRows(threeSteps());
  ASSERT_EQ(model.rowCount(), 2);
  ASSERT_EQ(model.columnCount(), 3);
  EXPECT_EQ(model.steps(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(model.step(), 2);  // starts at the last step
  model.setStep(1);
  EXPECT_EQ(model.data(model.index(0, 0)).toLongLong(), 40);
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 15);
  // Layer 0 at step 1: mean 20 -> 40 / 20 = 2.0; layer 1: mean 6 -> 15 / 6 = 2.5.
  EXPECT_DOUBLE_EQ(cell(model, 0, 0, ExpertLoadModel::kNormalizedLoadRole), 2.0);
  EXPECT_DOUBLE_EQ(cell(model, 1, 2, ExpertLoadModel::kNormalizedLoadRole), 2.5);
  EXPECT_DOUBLE_EQ(cell(model, 1, 0, ExpertLoadModel::kNormalizedLoadRole), 0.0);
  EXPECT_DOUBLE_EQ(model.maxNormalizedLoad(), 2.5);
  EXPECT_EQ(model.data(model.index(0, 2), ExpertLoadModel::kDroppedRole).toLongLong(), 2);
  model.setStep(7);  // a step without rows shows zeros
  EXPECT_EQ(model.data(model.index(0, 0)).toLongLong(), 0);
  EXPECT_EQ(model.headerData(2, Qt::Horizontal).toString(), "E2");
  EXPECT_EQ(model.headerData(1, Qt::Vertical).toString(), "L1");
}

TEST(ExpertLoadModel, MaxAndMeanOverSteps) {
  ExpertLoadModel model;
  model.setRows(threeSteps());
  model.setMode(Mode::kMaxOverSteps);
  EXPECT_EQ(model.data(model.index(0, 0)).toLongLong(), 40);
  EXPECT_EQ(model.data(model.index(0, 1)).toLongLong(), 50);
  EXPECT_EQ(model.data(model.index(0, 2)).toLongLong(), 30);
  EXPECT_EQ(model.data(model.index(1, 0)).toLongLong(), 9);
  EXPECT_EQ(model.data(model.index(1, 1)).toLongLong(), 6);
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 15);
  // Max row L0 = {40, 50, 30}: mean 40 -> 50 / 40.
  EXPECT_DOUBLE_EQ(cell(model, 0, 1, ExpertLoadModel::kNormalizedLoadRole), 1.25);
  model.setMode(Mode::kMeanOverSteps);
  EXPECT_DOUBLE_EQ(cell(model, 0, 0), 20.0);        // (10 + 40 + 10) / 3
  EXPECT_DOUBLE_EQ(cell(model, 0, 1), 80.0 / 3.0);  // (20 + 10 + 50) / 3
  EXPECT_DOUBLE_EQ(cell(model, 0, 2), 40.0 / 3.0);  // (30 + 10 + 0) / 3
  EXPECT_DOUBLE_EQ(cell(model, 1, 0), 5.0);         // (6 + 0 + 9) / 3
  EXPECT_DOUBLE_EQ(cell(model, 1, 1), 3.0);         // (6 + 3 + 0) / 3
  EXPECT_DOUBLE_EQ(cell(model, 1, 2), 10.0);        // (6 + 15 + 9) / 3
  // Mean row L1 = {5, 3, 10}: mean 6 -> 10 / 6.
  EXPECT_DOUBLE_EQ(cell(model, 1, 2, ExpertLoadModel::kNormalizedLoadRole), 10.0 / 6.0);
}

TEST(ExpertLoadModel, SumsRanksAndFollowsTheLiveStep) {
  ExpertLoadModel model;
  testing::ModelCheck check(&model);
  model.appendRows(stepRows(0, {{1, 2}}));
  EXPECT_EQ(model.step(), 0);
  auto rank1 = stepRows(0, {{10, 20}});
  for (auto& r : rank1) r.rank = 1;
  model.appendRows(rank1);  // another rank of a known step: summed, aggregates recomputed
  EXPECT_EQ(model.data(model.index(0, 1)).toLongLong(), 22);
  // A new step with more layers and experts grows the grid; the view follows to step 1.
  model.appendRows(stepRows(1, {{1, 1, 1}, {2, 2, 8}}));
  EXPECT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.columnCount(), 3);
  EXPECT_EQ(model.step(), 1);
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 8);
  model.setMode(Mode::kMaxOverSteps);
  EXPECT_EQ(model.data(model.index(0, 1)).toLongLong(), 22);
  EXPECT_EQ(model.data(model.index(1, 2)).toLongLong(), 8);
  model.setMode(Mode::kMeanOverSteps);
  EXPECT_DOUBLE_EQ(cell(model, 0, 0), 6.0);  // (11 + 1) / 2
  // Not following: a chosen older step stays chosen.
  model.setMode(Mode::kStep);
  model.setStep(0);
  model.appendRows(stepRows(2, {{5, 5, 5}, {5, 5, 5}}));
  EXPECT_EQ(model.step(), 0);
  model.setRows({});
  EXPECT_EQ(model.rowCount(), 0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST(ExpertLoadModel, IgnoresRowsOutsideTheGrid) {
  ExpertLoadModel model;
  auto rows = stepRows(0, {{1, 2}});
  storage::ExpertLoadRow bad;
  bad.layer = -3;
  bad.expert = 1;
  rows.push_back(bad);
  bad.layer = 1'000'000;
  rows.push_back(bad);
  model.setRows(rows);
  EXPECT_EQ(model.rowCount(), 1);
  EXPECT_EQ(model.columnCount(), 2);
}

}  // namespace
}  // namespace moewb::gui
