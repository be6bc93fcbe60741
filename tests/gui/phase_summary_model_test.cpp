// PhaseSummaryModel: model-tester clean while slices stream in; counts, totals, shares.
#include "moewb/gui/phase_summary_model.h"

#include <gtest/gtest.h>

#include "model_check.h"

namespace moewb::gui {
namespace {

storage::SliceRow slice(const std::string& name, int64_t durNs, int32_t depth) {
  storage::SliceRow r;
  r.name = name;
  r.durNs = durNs;
  r.depth = depth;
  r.category = depth == 0 ? "step" : "phase";
  return r;
}

TEST(PhaseSummaryModel, AggregatesAndPassesModelTester) {
  PhaseSummaryModel model;
  testing::ModelCheck check(&model);
  model.addSlices({slice("step", 1000, 0), slice("forward", 400, 1), slice("attention.fwd", 100, 2),
                   slice("attention.fwd", 150, 2)});
  model.addSlices(
      {slice("step", 1000, 0), slice("experts.bwd", 500, 2), slice("attention.fwd", 50, 2)});
  model.addSlices({});
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
  ASSERT_EQ(model.rowCount(), 4);
  EXPECT_EQ(model.referenceNs(), 2000);
  const int attention = 2;  // first-seen order: step, forward, attention.fwd, experts.bwd
  auto cell = [&](int row, int col, int role = PhaseSummaryModel::kSortRole) {
    return model.data(model.index(row, col), role);
  };
  EXPECT_EQ(cell(attention, PhaseSummaryModel::kName).toString(), "attention.fwd");
  EXPECT_EQ(cell(attention, PhaseSummaryModel::kCount).toLongLong(), 3);
  EXPECT_EQ(cell(attention, PhaseSummaryModel::kTotal).toLongLong(), 300);
  EXPECT_DOUBLE_EQ(cell(attention, PhaseSummaryModel::kMean).toDouble(), 100.0);
  EXPECT_DOUBLE_EQ(cell(attention, PhaseSummaryModel::kShare).toDouble(), 0.15);
  EXPECT_EQ(cell(attention, PhaseSummaryModel::kShare, Qt::DisplayRole).toString(), "15.0 %");
  EXPECT_DOUBLE_EQ(cell(0, PhaseSummaryModel::kShare).toDouble(), 1.0);
  EXPECT_EQ(cell(3, PhaseSummaryModel::kMean, Qt::DisplayRole).toString(), "500 ns");
  model.clear();
  EXPECT_EQ(model.rowCount(), 0);
}

}  // namespace
}  // namespace moewb::gui
