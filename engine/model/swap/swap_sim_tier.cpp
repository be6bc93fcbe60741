// simulateSwapStep (swap_sim_tier.h): the plan's decisions simulated on the step's own times and
// placed on its clock.
#include "model/swap/swap_sim_tier.h"

#include <cmath>

namespace moewb::engine {
namespace {

int64_t toNs(int64_t originNs, double ms) { return originNs + int64_t(std::llround(ms * 1e6)); }

}  // namespace

Result<SimulatedSwapStep> simulateSwapStep(const SwapController& controller,
                                           const std::vector<PhaseEvent>& phases, int64_t step,
                                           int32_t rank) {
  SimulatedSwapStep out;
  const SwapProfile& sizes = controller.profile();
  MOEWB_ASSIGN_OR_RETURN(out.times,
                         layerTimesFromPhases(phases, int32_t(sizes.layerForwardMs.size())));
  out.totals.step = step;
  out.totals.rank = rank;
  out.totals.simulated = true;
  const SwapPrediction* plan = controller.plan();
  if (!plan || controller.settings().mode == SwapMode::kOff) return out;
  SwapProfile profile = sizes;
  profile.layerForwardMs = out.times.forwardMs;
  profile.layerBackwardMs = out.times.backwardMs;
  profile.turnMs = out.times.turnMs;
  std::vector<SwapAction> actions;
  for (const auto& d : plan->decisions) actions.push_back(d.action);
  MOEWB_ASSIGN_OR_RETURN(SwapPrediction sim, simulateSwap(controller.settings(), profile, actions));
  const int64_t origin = out.times.forwardStartNs;
  for (const SwapMove& m : sim.moves) {
    const SwapTensor& t = profile.tensors[size_t(m.tensor)];
    SwapEvent e;
    e.step = step;
    e.rank = rank;
    e.layer = t.layer;
    e.op = t.op;
    e.bytes = t.bytes;
    e.toHost = m.toHost;
    e.startNs = toNs(origin, m.startMs);
    e.endNs = toNs(origin, m.endMs);
    // An offload's needed/stall: the compute wait at its free point, on the last offload waited
    // for there (as the CUDA tier reports it); 0 on the others.
    const bool waitedFor = !m.toHost || m.neededMs > 0 || m.stallMs > 0;
    e.neededNs = waitedFor ? toNs(origin, m.neededMs) : 0;
    e.stallNs = int64_t(std::llround(m.stallMs * 1e6));
    e.simulated = true;
    out.copies.push_back(std::move(e));
    (m.toHost ? out.totals.offloads : out.totals.reloads) += 1;
  }
  out.totals.hbmPeakBytes = sim.peakBytes;
  out.totals.hbmPeakNoSwapBytes = sim.peakNoSwapBytes;
  out.totals.pinnedPeakBytes = sim.swappedBytes;
  out.totals.pinnedCapacityBytes = controller.settings().pinnedBudgetBytes;
  out.totals.lateReloads = sim.lateReloads;
  out.totals.swappedBytes = sim.swappedBytes;
  out.totals.copyMs = sim.copyMs;
  out.totals.exposedMs = sim.exposedMs;
  return out;
}

}  // namespace moewb::engine
