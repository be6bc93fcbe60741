// ConfigChangeModel: model-tester clean through reset, append and incremental syncs; values shown
// for people; the one-line description the markers use.
#include "moewb/gui/config_change_model.h"

#include <gtest/gtest.h>

#include <QSignalSpy>

#include "model_check.h"

namespace moewb::gui {
namespace {

storage::ConfigChangeRow change(int64_t step, const char* key, const char* oldValue,
                                const char* newValue, const char* source = "gui") {
  storage::ConfigChangeRow r;
  r.step = step;
  r.tsNs = 1'000'000 * step + 17;
  r.key = key;
  r.oldValue = oldValue;
  r.newValue = newValue;
  r.source = source;
  return r;
}

TEST(ConfigChangeModel, PassesModelTesterThroughResetAppendAndSync) {
  ConfigChangeModel model;
  testing::ModelCheck check(&model);
  model.setRows({change(3, "optim.lr", "0.0030000000000000001", "0.001")});
  model.appendRows({change(5, "data.skew", "1.0", "2.5", "tuner")});
  model.appendRows({});
  // A sync with the rows held plus new ones appends only the new ones.
  QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
  QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
  std::vector<storage::ConfigChangeRow> grown = model.rows();
  grown.push_back(change(9, "optim.warmup_steps", "10", "0"));
  grown.push_back(change(9, "optim.beta1", "0.90000000000000002", "0.80000000000000004"));
  EXPECT_EQ(model.syncRows(grown), 2);
  EXPECT_EQ(inserted.count(), 1);
  EXPECT_EQ(reset.count(), 0);
  EXPECT_EQ(model.rowCount(), 4);
  // The same rows again: nothing happens.
  EXPECT_EQ(model.syncRows(grown), 0);
  EXPECT_EQ(inserted.count(), 1);
  // Rows that do not extend the held ones (another file): reset.
  EXPECT_EQ(model.syncRows({change(1, "optim.eps", "1e-08", "1e-06")}), 1);
  EXPECT_EQ(reset.count(), 1);
  EXPECT_EQ(model.rowCount(), 1);
  EXPECT_EQ(model.syncRows({}), 0);
  EXPECT_EQ(model.rowCount(), 0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST(ConfigChangeModel, ShowsTheRowValues) {
  ConfigChangeModel model;
  model.setRows({change(3, "optim.lr", "0.0030000000000000001", "0.001"),
                 change(12, "optim.warmup_steps", "10", "0", "cli")});
  ASSERT_EQ(model.columnCount(), ConfigChangeModel::kColumnCount);
  auto cell = [&](int row, int col, int role = Qt::DisplayRole) {
    return model.data(model.index(row, col), role);
  };
  EXPECT_EQ(cell(0, ConfigChangeModel::kStep).toString(), "3");
  EXPECT_EQ(cell(0, ConfigChangeModel::kKey).toString(), "optim.lr");
  EXPECT_EQ(cell(0, ConfigChangeModel::kOldValue).toString(), "0.003");
  EXPECT_EQ(cell(0, ConfigChangeModel::kNewValue).toString(), "0.001");
  EXPECT_EQ(cell(0, ConfigChangeModel::kOldValue, ConfigChangeModel::kSortRole).toString(),
            "0.0030000000000000001");
  EXPECT_EQ(cell(1, ConfigChangeModel::kStep, ConfigChangeModel::kSortRole).toLongLong(), 12);
  EXPECT_EQ(cell(1, ConfigChangeModel::kSource).toString(), "cli");
  EXPECT_EQ(cell(1, ConfigChangeModel::kNewValue).toString(), "0");
  EXPECT_EQ(cell(0, ConfigChangeModel::kKey, Qt::ToolTipRole).toString(),
            "step 3: optim.lr 0.003 -> 0.001 (gui)");
  EXPECT_EQ(model.headerData(ConfigChangeModel::kOldValue, Qt::Horizontal).toString(), "Old");
}

TEST(ConfigChangeModel, FormatsValuesForPeople) {
  EXPECT_EQ(formatConfigValue("0.0030000000000000001"), "0.003");
  EXPECT_EQ(formatConfigValue("1.0000000000000001e-08"), "1e-08");
  EXPECT_EQ(formatConfigValue("2.0"), "2.0");
  EXPECT_EQ(formatConfigValue("0.94999999999999996"), "0.95");
  EXPECT_EQ(formatConfigValue("10"), "10");            // integers stay
  EXPECT_EQ(formatConfigValue("\"cpu\""), "\"cpu\"");  // strings stay
  EXPECT_EQ(formatConfigValue("nan"), "nan");
  EXPECT_EQ(formatConfigValue(""), "");
  EXPECT_EQ(describeConfigChange(change(7, "data.skew", "1.0", "2.5", "tuner")),
            "step 7: data.skew 1.0 -> 2.5 (tuner)");
}

}  // namespace
}  // namespace moewb::gui
