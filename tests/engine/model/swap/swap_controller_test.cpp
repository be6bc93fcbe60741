// Tests of the per-rank swap controller, the candidates of a model, the layer times of a step and
// the CPU backend's simulated tier (engine/model/swap/).
#include "model/swap/swap_controller.h"

#include <gtest/gtest.h>

#include "model/swap/swap_sim_tier.h"

namespace moewb::engine {
namespace {

// N = 8 tokens, D = 8, k = 2 of 4 experts, F = 16, two layers.
ModelDims smallDims() {
  ModelDims d;
  d.vocabSize = 32;
  d.dModel = 8;
  d.numLayers = 2;
  d.numHeads = 2;
  d.seqLen = 4;
  d.batchSize = 2;
  d.numExperts = 4;
  d.topK = 2;
  d.dFf = 16;
  return d;
}

SwapSettings autoSettings(int64_t targetBytes) {
  SwapSettings s;
  s.mode = SwapMode::kAuto;
  s.ops = swapOpNames();
  s.minBytes = 0;
  s.hbmTargetBytes = targetBytes;
  s.pinnedBudgetBytes = 1 << 30;
  // With two layers and prefetch 1, layer 0 would come back while layer 1 is whole: no saving.
  s.prefetchLayers = 0;
  return s;
}

TEST(SwapController, ProfileHasEveryOpPerLayerWithTheDeviceBytes) {
  const SwapProfile p = swapProfileFor(smallDims());
  ASSERT_EQ(p.tensors.size(), 14u);
  EXPECT_EQ(p.tensors[0].op, "attn_norm");
  EXPECT_EQ(p.tensors[0].bytes, 8 * 8 * 2);          // [N, D] bf16
  EXPECT_EQ(p.tensors[4].op, "expert_fc1");
  EXPECT_EQ(p.tensors[4].bytes, 16 * 8 * 2);         // [N k, D] bf16
  EXPECT_EQ(p.tensors[5].op, "moe_act");
  EXPECT_EQ(p.tensors[5].bytes, 2 * 16 * 16 * 2);    // [N k, F] bf16 x 2
  EXPECT_EQ(p.tensors[6].bytes, 16 * 16 * 2);        // expert_fc2 [N k, F]
  EXPECT_EQ(p.tensors[7].layer, 1);
  ASSERT_EQ(p.layerOtherBytes.size(), 2u);
  EXPECT_GT(p.layerOtherBytes[0], 0);

  ModelDims fused = smallDims();
  fused.moe.permuteIntoExperts = true;
  const SwapProfile f = swapProfileFor(fused);
  EXPECT_EQ(f.tensors.size(), 12u);
  for (const auto& t : f.tensors) EXPECT_NE(t.op, "expert_fc1");
  EXPECT_STREQ(swapOpName(SwapOp::kExpertFc2), "expert_fc2");
}

TEST(SwapController, AutoMeasuresFirstThenPlansAndAnswersSwaps) {
  const SwapProfile sizes = swapProfileFor(smallDims());
  int64_t total = 0;
  for (const auto& t : sizes.tensors) total += t.bytes;
  for (int64_t b : sizes.layerOtherBytes) total += b;
  SwapController c(autoSettings(total / 2), sizes, 3);
  EXPECT_FALSE(c.beginStep(0, 0).has_value());  // measuring
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t op = 0; op < int32_t(SwapOp::kCount); ++op) EXPECT_FALSE(c.swaps(l, SwapOp(op)));
  }
  c.recordStepTimes({10, 10}, {20, 20}, 2);
  auto plan = c.beginStep(1, 0);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 1);
  EXPECT_EQ(plan->rank, 3);
  EXPECT_EQ(plan->mode, "auto");
  ASSERT_EQ(plan->tensorSwapped.size(), sizes.tensors.size());
  EXPECT_EQ(plan->layerForwardMs, (std::vector<double>{10, 10}));
  EXPECT_LT(plan->predictedPeakBytes, plan->predictedPeakNoSwapBytes);
  int swapped = 0;
  for (size_t i = 0; i < sizes.tensors.size(); ++i) {
    const SwapOp op = SwapOp(i % size_t(SwapOp::kCount));
    EXPECT_EQ(c.swaps(sizes.tensors[i].layer, op), bool(plan->tensorSwapped[i])) << i;
    EXPECT_FALSE(plan->tensorReason[i].empty());
    swapped += plan->tensorSwapped[i];
  }
  EXPECT_GT(swapped, 0);
  EXPECT_NE(plan->summary.find("auto: swap"), std::string::npos) << plan->summary;

  // The plan stands while nothing changes, and while the times move without changing what the
  // plan is worth (these copies take microseconds: they hide under any of these times).
  c.recordStepTimes({11, 10}, {20, 21}, 2);
  EXPECT_FALSE(c.beginStep(2, 0).has_value());
  c.recordStepTimes({15, 10}, {20, 20}, 2);
  EXPECT_FALSE(c.beginStep(3, 0).has_value());
  EXPECT_FALSE(c.beginStep(4, 0).has_value());
  // A live change: plan again at the next step; a target above the peak declines.
  c.setSettings(autoSettings(total * 10));
  auto declined = c.beginStep(5, 0);
  ASSERT_TRUE(declined.has_value());
  for (bool s : declined->tensorSwapped) EXPECT_FALSE(s);
  EXPECT_FALSE(c.swaps(0, SwapOp::kMoeAct));
  // Off: one "off" plan, then nothing.
  SwapSettings off = autoSettings(total / 2);
  off.mode = SwapMode::kOff;
  c.setSettings(off);
  auto offPlan = c.beginStep(6, 0);
  ASSERT_TRUE(offPlan.has_value());
  EXPECT_EQ(offPlan->mode, "off");
  EXPECT_FALSE(c.beginStep(7, 0).has_value());
}

// Four layers of one 1e6 B moe_act, no other bytes; 1e6 B/ms both ways (1 ms copies); target
// 3e6 of a 4e6 no-swap peak: one tensor goes.
SwapProfile fourLayerSizes() {
  SwapProfile p;
  for (int32_t l = 0; l < 4; ++l) p.tensors.push_back({l, "moe_act", 1'000'000});
  p.layerForwardMs.assign(4, 0.0);
  p.layerBackwardMs.assign(4, 0.0);
  p.layerOtherBytes.assign(4, 0);
  return p;
}

SwapSettings fourLayerSettings() {
  SwapSettings s = autoSettings(3'000'000);
  s.prefetchLayers = 1;
  s.d2hBytesPerMs = 1e6;
  s.h2dBytesPerMs = 1e6;
  return s;
}

TEST(SwapController, JitteringTimesDoNotReplanButAStallOrTheTargetDoes) {
  SwapController c(fourLayerSettings(), fourLayerSizes(), 0);
  EXPECT_FALSE(c.beginStep(0, 0).has_value());
  c.recordStepTimes({10, 10, 10, 10}, {10, 10, 10, 10}, 1);
  auto first = c.beginStep(1, 0);
  ASSERT_TRUE(first.has_value());
  // Layer 0's tensor: offload 10..11, free point at layer 1's end (20): hidden.
  EXPECT_EQ(first->tensorSwapped, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(first->predictedExposedMs, 0);
  // A busy CPU: every layer's time moves by up to 40% each step, the copies still hide: the plan
  // stands (the old rule, "a layer moved by more than a fifth", re-planned at each of these).
  for (int64_t step = 2; step < 20; ++step) {
    const double a = step % 2 ? 14 : 6;
    const double b = step % 2 ? 6 : 13;
    c.recordStepTimes({a, b, a, b}, {b, a, b, a}, 1);
    EXPECT_FALSE(c.beginStep(step, 0).has_value()) << step;
  }
  // Layer 1 becomes 0.5 ms: layer 0's 1 ms offload now outlasts it (0.5 ms wait > 5% of the
  // 2 ms of copies): plan again, and the new plan swaps layer 1's tensor instead, hidden.
  c.recordStepTimes({10, 0.5, 10, 10}, {10, 10, 10, 10}, 1);
  auto stalled = c.beginStep(20, 0);
  ASSERT_TRUE(stalled.has_value());
  EXPECT_EQ(stalled->step, 20);
  EXPECT_EQ(stalled->tensorSwapped, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(stalled->predictedExposedMs, 0);
  // Same times again: nothing to do. Resident bytes that make the plan miss its target: again.
  EXPECT_FALSE(c.beginStep(21, 0).has_value());
  EXPECT_TRUE(c.beginStep(22, 500'000).has_value());
}

TEST(SwapController, MovedTimesReplanAtMostOnceEveryNSteps) {
  SwapController c(fourLayerSettings(), fourLayerSizes(), 0);
  c.recordStepTimes({10, 10, 10, 10}, {10, 10, 10, 10}, 1);
  ASSERT_TRUE(c.beginStep(0, 0).has_value());
  // Times 30% slower everywhere: nothing stalls, but after kSwapReplanEverySteps steps the plan
  // is made again from them (once), then stands for another kSwapReplanEverySteps.
  c.recordStepTimes({13, 13, 13, 13}, {13, 13, 13, 13}, 1);
  int plans = 0;
  int64_t lastPlan = -1;
  for (int64_t step = 1; step <= 2 * kSwapReplanEverySteps + 5; ++step) {
    const double ms = step % 2 ? 13 : 7;
    c.recordStepTimes({ms, ms, ms, ms}, {ms, ms, ms, ms}, 1);
    if (!c.beginStep(step, 0).has_value()) continue;
    ++plans;
    if (lastPlan >= 0) {
      EXPECT_GE(step - lastPlan, kSwapReplanEverySteps);
    }
    lastPlan = step;
  }
  // Plans at step N (times 7 ms) and N + 1 after 2N (step 2N has exactly the planned times).
  EXPECT_EQ(plans, 2);
  EXPECT_EQ(lastPlan, 2 * kSwapReplanEverySteps + 1);
}

TEST(SwapController, ManualPlansAtTheFirstStepFromSizes) {
  SwapSettings s = autoSettings(0);
  s.mode = SwapMode::kManual;
  s.ops = {"moe_act"};
  SwapController c(s, swapProfileFor(smallDims()), 0);
  auto plan = c.beginStep(0, 1000);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->fixedBytes, 1000);
  EXPECT_TRUE(c.swaps(0, SwapOp::kMoeAct));
  EXPECT_TRUE(c.swaps(1, SwapOp::kMoeAct));
  EXPECT_FALSE(c.swaps(0, SwapOp::kExpertFc2));
}

TEST(SwapController, ManualRecomputeIsAnsweredAndItsMeasuredTimeLeavesTheBackward) {
  SwapSettings s = autoSettings(0);
  s.mode = SwapMode::kManual;
  s.ops = {"attn_norm"};
  s.recomputeOps = {"moe_act"};
  SwapController c(s, swapProfileFor(smallDims()), 0);
  const auto first = c.beginStep(0, 1000);
  ASSERT_TRUE(first.has_value());
  // The plan carries what a re-plan needs: the recompute ops and the per-layer estimate.
  EXPECT_EQ(first->recomputeOps, "moe_act");
  EXPECT_EQ(first->layerRecomputeMs, c.profile().layerRecomputeMs);
  EXPECT_FALSE(first->recomputeMsMeasured);
  EXPECT_TRUE(c.recomputes(0, SwapOp::kMoeAct));
  EXPECT_FALSE(c.swaps(0, SwapOp::kMoeAct));
  EXPECT_TRUE(c.swaps(0, SwapOp::kAttnNorm));
  EXPECT_FALSE(c.recomputes(0, SwapOp::kAttnNorm));
  EXPECT_FALSE(c.recomputes(0, SwapOp::kExpertFc2));
  const size_t layers = c.profile().layerForwardMs.size();
  ASSERT_EQ(c.profile().layerRecomputeMs.size(), layers);
  EXPECT_GT(c.profile().layerRecomputeMs[0], 0);  // the FLOPs estimate before a measurement
  // Layer 0 measured 1.5 ms of recompute inside its 10 ms backward; the others none.
  std::vector<double> recompute(layers, 0.0);
  recompute[0] = 1.5;
  c.recordStepTimes(std::vector<double>(layers, 5.0), std::vector<double>(layers, 10.0), 2.0,
                    recompute);
  EXPECT_DOUBLE_EQ(c.profile().layerBackwardMs[0], 8.5);
  EXPECT_DOUBLE_EQ(c.profile().layerBackwardMs[1], 10.0);
  for (double ms : c.profile().layerRecomputeMs) EXPECT_DOUBLE_EQ(ms, 1.5);
  auto again = c.beginStep(1, 1000);  // the measured times replace the estimate: plans again
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->recomputeOps, "moe_act");
  EXPECT_EQ(again->layerRecomputeMs, std::vector<double>(layers, 1.5));
  EXPECT_TRUE(again->recomputeMsMeasured);
  ASSERT_EQ(again->tensorRecomputed.size(), again->tensorOp.size());
  for (size_t i = 0; i < again->tensorOp.size(); ++i) {
    EXPECT_EQ(bool(again->tensorRecomputed[i]), again->tensorOp[i] == "moe_act") << i;
  }
}

PhaseEvent phase(int32_t layer, Pass pass, int64_t startMs, int64_t endMs) {
  PhaseEvent e;
  e.layer = layer;
  e.pass = pass;
  e.phase = Phase::kExperts;
  e.startNs = 1'000'000'000 + startMs * 1'000'000;
  e.endNs = 1'000'000'000 + endMs * 1'000'000;
  return e;
}

// Layer 0 forward 0..4 (two phases), layer 1 4..9, loss to 12, backward layer 1 12..20, layer 0
// 21..30 (the 1 ms gap is charged to layer 1).
std::vector<PhaseEvent> stepPhases() {
  return {phase(0, Pass::kForward, 0, 2), phase(0, Pass::kForward, 2, 4),
          phase(1, Pass::kForward, 4, 9), phase(-1, Pass::kForward, 9, 12),
          phase(1, Pass::kBackward, 12, 20), phase(0, Pass::kBackward, 21, 30)};
}

TEST(SwapController, LayerTimesFromPhaseEvents) {
  auto t = layerTimesFromPhases(stepPhases(), 2);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(t->forwardMs, (std::vector<double>{4, 5}));
  EXPECT_EQ(t->backwardMs, (std::vector<double>{9, 9}));
  EXPECT_DOUBLE_EQ(t->turnMs, 3);
  EXPECT_EQ(t->forwardStartNs, 1'000'000'000);
  auto missing = layerTimesFromPhases(stepPhases(), 3);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("layer 2"), std::string::npos);
}

TEST(SwapSimTier, PlacesThePlansMovesOnTheStepsClock) {
  SwapSettings s = autoSettings(0);
  s.mode = SwapMode::kManual;
  s.ops = {"moe_act"};
  s.d2hBytesPerMs = 1024;  // one moe_act tensor (1024 B) per ms
  s.h2dBytesPerMs = 1024;
  SwapController c(s, swapProfileFor(smallDims()), 0);
  ASSERT_TRUE(c.beginStep(0, 0).has_value());
  auto sim = simulateSwapStep(c, stepPhases(), 0, 0);
  ASSERT_TRUE(sim.isOk()) << sim.status().toString();
  ASSERT_EQ(sim->copies.size(), 4u);  // two tensors, each out and back
  const SwapEvent& first = sim->copies[0];
  EXPECT_TRUE(first.toHost);
  EXPECT_TRUE(first.simulated);
  EXPECT_EQ(first.layer, 0);
  EXPECT_EQ(first.op, "moe_act");
  EXPECT_EQ(first.startNs, 1'004'000'000);  // layer 0's forward end
  EXPECT_EQ(first.endNs, 1'005'000'000);
  // Layer 1's offload (9..10) has its free point before the turn: compute, there at 9, waits
  // 1 ms, reported on the offload as on the GPU (on the last one waited for); layer 0's, waited
  // for at the same point, carries nothing.
  EXPECT_EQ(first.stallNs, 0);
  EXPECT_EQ(first.neededNs, 0);
  const SwapEvent& second = sim->copies[1];
  EXPECT_TRUE(second.toHost);
  EXPECT_EQ(second.layer, 1);
  EXPECT_EQ(second.neededNs, 1'009'000'000);
  EXPECT_EQ(second.stallNs, 1'000'000);
  EXPECT_DOUBLE_EQ(sim->totals.exposedMs, 1.0 + double(sim->copies[2].stallNs +
                                                       sim->copies[3].stallNs) / 1e6);
  EXPECT_EQ(sim->totals.offloads, 2);
  EXPECT_EQ(sim->totals.reloads, 2);
  EXPECT_EQ(sim->totals.swappedBytes, 2048);
  EXPECT_EQ(sim->totals.pinnedPeakBytes, 2048);
  EXPECT_EQ(sim->totals.pinnedCapacityBytes, s.pinnedBudgetBytes);
  EXPECT_LE(sim->totals.hbmPeakBytes, sim->totals.hbmPeakNoSwapBytes);
  EXPECT_TRUE(sim->totals.simulated);
  EXPECT_EQ(sim->times.forwardMs, (std::vector<double>{4, 5}));
}

TEST(SwapController, ManualPlansAtOnceAndAgainWhenTheFirstTimesArrive) {
  SwapSettings s = autoSettings(0);
  s.mode = SwapMode::kManual;
  s.ops = {"moe_act"};
  SwapController controller(s, swapProfileFor(smallDims()), 0);
  const auto first = controller.beginStep(0, 1000);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(controller.swaps(0, SwapOp::kMoeAct));
  EXPECT_LT(controller.plan()->stepMs, 0.01);  // no step measured yet: only copy time
  controller.recordStepTimes({2.0, 2.0}, {4.0, 4.0}, 1.0);
  const auto second = controller.beginStep(1, 1000);
  ASSERT_TRUE(second.has_value()) << "the plan of unmeasured times is made again";
  EXPECT_TRUE(controller.swaps(0, SwapOp::kMoeAct));
  EXPECT_GT(controller.plan()->stepMs, 12.0);
  controller.recordStepTimes({2.0, 2.0}, {4.0, 4.0}, 1.0);
  EXPECT_FALSE(controller.beginStep(2, 1000).has_value());
}

}  // namespace
}  // namespace moewb::engine
