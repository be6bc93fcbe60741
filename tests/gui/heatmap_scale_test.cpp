// Fixed colour scale of the Expert load dock (issue 18): on a known grid (layer 0 = {10, 20, 90}
// tokens: 0.25x, 0.5x, 2.25x the layer mean; layer 1 balanced) the heat map's auto scale tops at
// 2.5x; choosing "scale 2x" repaints a known cell in heatColor(load / 2) and the legend says
// "fixed scale"; a cell above 2x draws in the top colour and its hover text says "above scale";
// "auto scale" brings the data's maximum back. The "Over time" strip follows the same chooser.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QImage>

#include "expert_strip_view.h"
#include "expert_time_panel.h"
#include "heatmap_panel.h"
#include "heatmap_view.h"
#include "moewb/gui/expert_load_model.h"
#include "moewb/gui/palette.h"
#include "theme.h"

namespace moewb::gui {
namespace {

std::vector<storage::ExpertLoadRow> knownRows() {
  const std::vector<std::vector<int64_t>> steps[] = {{{10, 20, 90}, {30, 30, 30}},
                                                     {{20, 20, 20}, {30, 30, 30}}};
  std::vector<storage::ExpertLoadRow> rows;
  for (int64_t step = 0; step < 2; ++step) {
    for (size_t l = 0; l < 2; ++l) {
      for (size_t e = 0; e < 3; ++e) {
        storage::ExpertLoadRow r;
        r.step = step;
        r.layer = int32_t(l);
        r.expert = int32_t(e);
        r.tokens = steps[step][l][e];
        rows.push_back(r);
      }
    }
  }
  return rows;
}

// The colour painted in the heat map cell (layer, expert), away from its printed value.
QRgb heatmapCellRgb(HeatmapView* view, int layer, int expert) {
  const QPoint c = view->cellCenter(layer, expert);
  const QPoint down = view->cellCenter(layer + 1, expert) - c;
  const QPoint right = view->cellCenter(layer, expert + 1) - c;
  const QPoint corner = c - QPoint(right.x() / 2 - 4, down.y() / 2 - 4);
  return view->grab().toImage().pixel(corner);
}

// The colour painted in the strip cell (column, expert), beside the marked step's dashed line.
QRgb stripCellRgb(ExpertStripView* strip, int column, int expert) {
  return strip->grab().toImage().pixel(strip->cellCenter(column, expert) + QPoint(6, 0));
}

class HeatmapScale : public ::testing::Test {
 protected:
  void SetUp() override {
    theme::apply(*qApp);
    model.setRows(knownRows());
    model.setStep(0);
    panel.setModel(&model);
    panel.resize(900, 500);
    panel.show();
    QApplication::processEvents();
  }
  ExpertLoadModel model;
  HeatmapPanel panel;
};

TEST_F(HeatmapScale, FixedScaleRecoloursACellAndTheLegendAndAutoRestores) {
  HeatmapView* view = panel.view();
  ASSERT_NEAR(model.normalizedLoad(0, 1), 0.5, 1e-9);
  ASSERT_NEAR(model.normalizedLoad(0, 2), 2.25, 1e-9);
  // Auto: the data's maximum rounded up to a half.
  EXPECT_DOUBLE_EQ(view->colorScaleMax(), 2.5);
  EXPECT_EQ(view->scaleTitle(QStringLiteral("x layer mean")), QStringLiteral("x layer mean"));
  const QRgb autoColour = heatmapCellRgb(view, 0, 1);
  EXPECT_EQ(autoColour, heatColor(0.5 / 2.5).rgb());
  EXPECT_FALSE(view->cellText(0, 2).contains(QStringLiteral("above scale")));

  // The chooser's "scale 2x".
  QComboBox* chooser = panel.scaleChooser();
  const int twoX = chooser->findData(2.0);
  ASSERT_GE(twoX, 0);
  chooser->setCurrentIndex(twoX);
  QApplication::processEvents();
  EXPECT_DOUBLE_EQ(panel.fixedScale(), 2.0);
  EXPECT_DOUBLE_EQ(view->colorScaleMax(), 2.0);
  EXPECT_EQ(view->scaleTitle(QStringLiteral("x layer mean")), QStringLiteral("fixed scale"));
  const QRgb fixedColour = heatmapCellRgb(view, 0, 1);
  EXPECT_EQ(fixedColour, heatColor(0.5 / 2.0).rgb());
  EXPECT_NE(fixedColour, autoColour);
  // 2.25x is above the 2x scale: the top colour, and marked in the hover text.
  EXPECT_EQ(heatmapCellRgb(view, 0, 2), heatColor(1.0).rgb());
  EXPECT_TRUE(view->cellText(0, 2).contains(QStringLiteral("above scale")));
  EXPECT_FALSE(view->cellText(0, 1).contains(QStringLiteral("above scale")));

  // A larger fixed maximum than the data's makes the same cell darker still.
  panel.setFixedScale(8.0);
  QApplication::processEvents();
  EXPECT_EQ(heatmapCellRgb(view, 0, 1), heatColor(0.5 / 8.0).rgb());
  EXPECT_FALSE(view->cellText(0, 2).contains(QStringLiteral("above scale")));

  // Auto brings the old behaviour back.
  chooser->setCurrentIndex(chooser->findData(0.0));
  QApplication::processEvents();
  EXPECT_DOUBLE_EQ(panel.fixedScale(), 0.0);
  EXPECT_DOUBLE_EQ(view->colorScaleMax(), 2.5);
  EXPECT_EQ(heatmapCellRgb(view, 0, 1), autoColour);
  EXPECT_EQ(view->scaleTitle(QStringLiteral("x layer mean")), QStringLiteral("x layer mean"));
}

TEST_F(HeatmapScale, TheOverTimeStripFollowsTheChooser) {
  panel.modeChooser()->setCurrentIndex(HeatmapPanel::kOverTimeIndex);
  panel.timePanel()->setLayer(0);
  QApplication::processEvents();
  ExpertStripView* strip = panel.timePanel()->strip();
  ASSERT_EQ(strip->columns().size(), 2u);
  EXPECT_DOUBLE_EQ(strip->colorScaleMax(), 2.5);
  const QRgb autoColour = stripCellRgb(strip, 0, 1);
  EXPECT_EQ(autoColour, heatColor(0.5 / 2.5).rgb());

  panel.setFixedScale(2.0);
  QApplication::processEvents();
  EXPECT_DOUBLE_EQ(strip->colorScaleMax(), 2.0);
  EXPECT_EQ(stripCellRgb(strip, 0, 1), heatColor(0.5 / 2.0).rgb());
  EXPECT_EQ(stripCellRgb(strip, 0, 2), heatColor(1.0).rgb());
  EXPECT_TRUE(strip->cellText(2, 0).contains(QStringLiteral("above scale")));
  EXPECT_FALSE(strip->cellText(2, 1).contains(QStringLiteral("above scale")));  // 1.0x at step 1

  panel.setFixedScale(0);
  QApplication::processEvents();
  EXPECT_DOUBLE_EQ(strip->colorScaleMax(), 2.5);
  EXPECT_EQ(stripCellRgb(strip, 0, 1), autoColour);
}

}  // namespace
}  // namespace moewb::gui
