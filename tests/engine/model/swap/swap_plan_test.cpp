// Tests of the swap step model and policy (moewb/engine/swap.h, engine/model/swap/swap_plan.cpp)
// on small cases computed by hand.
#include "moewb/engine/swap.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace moewb::engine {
namespace {

constexpr double kEps = 1e-9;

// Bandwidths in bytes per ms; prefetch distance; everything else off.
SwapSettings settings(double bytesPerMs, double bidirBytesPerMs, int32_t prefetch) {
  SwapSettings s;
  s.mode = SwapMode::kAuto;
  s.ops = swapOpNames();
  s.minBytes = 0;
  s.pinnedBudgetBytes = int64_t(1) << 40;
  s.prefetchLayers = prefetch;
  s.d2hBytesPerMs = bytesPerMs;
  s.h2dBytesPerMs = bytesPerMs;
  s.bidirBytesPerMs = bidirBytesPerMs;
  return s;
}

// `layers` layers of `fwdMs` / `bwdMs`, no other bytes, fixed bytes 100.
SwapProfile profile(int32_t layers, double fwdMs, double bwdMs, double turnMs) {
  SwapProfile p;
  p.layerForwardMs.assign(size_t(layers), fwdMs);
  p.layerBackwardMs.assign(size_t(layers), bwdMs);
  p.layerOtherBytes.assign(size_t(layers), 0);
  p.turnMs = turnMs;
  p.fixedBytes = 100;
  return p;
}

const SwapMove& moveOf(const SwapPrediction& p, int32_t tensor, bool toHost) {
  auto it = std::find_if(p.moves.begin(), p.moves.end(), [&](const SwapMove& m) {
    return m.tensor == tensor && m.toHost == toHost;
  });
  EXPECT_NE(it, p.moves.end());
  return *it;
}

TEST(SwapPlan, OneTensorWaitsBeforeTheTurnThenReloadsHidden) {
  // Forward 0..10; offload 2e6 B at 1e6 B/ms: 10..12. One layer: its free point is past the last
  // layer, so compute waits before the turn, 10..12 (a 2 ms offload stall); turn 12..17; reload
  // issued at the turn: 12..14; the backward is ready at 17: no reload stall.
  SwapProfile p = profile(1, 10, 10, 5);
  p.tensors = {{0, "attn_norm", 2'000'000}};
  auto r = simulateSwap(settings(1e6, 1e6, 1), p, {SwapAction::kSwap});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const SwapMove& off = moveOf(*r, 0, true);
  const SwapMove& on = moveOf(*r, 0, false);
  EXPECT_NEAR(off.startMs, 10, kEps);
  EXPECT_NEAR(off.endMs, 12, kEps);
  EXPECT_NEAR(off.neededMs, 10, kEps);
  EXPECT_NEAR(off.stallMs, 2, kEps);
  EXPECT_NEAR(on.startMs, 12, kEps);
  EXPECT_NEAR(on.endMs, 14, kEps);
  EXPECT_NEAR(on.neededMs, 17, kEps);
  EXPECT_EQ(on.stallMs, 0);
  EXPECT_EQ(r->lateReloads, 0);  // offload waits are no late reloads
  EXPECT_NEAR(r->exposedMs, 2, kEps);
  EXPECT_NEAR(r->copyMs, 4, kEps);
  EXPECT_NEAR(r->stepMs, 27, kEps);
  EXPECT_EQ(r->swappedBytes, 2'000'000);
}

TEST(SwapPlan, SlowCopiesStallExactlyAndDelayTheRest) {
  // 1e5 B/ms: offload 10..30, compute waits for it 10..30 (20 ms), turn 30..35, reload 30..50,
  // backward ready at 35 waits 15 ms: 50..60.
  SwapProfile p = profile(1, 10, 10, 5);
  p.tensors = {{0, "attn_norm", 2'000'000}};
  auto r = simulateSwap(settings(1e5, 1e5, 1), p, {SwapAction::kSwap});
  ASSERT_TRUE(r.isOk());
  const SwapMove& on = moveOf(*r, 0, false);
  EXPECT_NEAR(moveOf(*r, 0, true).stallMs, 20, kEps);
  EXPECT_NEAR(on.endMs, 50, kEps);
  EXPECT_NEAR(on.stallMs, 15, kEps);
  EXPECT_NEAR(r->exposedMs, 35, kEps);
  EXPECT_EQ(r->lateReloads, 1);
  EXPECT_NEAR(r->stepMs, 60, kEps);
}

// Three layers of 10 ms, turn 5; layer 0 swaps 1.5e6 B: D2H at 1e5 B/ms (15 ms), H2D at 1e6 B/ms.
SwapPrediction slowOffloadOfLayer0(int32_t lag) {
  SwapProfile p = profile(3, 10, 10, 5);
  p.tensors = {{0, "moe_act", 1'500'000}, {1, "moe_act", 1'000}, {2, "moe_act", 1'000}};
  SwapSettings s = settings(1e5, 1e5, 1);
  s.h2dBytesPerMs = 1e6;
  s.freeLagLayers = lag;
  auto r = simulateSwap(s, p, {SwapAction::kSwap, SwapAction::kKeep, SwapAction::kKeep});
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? *r : SwapPrediction{};
}

TEST(SwapPlan, OffloadWaitAtTheNextLayersEndWithLagOne) {
  // Offload 10..25. Lag 1: compute reaches the end of layer 1's forward at 20 and waits until 25
  // (5 ms); layer 2 25..35, turn 35..40, backward 40..70; the reload, issued at layer 1's
  // backward (50), takes 1.5 ms: hidden. Step 30 + 5 + 5 + 30 = 70.
  const SwapPrediction r = slowOffloadOfLayer0(1);
  const SwapMove& off = moveOf(r, 0, true);
  EXPECT_NEAR(off.startMs, 10, kEps);
  EXPECT_NEAR(off.endMs, 25, kEps);
  EXPECT_NEAR(off.neededMs, 20, kEps);
  EXPECT_NEAR(off.stallMs, 5, kEps);
  EXPECT_NEAR(moveOf(r, 0, false).startMs, 50, kEps);
  EXPECT_EQ(moveOf(r, 0, false).stallMs, 0);
  EXPECT_NEAR(r.exposedMs, 5, kEps);
  EXPECT_EQ(r.lateReloads, 0);
  EXPECT_NEAR(r.stepMs, 70, kEps);
}

TEST(SwapPlan, OffloadWaitAtItsOwnLayersEndWithLagZero) {
  // Lag 0: compute waits at the end of layer 0's forward, 10..25 (15 ms); layers 1, 2 25..45,
  // turn 45..50, backward 50..80 (reload at 60, hidden). Step 30 + 15 + 5 + 30 = 80.
  const SwapPrediction r = slowOffloadOfLayer0(0);
  const SwapMove& off = moveOf(r, 0, true);
  EXPECT_NEAR(off.neededMs, 10, kEps);
  EXPECT_NEAR(off.stallMs, 15, kEps);
  EXPECT_NEAR(moveOf(r, 0, false).startMs, 60, kEps);
  EXPECT_NEAR(r.exposedMs, 15, kEps);
  EXPECT_EQ(r.lateReloads, 0);
  EXPECT_NEAR(r.stepMs, 80, kEps);
  // A lag past the last layer: the wait moves to the end of the forward (30), offload done: 0.
  const SwapPrediction far = slowOffloadOfLayer0(5);
  EXPECT_EQ(moveOf(far, 0, true).stallMs, 0);
  EXPECT_NEAR(moveOf(far, 0, true).neededMs, 30, kEps);
  EXPECT_NEAR(far.stepMs, 65, kEps);
}

TEST(SwapPlan, OffloadedMemoryIsFreedAtTheWaitNotAtTheCopyEnd) {
  // Three layers of 10 ms, turn 1; A (layer 0, 1e6 B, swapped, copied 10..11), B (layer 1, 3e6 B,
  // kept); prefetch 0, so A comes back only at layer 0's backward (after B is freed). With lag 2
  // A's free point is the end of layer 2's forward (30): A and B are both resident 20..30 although
  // A's copy ended at 11, so the peak is the no-swap peak, 4e6. With lag 1 A is freed at 20, as
  // B arrives: the peak is 3e6.
  SwapProfile p = profile(3, 10, 10, 1);
  p.tensors = {{0, "moe_act", 1'000'000}, {1, "moe_act", 3'000'000}};
  const std::vector<SwapAction> a = {SwapAction::kSwap, SwapAction::kKeep};
  SwapSettings s = settings(1e6, 1e6, 0);
  s.freeLagLayers = 2;
  auto lag2 = simulateSwap(s, p, a);
  ASSERT_TRUE(lag2.isOk());
  EXPECT_NEAR(moveOf(*lag2, 0, true).endMs, 11, kEps);
  EXPECT_NEAR(moveOf(*lag2, 0, true).neededMs, 30, kEps);
  EXPECT_EQ(moveOf(*lag2, 0, true).stallMs, 0);
  EXPECT_EQ(lag2->peakNoSwapBytes, 100 + 4'000'000);
  EXPECT_EQ(lag2->peakBytes, 100 + 4'000'000);
  s.freeLagLayers = 1;
  auto lag1 = simulateSwap(s, p, a);
  ASSERT_TRUE(lag1.isOk());
  EXPECT_NEAR(moveOf(*lag1, 0, true).neededMs, 20, kEps);
  EXPECT_EQ(lag1->peakBytes, 100 + 3'000'000);
}

TEST(SwapPlan, ReloadIsIssuedAtThePrefetchDistance) {
  // Two layers of 10 ms, turn 5; layer 0's tensor (1 ms copies). prefetch 1: issued at the start
  // of layer 1's backward (25). prefetch 0: when layer 0's backward is ready (35), 1 ms stall.
  SwapProfile p = profile(2, 10, 10, 5);
  p.tensors = {{0, "attn_norm", 1'000'000}, {1, "attn_norm", 1'000'000}};
  const std::vector<SwapAction> a = {SwapAction::kSwap, SwapAction::kKeep};
  auto ahead = simulateSwap(settings(1e6, 1e6, 1), p, a);
  ASSERT_TRUE(ahead.isOk());
  EXPECT_NEAR(moveOf(*ahead, 0, false).startMs, 25, kEps);
  EXPECT_EQ(ahead->exposedMs, 0);
  // The peak: both layers live from 20 (layer 1's forward end) to 35 in both cases.
  EXPECT_EQ(ahead->peakNoSwapBytes, 100 + 2'000'000);
  EXPECT_EQ(ahead->peakBytes, 100 + 2'000'000);

  auto late = simulateSwap(settings(1e6, 1e6, 0), p, a);
  ASSERT_TRUE(late.isOk());
  const SwapMove& on = moveOf(*late, 0, false);
  EXPECT_NEAR(on.startMs, 35, kEps);
  EXPECT_NEAR(on.stallMs, 1, kEps);
  EXPECT_NEAR(late->stepMs, 46, kEps);
  // Layer 0's tensor is on the host from 11 to 35, when layer 1's is freed: one layer at most.
  EXPECT_EQ(late->peakBytes, 100 + 1'000'000);
  EXPECT_EQ(late->peakNoSwapBytes, 100 + 2'000'000);
}

TEST(SwapPlan, EveryOffloadEndsBeforeTheTurnSoReloadsRunAlone) {
  // One layer, two tensors of 2e6 B, 1e6 B/ms one way. Offloads X 10..12, Y 12..14; compute
  // waits for both before the turn, 10..14 (4 ms, charged to Y, the last); turn 14..15; reloads
  // X 14..16, Y 16..18 at the one-way rate (no offload is left to share the link with, so the
  // bidirectional rate never applies); the backward, ready at 15, waits: X 1 ms, Y 2 ms.
  SwapProfile p = profile(1, 10, 10, 1);
  p.tensors = {{0, "attn_norm", 2'000'000}, {0, "mixer_input", 2'000'000}};
  for (double bidir : {1e6, 1e9}) {
    auto r = simulateSwap(settings(1e6, bidir, 1), p, {SwapAction::kSwap, SwapAction::kSwap});
    ASSERT_TRUE(r.isOk());
    EXPECT_NEAR(moveOf(*r, 1, true).startMs, 12, kEps);
    EXPECT_NEAR(moveOf(*r, 1, true).endMs, 14, kEps);
    EXPECT_EQ(moveOf(*r, 0, true).stallMs, 0);
    EXPECT_NEAR(moveOf(*r, 1, true).stallMs, 4, kEps);
    EXPECT_NEAR(moveOf(*r, 0, false).startMs, 14, kEps);
    EXPECT_NEAR(moveOf(*r, 0, false).endMs, 16, kEps);
    EXPECT_NEAR(moveOf(*r, 1, false).endMs, 18, kEps);
    EXPECT_NEAR(moveOf(*r, 0, false).stallMs, 1, kEps);
    EXPECT_NEAR(moveOf(*r, 1, false).stallMs, 2, kEps);
    EXPECT_NEAR(r->exposedMs, 7, kEps);
    EXPECT_EQ(r->lateReloads, 2);
    EXPECT_NEAR(r->stepMs, 28, kEps);
  }
}

// Four layers of one 1e6 B tensor, near-free copies: the no-swap peak is 4e6 at the turn.
SwapProfile fourLayers() {
  SwapProfile p = profile(4, 10, 10, 1);
  for (int32_t l = 0; l < 4; ++l) p.tensors.push_back({l, "moe_act", 1'000'000});
  p.fixedBytes = 0;
  return p;
}

TEST(SwapPlan, AutoDeclinesWhenTheRunFits) {
  SwapSettings s = settings(1e9, 1e9, 1);
  s.hbmTargetBytes = 5'000'000;
  auto r = planSwap(s, fourLayers());
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->declined);
  EXPECT_EQ(r->swappedBytes, 0);
  EXPECT_EQ(r->peakBytes, 4'000'000);
  EXPECT_EQ(r->summary.rfind("auto: declined, the run fits", 0), 0u) << r->summary;
  for (const auto& d : r->decisions) EXPECT_EQ(d.action, SwapAction::kKeep);
}

TEST(SwapPlan, AutoReachesTheTargetEarliestLayersFirst) {
  SwapSettings s = settings(1e9, 1e9, 1);
  s.hbmTargetBytes = 3'000'000;
  auto one = planSwap(s, fourLayers());
  ASSERT_TRUE(one.isOk());
  EXPECT_FALSE(one->declined);
  EXPECT_EQ(one->decisions[0].action, SwapAction::kSwap);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(one->decisions[i].action, SwapAction::kKeep);
  EXPECT_EQ(one->decisions[1].reason, "not needed: target reached");
  EXPECT_EQ(one->peakBytes, 3'000'000);

  s.hbmTargetBytes = 2'500'000;
  auto two = planSwap(s, fourLayers());
  ASSERT_TRUE(two.isOk());
  EXPECT_EQ(two->decisions[0].action, SwapAction::kSwap);
  EXPECT_EQ(two->decisions[1].action, SwapAction::kSwap);
  EXPECT_LE(two->peakBytes, 2'500'000);
  EXPECT_EQ(two->lateReloads, 0);
  EXPECT_NE(two->summary.find("auto: swap 2 of 4 tensors"), std::string::npos) << two->summary;
}

TEST(SwapPlan, AutoSpreadsCopiesOverLayersInsteadOfStallingOne) {
  // Four layers of 10 ms, turn 1, two 6e6 B tensors per layer; D2H 1e6 B/ms (6 ms each), H2D
  // 1e7 B/ms. No-swap peak 48e6 at the turn; target 36e6: two tensors must go. Both of layer 0
  // (10..22) outlast layer 1's forward (free point 20): a 2 ms offload wait. One of layer 0
  // (10..16) and one of layer 1 (20..26, free point 30) hide.
  SwapProfile p = profile(4, 10, 10, 1);
  p.fixedBytes = 0;
  for (int32_t l = 0; l < 4; ++l) {
    p.tensors.push_back({l, "moe_act", 6'000'000});
    p.tensors.push_back({l, "expert_fc2", 6'000'000});
  }
  SwapSettings s = settings(1e6, 1e6, 1);
  s.h2dBytesPerMs = 1e7;
  s.hbmTargetBytes = 36'000'000;
  std::vector<SwapAction> stacked(8, SwapAction::kKeep);
  stacked[0] = stacked[1] = SwapAction::kSwap;
  auto stack = simulateSwap(s, p, stacked);
  ASSERT_TRUE(stack.isOk());
  EXPECT_EQ(stack->peakNoSwapBytes, 48'000'000);
  EXPECT_LE(stack->peakBytes, s.hbmTargetBytes);  // reaches the target too ...
  EXPECT_NEAR(moveOf(*stack, 1, true).stallMs, 2, kEps);
  EXPECT_NEAR(stack->exposedMs, 2, kEps);          // ... but stalls 2 ms
  EXPECT_NEAR(stack->stepMs, 83, kEps);

  auto r = planSwap(s, p);
  ASSERT_TRUE(r.isOk());
  const std::vector<SwapAction> want = {SwapAction::kSwap, SwapAction::kKeep, SwapAction::kSwap,
                                        SwapAction::kKeep, SwapAction::kKeep, SwapAction::kKeep,
                                        SwapAction::kKeep, SwapAction::kKeep};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r->decisions[i].action, want[i]) << i;
  EXPECT_EQ(r->decisions[1].reason, "would stall 2 ms; target reached without it");
  EXPECT_EQ(r->peakBytes, 36'000'000);
  EXPECT_EQ(r->exposedMs, 0);
  EXPECT_EQ(r->lateReloads, 0);
  EXPECT_NEAR(r->stepMs, 81, kEps);
}

TEST(SwapPlan, AutoNeverPassesThePinnedBudget) {
  SwapSettings s = settings(1e9, 1e9, 1);
  s.hbmTargetBytes = 2'000'000;
  s.pinnedBudgetBytes = 1'500'000;
  auto r = planSwap(s, fourLayers());
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->swappedBytes, 1'000'000);
  EXPECT_EQ(r->decisions[1].reason, "pinned budget full");
  EXPECT_GT(r->peakBytes, s.hbmTargetBytes);
  EXPECT_NE(r->summary.find("not reached"), std::string::npos) << r->summary;
}

TEST(SwapPlan, ManualTakesExactlyTheListedOpsAboveMinBytes) {
  SwapProfile p = profile(2, 10, 10, 1);
  p.tensors = {{0, "attn_norm", 4000}, {0, "moe_act", 500},  {0, "expert_fc2", 9000},
               {1, "attn_norm", 4000}, {1, "moe_act", 2000}, {1, "expert_fc2", 9000}};
  SwapSettings s = settings(1e6, 1e6, 1);
  s.mode = SwapMode::kManual;
  s.ops = {"attn_norm", "moe_act"};
  s.minBytes = 1000;
  auto r = planSwap(s, p);
  ASSERT_TRUE(r.isOk());
  const std::vector<SwapAction> want = {SwapAction::kSwap, SwapAction::kKeep, SwapAction::kKeep,
                                        SwapAction::kSwap, SwapAction::kSwap, SwapAction::kKeep};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r->decisions[i].action, want[i]) << i;
  EXPECT_EQ(r->decisions[1].reason, "below swap.min_bytes");
  EXPECT_EQ(r->decisions[2].reason, "op not in swap.ops");
  EXPECT_EQ(r->swappedBytes, 10000);
  EXPECT_EQ(r->summary.rfind("manual: swap 3 of 6 tensors", 0), 0u) << r->summary;
}

TEST(SwapPlan, OffKeepsEverything) {
  SwapSettings s = settings(1e9, 1e9, 1);
  s.mode = SwapMode::kOff;
  auto r = planSwap(s, fourLayers());
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->swappedBytes, 0);
  EXPECT_TRUE(r->moves.empty());
  EXPECT_EQ(r->decisions[0].reason, "swap.mode = off");
}

TEST(SwapPlan, SizesThatDisagreeAreInvalidArguments) {
  SwapProfile p = fourLayers();
  const SwapSettings s = settings(1e6, 1e6, 1);
  EXPECT_EQ(simulateSwap(s, p, {SwapAction::kSwap}).status().code(),
            StatusCode::kInvalidArgument);
  SwapProfile shortBackward = p;
  shortBackward.layerBackwardMs.pop_back();
  EXPECT_EQ(planSwap(s, shortBackward).status().code(), StatusCode::kInvalidArgument);
  SwapProfile pastLast = p;
  pastLast.tensors.back().layer = 4;
  EXPECT_EQ(planSwap(s, pastLast).status().code(), StatusCode::kInvalidArgument);
  SwapProfile negative = p;
  negative.tensors[0].bytes = -1;
  EXPECT_EQ(planSwap(s, negative).status().code(), StatusCode::kInvalidArgument);
}

TEST(SwapPlan, SettingsFromTheConfigSection) {
  SwapSection section;
  section.mode = "auto";
  section.ops = " moe_act, expert_fc2 ";
  section.hbmTargetGb = 0;
  section.pinnedBudgetGb = 2.5;
  section.d2hGbps = 50;
  section.freeLagLayers = 3;
  SwapSettings s = swapSettingsFrom(section, 80'000'000'000);
  EXPECT_EQ(s.freeLagLayers, 3);
  EXPECT_EQ(s.mode, SwapMode::kAuto);
  EXPECT_EQ(s.ops, (std::vector<std::string>{"moe_act", "expert_fc2"}));
  EXPECT_EQ(s.hbmTargetBytes, 80'000'000'000);  // the device's size stands in for 0
  EXPECT_EQ(s.pinnedBudgetBytes, 2'500'000'000);
  EXPECT_DOUBLE_EQ(s.d2hBytesPerMs, 50e6);
  section.ops = "";
  EXPECT_EQ(swapSettingsFrom(section, 0).ops, swapOpNames());
  EXPECT_EQ(SwapSettings{}.freeLagLayers, 1);
  EXPECT_EQ(SwapSection{}.freeLagLayers, 1);
}

// `layers` layers of 10 ms, turn 1, each with moe_act 6e6 B and expert_fc2 3e6 B; recomputing
// a layer costs 2 ms of its backward.
SwapProfile recomputeProfile(int32_t layers = 2) {
  SwapProfile p = profile(layers, 10, 10, 1);
  p.fixedBytes = 0;
  for (int32_t l = 0; l < layers; ++l) {
    p.tensors.push_back({l, "moe_act", 6'000'000});
    p.tensors.push_back({l, "expert_fc2", 3'000'000});
  }
  p.layerRecomputeMs.assign(size_t(layers), 2.0);
  return p;
}

TEST(SwapPlan, RecomputeFreesFromForwardToBackwardAndCostsOncePerLayer) {
  // Forward 0..10, 10..20; turn 20..21; backward of layer 1 21..31, of layer 0 31..43 (10 + the
  // 2 ms recompute, once for both tensors). Layer 0's 9e6 B are gone from 10 to 31, so the
  // peak is one layer's: 9e6 instead of 18e6. No copy, nothing exposed.
  const SwapProfile p = recomputeProfile();
  const std::vector<SwapAction> actions = {SwapAction::kRecompute, SwapAction::kRecompute,
                                           SwapAction::kKeep, SwapAction::kKeep};
  auto r = simulateSwap(settings(1e6, 1e6, 1), p, actions);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_NEAR(r->stepMs, 43, kEps);
  EXPECT_NEAR(r->recomputeMs, 2, kEps);
  EXPECT_EQ(r->recomputedBytes, 9'000'000);
  EXPECT_EQ(r->peakNoSwapBytes, 18'000'000);
  EXPECT_EQ(r->peakBytes, 9'000'000);
  EXPECT_TRUE(r->moves.empty());
  EXPECT_EQ(r->exposedMs, 0);
  EXPECT_EQ(r->swappedBytes, 0);
}

TEST(SwapPlan, ManualRecomputesTheListedOpsWithoutPinnedMemory) {
  SwapSettings s = settings(1e6, 1e6, 1);
  s.mode = SwapMode::kManual;
  s.ops = {"moe_act"};
  s.recomputeOps = {"moe_act", "expert_fc2"};
  s.pinnedBudgetBytes = 0;
  auto r = planSwap(s, recomputeProfile());
  ASSERT_TRUE(r.isOk());
  for (const auto& d : r->decisions) {
    EXPECT_EQ(d.action, SwapAction::kRecompute);
    EXPECT_EQ(d.reason, "listed in swap.recompute_ops");
  }
  EXPECT_EQ(r->swappedBytes, 0);
  EXPECT_EQ(r->recomputedBytes, 18'000'000);
  EXPECT_NEAR(r->recomputeMs, 4, kEps);
  EXPECT_NE(r->summary.find("swap 0 of 4 tensors (0.0 GB), recompute 4 (18.0 MB, 4 ms)"),
            std::string::npos)
      << r->summary;
}

TEST(SwapPlan, AutoRecomputesWhereASwapWouldStall) {
  // D2H at 1e5 B/ms: a 6e6 B offload takes 60 ms against 10 ms layers, so any swap stalls; a
  // recompute costs 2 ms. Target 9e6: layer 0's two tensors must go. moe_act by recompute
  // (2 ms), then expert_fc2 of the same layer at no further cost.
  SwapSettings s = settings(1e5, 1e5, 1);
  s.recomputeOps = {"moe_act", "expert_fc2"};
  s.hbmTargetBytes = 9'000'000;
  auto r = planSwap(s, recomputeProfile());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->decisions[0].action, SwapAction::kRecompute);
  EXPECT_EQ(r->decisions[1].action, SwapAction::kRecompute);
  EXPECT_EQ(r->decisions[0].reason, "picked: recompute, frees 6.0 MB at the peak, costs 2 ms");
  EXPECT_EQ(r->decisions[1].reason,
            "picked: recompute, frees 3.0 MB at the peak, layer already recomputes");
  EXPECT_EQ(r->decisions[2].action, SwapAction::kKeep);
  EXPECT_EQ(r->peakBytes, 9'000'000);
  EXPECT_EQ(r->exposedMs, 0);
  EXPECT_NEAR(r->recomputeMs, 2, kEps);
  EXPECT_NE(r->summary.find("recompute 2"), std::string::npos) << r->summary;
}

TEST(SwapPlan, AutoSwapsWhereTheCopyHidesAndRecomputeWouldCost) {
  // Three layers and a fast link: layer 0's moe_act leaves during layer 1's forward and is back
  // (prefetch 1) at layer 1's backward, hidden; the peak at the turn drops from 27e6 to 21e6
  // either way, and swapping costs nothing where recomputing costs 2 ms: swap wins.
  SwapSettings s = settings(1e9, 1e9, 1);
  s.recomputeOps = {"moe_act", "expert_fc2"};
  s.hbmTargetBytes = 21'000'000;
  auto r = planSwap(s, recomputeProfile(3));
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->decisions[0].action, SwapAction::kSwap);
  EXPECT_EQ(r->decisions[0].reason, "picked: swap, frees 6.0 MB at the peak, hidden under compute");
  EXPECT_EQ(r->recomputedBytes, 0);
  EXPECT_EQ(r->recomputeMs, 0);
  EXPECT_EQ(r->exposedMs, 0);
  EXPECT_EQ(r->peakBytes, 21'000'000);
}

TEST(SwapPlan, RecomputeTimesOfTheWrongLengthAreInvalid) {
  SwapProfile p = recomputeProfile();
  p.layerRecomputeMs = {1};
  EXPECT_EQ(simulateSwap(settings(1e6, 1e6, 1), p, std::vector<SwapAction>(4)).status().code(),
            StatusCode::kInvalidArgument);
  p.layerRecomputeMs = {1, -1};
  EXPECT_EQ(simulateSwap(settings(1e6, 1e6, 1), p, std::vector<SwapAction>(4)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::engine
