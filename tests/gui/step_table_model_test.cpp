// StepTableModel: model-tester clean, raw and formatted values, appends of live steps.
#include "moewb/gui/step_table_model.h"

#include <gtest/gtest.h>

#include "model_check.h"

namespace moewb::gui {
namespace {

storage::StepRow stepRow(int64_t step, double loss) {
  storage::StepRow r;
  r.step = step;
  r.loss = loss;
  r.auxLoss = 0.01 * double(step);
  r.startNs = 1'000'000 * step;
  r.endNs = r.startNs + 2'500'000;
  r.tokens = 512;
  r.tokensPerSecond = 204'800;
  r.peakBytes = 3 * 1024 * 1024;
  return r;
}

TEST(StepTableModel, PassesModelTesterThroughResetAndAppend) {
  StepTableModel model;
  testing::ModelCheck check(&model);
  model.setRows({stepRow(0, 5.5), stepRow(1, 5.0)});
  model.appendRows({stepRow(2, 4.8), stepRow(3, 4.7)});
  model.appendRows({});
  model.setRows({});
  model.appendRows({stepRow(0, 5.5)});
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
  EXPECT_EQ(model.rowCount(), 1);
}

TEST(StepTableModel, ShowsTheRowValues) {
  StepTableModel model;
  storage::StepRow rank3 = stepRow(7, 4.25);
  rank3.rank = 3;
  model.setRows({stepRow(0, 5.5), rank3});
  ASSERT_EQ(model.rowCount(), 2);
  ASSERT_EQ(model.columnCount(), StepTableModel::kColumnCount);
  auto cell = [&](int row, int col, int role = Qt::DisplayRole) {
    return model.data(model.index(row, col), role);
  };
  EXPECT_EQ(cell(1, StepTableModel::kStep).toString(), "7");
  EXPECT_EQ(cell(1, StepTableModel::kRank).toString(), "3");
  EXPECT_EQ(cell(1, StepTableModel::kRank, StepTableModel::kSortRole).toLongLong(), 3);
  EXPECT_EQ(cell(0, StepTableModel::kRank).toString(), "0");
  EXPECT_EQ(model.headerData(StepTableModel::kRank, Qt::Horizontal).toString(), "Rank");
  EXPECT_EQ(cell(1, StepTableModel::kLoss).toString(), "4.2500");
  EXPECT_DOUBLE_EQ(cell(1, StepTableModel::kLoss, StepTableModel::kSortRole).toDouble(), 4.25);
  EXPECT_EQ(cell(1, StepTableModel::kDuration).toString(), "2.50 ms");
  EXPECT_EQ(cell(1, StepTableModel::kDuration, StepTableModel::kSortRole).toLongLong(), 2'500'000);
  EXPECT_EQ(cell(0, StepTableModel::kPeakMemory).toString(), "3.00 MiB");
  EXPECT_EQ(cell(0, StepTableModel::kTokensPerSecond).toString(), "204.8k");
  EXPECT_EQ(model.headerData(StepTableModel::kAuxLoss, Qt::Horizontal).toString(), "Aux loss");
}

}  // namespace
}  // namespace moewb::gui
