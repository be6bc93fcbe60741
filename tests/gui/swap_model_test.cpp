// The swap views' models on real SQLite traces written with TraceWriter (TestTrace::setSwap):
// lanes built from swap rows (count, order, late flags, folding), the per-layer table under
// QAbstractItemModelTester, the per-step series, the what-if conversion (stored free lag, ops and
// min_bytes used as stored; filters recovered from the decisions for plans without them) and
// that a lower HBM budget swaps more bytes, an offload compute waited for drawn as a late bar,
// and what a late copy selects (the first kernel on the compute stream after its needed time;
// the phase on a CPU trace); the what-if of a recompute run (its stored recompute ops and times:
// the run's own plan at its budget, recompute where it is cheaper than stalling copies at a
// lower one, recompute rows and costs in the decisions table).
#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QTemporaryDir>
#include <algorithm>

#include "model_check.h"
#include "moewb/gui/swap_lanes.h"
#include "moewb/gui/swap_model.h"
#include "moewb/gui/trace_document.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

using testing::TestTrace;

constexpr int kLayers = 4;
constexpr int kSteps = 3;

// Writes a trace of kSteps steps with swap rows (and GPU capture when `gpu`); returns its path.
QString writeSwapTrace(const QTemporaryDir& dir, const char* name, bool gpu, bool simulated,
                       bool swap = true) {
  const QString path = dir.filePath(QString::fromLatin1(name));
  auto trace = TestTrace::create(path.toStdString(), kLayers, 4);
  EXPECT_TRUE(trace.isOk()) << trace.status().toString();
  (*trace)->setSwap(swap, simulated);
  (*trace)->setGpuActivity(gpu);
  for (int64_t s = 0; s < kSteps; ++s) EXPECT_TRUE((*trace)->addStep(s).isOk());
  EXPECT_TRUE((*trace)->finish().isOk());
  return path;
}

TEST(SwapLanesTest, LanesFromSwapRows) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "swap.sqlite", false, false);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  ASSERT_TRUE(model.hasSwap());
  EXPECT_FALSE(model.simulated());
  ASSERT_EQ(model.laneRanks(), std::vector<int32_t>{0});
  // Step 1's window: every copy of the step, wide enough (1 px = 1 us) to keep each its own bar.
  const int64_t stepStart = TestTrace::kOriginNs + TestTrace::kStepNs;
  TimelineGeometry g{stepStart, stepStart + TestTrace::kStepNs, 2000.0};
  auto events = model.events({g.startNs, g.endNs});
  ASSERT_TRUE(events.isOk()) << events.status().toString();
  ASSERT_EQ(events->size(), size_t(2 * kLayers));
  const auto items = layoutSwapItems(model.laneRanks(), *events, g);
  ASSERT_EQ(items.size(), size_t(2 * kLayers));
  // D2H lane first (layers in forward order), then H2D (backward order: last layer first).
  for (int i = 0; i < kLayers; ++i) {
    const SwapDrawItem& d = items[size_t(i)];
    const auto& e = (*events)[size_t(d.event)];
    EXPECT_EQ(d.lane, 0);
    EXPECT_TRUE(e.toHost);
    EXPECT_EQ(e.layer, i);
    EXPECT_FALSE(d.late);
    EXPECT_EQ(swapItemLabel(e), "L" + std::to_string(i) + " expert_fc1");
  }
  for (int i = 0; i < kLayers; ++i) {
    const SwapDrawItem& d = items[size_t(kLayers + i)];
    const auto& e = (*events)[size_t(d.event)];
    EXPECT_EQ(d.lane, 1);
    EXPECT_FALSE(e.toHost);
    EXPECT_EQ(e.layer, kLayers - 1 - i);
    EXPECT_EQ(d.late, e.layer == TestTrace::kLateLayer);
    if (d.late) {
      // The stall span: needed -> end, 15 us = 15 px, at the bar's right end.
      EXPECT_NEAR(d.stallX1 - d.stallX0, 15.0, 0.01);
      EXPECT_DOUBLE_EQ(d.stallX1, d.x1);
      EXPECT_EQ(e.stallNs, TestTrace::kSwapStallNs);
    }
    if (i > 0) {
      EXPECT_GE(d.x0, items[size_t(kLayers + i - 1)].x0);
    }
  }
  // Hit test finds the late bar in the middle of its stall span.
  const SwapDrawItem* late = nullptr;
  for (const auto& d : items) late = d.late ? &d : late;
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(swapItemAt(items, 1, (late->stallX0 + late->stallX1) / 2), late);
  EXPECT_EQ(swapItemAt(items, 0, (late->stallX0 + late->stallX1) / 2), nullptr);
  EXPECT_EQ(swapLaneLabel(model.laneRanks(), 1, false), "swap H2D");
  EXPECT_EQ(swapLaneLabel(model.laneRanks(), 0, true), "swap D2H (simulated)");
  // Zoomed out to the whole run at 30 px, copies fold into a few bars per lane; the late flag
  // survives folding.
  const TimelineGeometry wide{TestTrace::kOriginNs,
                              TestTrace::kOriginNs + kSteps * TestTrace::kStepNs, 30.0};
  auto all = model.events({wide.startNs, wide.endNs});
  ASSERT_TRUE(all.isOk());
  ASSERT_EQ(all->size(), size_t(2 * kLayers * kSteps));
  const auto folded = layoutSwapItems(model.laneRanks(), *all, wide);
  EXPECT_LT(folded.size(), all->size());
  int copies = 0;
  bool anyLate = false;
  for (const auto& d : folded) {
    copies += d.count;
    anyLate = anyLate || d.late;
  }
  EXPECT_EQ(copies, int(all->size()));
  EXPECT_TRUE(anyLate);
}

TEST(SwapLanesTest, TooltipAndRate) {
  storage::SwapEventRow e;
  e.layer = 3;
  e.op = "expert_fc1";
  e.bytes = 537'000'000;
  e.toHost = false;
  e.startNs = 0;
  e.endNs = 9'763'636;  // 55 GB/s
  e.neededNs = 8'000'000;
  e.stallNs = 1'763'636;
  EXPECT_NEAR(swapCopyGbps(e.bytes, e.endNs - e.startNs), 55.0, 0.01);
  const auto lines = swapTooltipLines(e);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0], "layer 3 expert_fc1 · reload H2D");
  EXPECT_NE(lines[1].find("55.0 GB/s"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("late: compute waited"), std::string::npos) << lines[3];
  EXPECT_EQ(swapCopyGbps(10, 0), 0.0);
}

TEST(SwapModelTest, NoLanesWithoutSwapRows) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "plain.sqlite", false, false, false);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  EXPECT_FALSE(model.hasSwap());
  EXPECT_TRUE(model.laneRanks().empty());
  EXPECT_EQ(model.layerModel()->rowCount(), 0);
  EXPECT_FALSE(model.whatIf()->hasPlan());
}

TEST(SwapModelTest, LayerTableUnderModelTester) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "swap.sqlite", false, true);
  SwapModel model;
  testing::ModelCheck check(model.layerModel());
  ASSERT_TRUE(model.open(path).isOk());
  EXPECT_TRUE(model.simulated());
  SwapLayerModel* table = model.layerModel();
  ASSERT_EQ(table->rowCount(), kLayers);
  EXPECT_EQ(table->columnCount(), SwapLayerModel::kColumnCount);
  for (int row = 0; row < kLayers; ++row) {
    const auto& r = table->rows()[size_t(row)];
    EXPECT_EQ(r.layer, row);
    EXPECT_EQ(r.offloadedBytes, kSteps * (row + 1) * TestTrace::kMiB);
    EXPECT_EQ(r.lateReloads, row == TestTrace::kLateLayer ? kSteps : 0);
    const double offloadedGb = table->index(row, SwapLayerModel::kOffloadedGb)
                                   .data(SwapLayerModel::kSortRole).toDouble();
    EXPECT_NEAR(offloadedGb, double(r.offloadedBytes) / 1e9, 1e-12);
  }
  const QModelIndex worst = table->index(TestTrace::kLateLayer, SwapLayerModel::kWorstStallMs);
  EXPECT_NEAR(worst.data(SwapLayerModel::kSortRole).toDouble(), 0.015, 1e-9);
  EXPECT_EQ(worst.data().toString(), QString::number(0.015, 'f', 2));
  EXPECT_EQ(table->headerData(SwapLayerModel::kExposedMs, Qt::Horizontal).toString(),
            QStringLiteral("Exposed ms"));
  model.close();
  EXPECT_EQ(table->rowCount(), 0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST(SwapModelTest, StepSeries) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "swap.sqlite", false, false);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  ASSERT_EQ(model.steps().size(), size_t(kSteps));
  const SwapStepSeries s = swapStepSeries(model.steps());
  ASSERT_EQ(s.hbmPeakGb.size(), size_t(kSteps));
  EXPECT_DOUBLE_EQ(s.hbmPeakGb[2].x(), 2.0);
  EXPECT_NEAR(s.hbmPeakGb[2].y(), double(98 * TestTrace::kMiB) / 1e9, 1e-12);
  EXPECT_NEAR(s.hbmPeakNoSwapGb[0].y(), double(120 * TestTrace::kMiB) / 1e9, 1e-12);
  EXPECT_NEAR(s.pinnedCapacityGb[1].y(), double(64 * TestTrace::kMiB) / 1e9, 1e-12);
  // Moved: 2 x (1+2+3+4) MiB over 8 copies of 20 us.
  const double moved = 2.0 * 10 * double(TestTrace::kMiB);
  ASSERT_EQ(s.copyGbps.size(), size_t(kSteps));
  EXPECT_NEAR(s.copyGbps[0].y(), moved / (8 * 20'000.0), 1e-9);
}

TEST(SwapWhatIfTest, ConversionRecoversTheRunsInputs) {
  const storage::SwapPlanRow plan = TestTrace::swapPlanRow(kLayers);
  auto in = swapWhatIfInput(plan);
  ASSERT_TRUE(in.isOk()) << in.status().toString();
  EXPECT_EQ(in->settings.mode, engine::SwapMode::kAuto);
  EXPECT_EQ(in->settings.hbmTargetBytes, 2'500'000'000);
  EXPECT_EQ(in->settings.pinnedBudgetBytes, 10'000'000'000);
  EXPECT_EQ(in->settings.prefetchLayers, 1);
  // A plan without stored lag, ops and min_bytes (1, "", 0): lag 1, filters from the decisions.
  EXPECT_EQ(in->settings.freeLagLayers, 1);
  EXPECT_DOUBLE_EQ(in->settings.h2dBytesPerMs, 55e6);
  EXPECT_DOUBLE_EQ(in->settings.bidirBytesPerMs, 36e6);
  EXPECT_EQ(in->settings.minBytes, 1001);
  EXPECT_EQ(std::count(in->settings.ops.begin(), in->settings.ops.end(), "attn_norm"), 0);
  EXPECT_EQ(in->settings.ops.size(), engine::swapOpNames().size() - 1);
  ASSERT_EQ(in->profile.tensors.size(), size_t(7 * kLayers));
  EXPECT_EQ(in->profile.tensors[4].op, "expert_fc1");
  EXPECT_EQ(in->profile.tensors[4].bytes, 50'000'000);
  EXPECT_EQ(in->profile.layerBackwardMs, std::vector<double>(kLayers, 20.0));
  EXPECT_EQ(in->profile.fixedBytes, 1'000'000'000);
  // The planner keeps the refused tensors for the same reasons the run gave.
  auto p = engine::planSwap(in->settings, in->profile);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->decisions[0].reason, "op not in swap.ops");
  EXPECT_EQ(p->decisions[2].reason, "below swap.min_bytes");

  storage::SwapPlanRow bad = plan;
  bad.layerOtherBytes.pop_back();
  EXPECT_EQ(swapWhatIfInput(bad).status().code(), StatusCode::kInvalidArgument);
  bad = plan;
  bad.mode = "sometimes";
  EXPECT_EQ(swapWhatIfInput(bad).status().code(), StatusCode::kInvalidArgument);
  bad = plan;
  bad.tensors[0].layer = kLayers;
  EXPECT_EQ(swapWhatIfInput(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(SwapWhatIfTest, UsesTheStoredFreeLagOpsAndMinBytes) {
  storage::SwapPlanRow plan = TestTrace::swapPlanRow(kLayers);
  plan.freeLagLayers = 2;
  plan.ops = "mixer_input, moe_act,expert_fc2";
  plan.minBytes = 60'000'000;  // above every candidate's 50 MB: nothing passes
  auto in = swapWhatIfInput(plan);
  ASSERT_TRUE(in.isOk()) << in.status().toString();
  EXPECT_EQ(in->settings.freeLagLayers, 2);
  EXPECT_EQ(in->settings.minBytes, 60'000'000);
  EXPECT_EQ(in->settings.ops,
            (std::vector<std::string>{"mixer_input", "moe_act", "expert_fc2"}));
  // The planner filters with them, not with what the decisions would suggest.
  auto p = engine::planSwap(in->settings, in->profile);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->decisions[4].reason, "op not in swap.ops");  // expert_fc1
  EXPECT_EQ(p->decisions[5].reason, "below swap.min_bytes");  // moe_act: allowed, too small
  // "" = every op; a name that is no swap op is refused in plain words.
  plan.ops = "";
  plan.minBytes = 1;
  in = swapWhatIfInput(plan);
  ASSERT_TRUE(in.isOk()) << in.status().toString();
  EXPECT_EQ(in->settings.ops, engine::swapOpNames());
  EXPECT_EQ(in->settings.minBytes, 1);
  plan.ops = "moe_act,fc9";
  EXPECT_EQ(swapWhatIfInput(plan).status().code(), StatusCode::kInvalidArgument);
  plan.ops = "";
  plan.freeLagLayers = -1;
  EXPECT_EQ(swapWhatIfInput(plan).status().code(), StatusCode::kInvalidArgument);

  // The what-if starts at the stored lag and passes it (and a new one) to the planner: a larger
  // lag keeps the offloaded memory until later, so the peak under a tight budget cannot drop.
  plan = TestTrace::swapPlanRow(kLayers);
  plan.freeLagLayers = 0;
  plan.minBytes = 1001;
  plan.ops = "mixer_input,moe_norm,moe_input,expert_fc1,moe_act,expert_fc2";
  SwapWhatIf whatIf;
  ASSERT_TRUE(whatIf.setPlan(plan).isOk());
  EXPECT_EQ(whatIf.freeLagLayers(), 0);
  ASSERT_TRUE(whatIf.setBudget(1'500'000'000, 1).isOk());
  const engine::SwapPrediction lag0 = whatIf.prediction();
  EXPECT_EQ(whatIf.freeLagLayers(), 0);  // nullopt keeps the current lag
  ASSERT_TRUE(whatIf.setBudget(1'500'000'000, 1, 3).isOk());
  EXPECT_EQ(whatIf.freeLagLayers(), 3);
  const engine::SwapPrediction lag3 = whatIf.prediction();
  EXPECT_GT(lag3.peakBytes, lag0.peakBytes);
  EXPECT_FALSE(whatIf.setBudget(1'500'000'000, 1, -1).isOk());
}

TEST(SwapWhatIfTest, LowerBudgetSwapsMoreBytes) {
  SwapWhatIf whatIf;
  testing::ModelCheck check(whatIf.decisionModel());
  QSignalSpy changed(&whatIf, &SwapWhatIf::changed);
  ASSERT_TRUE(whatIf.setPlan(TestTrace::swapPlanRow(kLayers)).isOk());
  EXPECT_EQ(whatIf.hbmTargetBytes(), 2'500'000'000);
  const engine::SwapPrediction atPlan = whatIf.prediction();
  // 1 GB fixed + 4 x (100 MB other + 6 x 50 MB + 1000 B) at most saved at once.
  EXPECT_GT(atPlan.peakNoSwapBytes, 2'500'000'000);
  ASSERT_TRUE(whatIf.setBudget(2'000'000'000, 1).isOk());
  const engine::SwapPrediction lower = whatIf.prediction();
  EXPECT_GT(lower.swappedBytes, atPlan.swappedBytes);
  EXPECT_LT(lower.peakBytes, atPlan.peakBytes);
  EXPECT_GE(whatIf.lastPlanMs(), 0.0);
  EXPECT_EQ(changed.count(), 2);
  // A budget above the peak without swap: declined, nothing swapped.
  ASSERT_TRUE(whatIf.setBudget(10'000'000'000, 2).isOk());
  EXPECT_TRUE(whatIf.prediction().declined);
  EXPECT_EQ(whatIf.prediction().swappedBytes, 0);
  EXPECT_EQ(whatIf.prefetchLayers(), 2);
  // The decisions table follows: one row per tensor, swap/keep and the reason.
  SwapDecisionModel* table = whatIf.decisionModel();
  ASSERT_TRUE(whatIf.setBudget(2'000'000'000, 1).isOk());
  ASSERT_EQ(table->rowCount(), 7 * kLayers);
  int64_t swappedBytes = 0;
  for (int row = 0; row < table->rowCount(); ++row) {
    if (table->index(row, SwapDecisionModel::kAction).data().toString() == QStringLiteral("swap")) {
      swappedBytes += int64_t(std::llround(
          table->index(row, SwapDecisionModel::kMb).data(SwapDecisionModel::kSortRole).toDouble() *
          1e6));
    }
  }
  EXPECT_EQ(swappedBytes, whatIf.prediction().swappedBytes);
  EXPECT_EQ(table->index(0, SwapDecisionModel::kReason).data().toString(),
            QStringLiteral("op not in swap.ops"));
  EXPECT_FALSE(whatIf.setBudget(0, 1).isOk());
  EXPECT_FALSE(whatIf.setBudget(1, -1).isOk());
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST(SwapModelTest, WhatIfTakesTheLastPlan) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "swap.sqlite", false, false);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  ASSERT_EQ(model.plans().size(), 1u);
  ASSERT_TRUE(model.whatIf()->hasPlan());
  EXPECT_EQ(model.whatIf()->input().profile.tensors.size(), size_t(7 * kLayers));
}

// The late reload of layer kLateLayer in step 1 of a trace.
storage::SwapEventRow lateReload(SwapModel& model) {
  const int64_t start = TestTrace::kOriginNs + TestTrace::kStepNs;
  auto events = model.events({start, start + TestTrace::kStepNs});
  EXPECT_TRUE(events.isOk());
  for (const auto& e : *events) {
    if (!e.toHost && e.stallNs > 0) return e;
  }
  ADD_FAILURE() << "no late reload";
  return {};
}

TEST(SwapModelTest, LateReloadSelectsTheKernelThatWaited) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "gpu.sqlite", true, false);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  const storage::SwapEventRow e = lateReload(model);
  ASSERT_EQ(e.layer, TestTrace::kLateLayer);
  auto w = model.waiterOf(e);
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  ASSERT_EQ(w->kind, SwapWaiter::kKernel);
  // Needed at +1200 us (layer 1's backward with 4 layers: +600 us + 2 x 300 us), after the last
  // grouped GEMM started (+1010 us); the first kernel from then on is the elementwise one at
  // +1600 us on stream 7, the stream with the most kernels after it (stream 13 runs none).
  EXPECT_GE(w->startNs, e.neededNs);
  EXPECT_EQ(w->step, 1);
  EXPECT_EQ(w->name, "elementwise(float*)");
  EXPECT_EQ(w->startNs, TestTrace::kOriginNs + TestTrace::kStepNs + 1'600'000);
}

TEST(SwapModelTest, LateReloadSelectsThePhaseOnACpuTrace) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "cpu.sqlite", false, true);
  SwapModel model;
  ASSERT_TRUE(model.open(path).isOk());
  const storage::SwapEventRow e = lateReload(model);
  auto w = model.waiterOf(e);
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  ASSERT_EQ(w->kind, SwapWaiter::kPhase);
  EXPECT_EQ(w->name, "combine.bwd");  // the first phase of layer 1's backward
  EXPECT_EQ(w->startNs, e.neededNs);
  EXPECT_EQ(w->step, 1);
  // An offload compute did not wait for made nothing wait.
  storage::SwapEventRow offload = e;
  offload.toHost = true;
  offload.stallNs = 0;
  auto none = model.waiterOf(offload);
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ(none->kind, SwapWaiter::kNone);
  // One compute waited for (at its free-lag point, neededNs) selects what waited, as a reload.
  offload.stallNs = 50'000;
  auto waited = model.waiterOf(offload);
  ASSERT_TRUE(waited.isOk()) << waited.status().toString();
  ASSERT_EQ(waited->kind, SwapWaiter::kPhase);
  EXPECT_EQ(waited->name, "combine.bwd");
  EXPECT_EQ(waited->startNs, offload.neededNs);
}

TEST(SwapLanesTest, OffloadWithAWaitIsALateBar) {
  // Two offloads on a 1 px = 1 us plot: one on time, one compute waited 30 us for, from when it
  // reached the wait (+70 us) to +100 us, the copy's end.
  storage::SwapEventRow onTime;
  onTime.layer = 0;
  onTime.op = "moe_act";
  onTime.bytes = 4 << 20;
  onTime.startNs = 0;
  onTime.endNs = 40'000;
  storage::SwapEventRow waited = onTime;
  waited.layer = 1;
  waited.startNs = 50'000;
  waited.endNs = 100'000;
  waited.neededNs = 70'000;
  waited.stallNs = 30'000;
  const TimelineGeometry g{0, 200'000, 200.0};
  const auto items = layoutSwapItems({0}, {onTime, waited}, g);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_FALSE(items[0].late);
  const SwapDrawItem& late = items[1];
  EXPECT_EQ(late.lane, 0);  // the D2H lane
  EXPECT_TRUE(late.late);
  EXPECT_NEAR(late.stallX0, 70.0, 1e-9);
  EXPECT_NEAR(late.stallX1, 100.0, 1e-9);
  EXPECT_TRUE(swapCopyLate(waited));
  EXPECT_FALSE(swapCopyLate(onTime));
  // A wait that outlasts the copy (memory freed behind the wait) is clipped to the bar.
  waited.stallNs = 90'000;
  const auto clipped = layoutSwapItems({0}, {waited}, g);
  ASSERT_EQ(clipped.size(), 1u);
  EXPECT_NEAR(clipped[0].stallX1, clipped[0].x1, 1e-9);
  // The tooltip says why compute waited; an offload on time says nothing of a wait.
  const auto lines = swapTooltipLines(waited);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_NE(lines[3].find("compute waited"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("for this copy to free its memory"), std::string::npos) << lines[3];
  for (const std::string& line : swapTooltipLines(onTime)) {
    EXPECT_EQ(line.find("waited"), std::string::npos) << line;
  }
}

TEST(SwapModelTest, FollowsTheDocument) {
  QTemporaryDir dir;
  const QString path = writeSwapTrace(dir, "swap.sqlite", false, false);
  TraceDocument document;
  SwapModel model;
  model.setDocument(&document);
  QSignalSpy changed(&model, &SwapModel::changed);
  ASSERT_TRUE(document.open(path).isOk());
  EXPECT_TRUE(model.hasSwap());
  EXPECT_GE(changed.count(), 1);
  document.close();
  EXPECT_FALSE(model.hasSwap());
}

// The total cost of `prediction`: what it adds to the step (exposed copies and recompute).
double addedMs(const engine::SwapPrediction& prediction) {
  return prediction.exposedMs + prediction.recomputeMs;
}

// Re-planning a recompute run's stored plan (engine policy -> plan event -> HostTracer -> trace
// -> reader -> what-if) at the run's own budget gives the run's own plan: every decision and
// reason, the peak, the exposed and the recompute time.
// A trace of testing::recomputeRun() opened in a SwapModel.
class SwapWhatIfRecompute : public ::testing::Test {
 protected:
  void SetUp() override {
    const QString path = m_dir.filePath(QStringLiteral("recompute.sqlite"));
    auto run = testing::writeRecomputeTrace(path.toStdString());
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    m_run = std::move(run).value();
    ASSERT_TRUE(m_model.open(path).isOk());
    ASSERT_EQ(m_model.plans().size(), 1u);
  }
  QTemporaryDir m_dir;
  testing::RecomputeRun m_run;
  SwapModel m_model;
};

TEST_F(SwapWhatIfRecompute, ReplanAtTheRunsBudgetGivesTheRunsPlan) {
  const engine::SwapPrediction& stored = m_run.plan;
  ASSERT_GT(stored.recomputedBytes, 0) << stored.summary;  // a run that recomputes
  const storage::SwapPlanRow& row = m_model.plans().front();
  EXPECT_EQ(row.recomputeOps, "moe_act,expert_fc2");
  EXPECT_EQ(row.recomputeMsSource, "measured");
  EXPECT_EQ(row.layerRecomputeMs, m_run.profile.layerRecomputeMs);
  SwapWhatIf* whatIf = m_model.whatIf();
  ASSERT_TRUE(whatIf->hasPlan());
  EXPECT_EQ(whatIf->input().settings.recomputeOps, engine::swapRecomputeOpNames());
  EXPECT_EQ(whatIf->input().note, "");
  EXPECT_EQ(whatIf->hbmTargetBytes(), m_run.settings.hbmTargetBytes);
  const engine::SwapPrediction& replanned = whatIf->prediction();
  ASSERT_EQ(replanned.decisions.size(), stored.decisions.size());
  for (size_t i = 0; i < stored.decisions.size(); ++i) {
    EXPECT_EQ(replanned.decisions[i].action, stored.decisions[i].action) << i;
    EXPECT_EQ(replanned.decisions[i].reason, stored.decisions[i].reason) << i;
  }
  EXPECT_EQ(replanned.peakBytes, row.predictedPeakBytes);
  EXPECT_EQ(replanned.peakNoSwapBytes, row.predictedPeakNoSwapBytes);
  EXPECT_DOUBLE_EQ(replanned.exposedMs, row.predictedExposedMs);
  EXPECT_DOUBLE_EQ(replanned.recomputeMs, stored.recomputeMs);
  EXPECT_EQ(replanned.summary, row.summary);
}

// At a lower budget the what-if recomputes where recompute costs less than the exposed copy
// time a swap would add: against the same plan re-planned without recompute (a file from before
// the recompute times were stored, which the what-if says), it frees the same target with far
// less added time. The decisions table shows the recompute rows with their cost, and the costs
// add up to the exposed plus recompute time.
TEST_F(SwapWhatIfRecompute, LowerBudgetRecomputesWhereCopiesWouldStall) {
  SwapWhatIf* withRecompute = m_model.whatIf();
  const engine::SwapPrediction atRun = withRecompute->prediction();
  storage::SwapPlanRow old = m_model.plans().front();
  old.layerRecomputeMs.clear();  // as the reader gives a file from before them
  old.recomputeMsSource.clear();
  old.recomputeOps.clear();
  SwapWhatIf withoutRecompute;
  ASSERT_TRUE(withoutRecompute.setPlan(old).isOk());
  EXPECT_NE(withoutRecompute.input().note.find("recompute"), std::string::npos);
  EXPECT_TRUE(withoutRecompute.input().settings.recomputeOps.empty());

  const int64_t lower = atRun.peakNoSwapBytes - 3 * testing::kRecomputeRunFreeBytes;
  ASSERT_TRUE(withRecompute->setBudget(lower, 1).isOk());
  ASSERT_TRUE(withoutRecompute.setBudget(lower, 1).isOk());
  const engine::SwapPrediction& recompute = withRecompute->prediction();
  const engine::SwapPrediction& swapOnly = withoutRecompute.prediction();
  EXPECT_LE(recompute.peakBytes, lower) << recompute.summary;
  EXPECT_GT(recompute.recomputedBytes, atRun.recomputedBytes) << recompute.summary;
  EXPECT_EQ(swapOnly.recomputedBytes, 0);
  EXPECT_EQ(swapOnly.recomputeMs, 0.0);
  // Each layer's recompute costs 1 ms; a 50 MB copy over the 1 GB/s link stalls for tens.
  EXPECT_LT(addedMs(recompute), addedMs(swapOnly)) << recompute.summary << "\n"
                                                   << swapOnly.summary;
  EXPECT_GT(recompute.recomputeMs, 0.0);

  SwapDecisionModel* table = withRecompute->decisionModel();
  ASSERT_EQ(table->rowCount(), int(m_run.profile.tensors.size()));
  EXPECT_EQ(table->headerData(SwapDecisionModel::kCostMs, Qt::Horizontal).toString(),
            QStringLiteral("Cost ms"));
  double costMs = 0;
  int recomputeRows = 0;
  for (int r = 0; r < table->rowCount(); ++r) {
    const QString action = table->index(r, SwapDecisionModel::kAction).data().toString();
    const QModelIndex cost = table->index(r, SwapDecisionModel::kCostMs);
    costMs += cost.data(SwapDecisionModel::kSortRole).toDouble();
    if (action == QStringLiteral("keep")) {
      EXPECT_TRUE(cost.data().toString().isEmpty()) << r;
    }
    if (action != QStringLiteral("recompute")) continue;
    ++recomputeRows;
    EXPECT_FALSE(cost.data(Qt::ToolTipRole).toString().isEmpty()) << r;
  }
  EXPECT_EQ(recomputeRows, int(std::count_if(
                               recompute.decisions.begin(), recompute.decisions.end(),
                               [](const engine::SwapDecision& d) {
                                 return d.action == engine::SwapAction::kRecompute;
                               })));
  EXPECT_NEAR(costMs, addedMs(recompute), 1e-9);
}

// A stored recompute_ops or recompute times the what-if cannot use are refused in plain words.
TEST(SwapWhatIfRecomputeInput, BadRecomputeFieldsAreRefused) {
  storage::SwapPlanRow plan = TestTrace::swapPlanRow(kLayers);
  plan.recomputeOps = "moe_act, expert_fc2";
  plan.layerRecomputeMs.assign(size_t(kLayers), 2.0);
  plan.recomputeMsSource = "estimate";
  auto in = swapWhatIfInput(plan);
  ASSERT_TRUE(in.isOk()) << in.status().toString();
  EXPECT_EQ(in->settings.recomputeOps, (std::vector<std::string>{"moe_act", "expert_fc2"}));
  EXPECT_EQ(in->profile.layerRecomputeMs, std::vector<double>(size_t(kLayers), 2.0));
  EXPECT_EQ(in->recomputeMsSource, "estimate");
  storage::SwapPlanRow bad = plan;
  bad.recomputeOps = "moe_norm";  // can be swapped, not recomputed
  auto refused = swapWhatIfInput(bad);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("recompute_ops names 'moe_norm'"), std::string::npos)
      << refused.status().message();
  bad = plan;
  bad.layerRecomputeMs.pop_back();
  EXPECT_EQ(swapWhatIfInput(bad).status().code(), StatusCode::kInvalidArgument);
  bad = plan;
  bad.layerRecomputeMs[1] = -1.0;
  EXPECT_EQ(swapWhatIfInput(bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::gui
