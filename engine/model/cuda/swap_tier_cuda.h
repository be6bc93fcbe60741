// SwapTierCuda: the real swap mechanism of one CudaContext. Saved activations that the
// SwapController plans to swap leave the device after their layer's forward (D2H into a pinned
// host slot) and come back ahead of the layer's backward (H2D), on two copy streams of its own
// (the context's side stream belongs to the EP all-to-alls), ordered by CUDA events; loss and
// gradients are bitwise those of the same step without swap.
//
// Per swapped unit (one (layer, op): one tensor, two for moe_act), in call order:
//   offload (endLayerForward): the compute stream records fwdEnd[l]; the D2H stream waits on it,
//     records offStart, copies every tensor of the unit into one pinned slot, records offEnd. The
//     model's tensors are moved into a pending list (the model's slots become empty; their shapes
//     are kept to recreate them).
//   release: a pending tensor goes back to the allocator when cudaEventQuery(offEnd) says its
//     copy is done (polled at every layer boundary), and at the latest at the end of layer
//     l + freeLagLayers's forward (SwapSettings::freeLagLayers, the step model's free point):
//     there the compute stream waits on layer l's last offEnd and the tensors are released at
//     once (stream order makes the reuse safe: every later use of
//     their blocks is queued behind that wait). Why not poll only: the host runs a whole forward
//     ahead of the GPU (no host sync inside it), so a host poll would see nothing done and no
//     memory would be freed before the forward's end. The wait stalls the compute stream only
//     when a layer's copies outlast the next freeLagLayers forwards (reported as offloadWaitMs).
//     Layers whose free point is past the last layer are waited for at endForward, before the
//     loss head (the planner's step model charges that wait and avoids it where it would show).
//   reload (prefetch: the last prefetchLayers layers at endForward, then layer l - prefetchLayers
//     at the start of layer l's backward, and a layer's own reloads at its start when still
//     missing): the shadow drops, a new tensor comes from the allocator (compute-stream order),
//     the compute stream records allocated, the H2D stream waits on it (the block may still be
//     read by queued compute work) and, before the step's first reload, on the step's last
//     offEnd (direction-aware: no H2D while D2H runs), records reStart, copies, records reEnd;
//     the new tensor is moved into the model's slot.
//   consume (beginLayerBackward): the compute stream records needed[l], waits on the layer's last
//     reEnd, records bwdBegin[l].
// Times (finishStep, after the step's final synchronisation): event times converted to the host
// steady clock as DeviceTimeline does (an anchor event recorded right after a synchronisation at
// beginStep); a reload's stall is the part of its layer's wait that it caused: max(0, reEnd -
// max(needed, reEnd of the layer's previous reload)), so the stalls of a layer add up to the time
// its backward waited (never counted twice); late = stall > 0. An offload's event carries the
// compute-stream wait of its release (above), when there was one, as its stallNs (neededNs: when
// the compute stream asked for the memory), on the last unit of the layer waited for; the step's
// exposedMs is the sum of reload stalls and offload waits (lateReloads counts reloads only).
// Memory: the allocator's shadow (CachingAllocator::addShadowBytes) gets + a tensor's block
// bytes when its block is released and - the same bytes just before its reload is allocated, so
// the allocator's shadow peak is the same step's peak without swap.
// Costs: per layer about 6 event records; per unit 4 records and one copy per tensor each way;
// no event is created in steady state (a pool grows to the largest step). The pinned pool is
// allocated once (PinnedHostPool). Single GPU only (the model refuses it with EP or ranks).
// Not thread-safe: one per context, used from the thread that steps it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/swap/swap_controller.h"
#include "moewb/base/status.h"
#include "moewb/engine/event_sink.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/pinned_host_pool.h"

namespace moewb::engine::cuda {

// What a finished step's swap did, measured.
struct SwapTierStepReport {
  std::vector<SwapEvent> events;        // offloads in forward order, then reloads in issue order
  SwapStepEvent step;                   // watermarks and totals (simulated = false)
  std::vector<double> layerForwardMs;   // [L] fwdEnd - fwdStart
  std::vector<double> layerBackwardMs;  // [L] bwdEnd - bwdBegin (after the reload wait; a
                                        //   recompute included)
  std::vector<double> layerRecomputeMs; // [L] recomputeEnd - recomputeStart, 0 where none
  double turnMs = 0;                    // last layer's fwdEnd to its needed
  double offloadWaitMs = 0;             // compute-stream waits for offloads (release at l + lag)
  int32_t keptPoolFull = 0;             // planned units kept on the device: pinned pool full
  int32_t keptAbsent = 0;               // planned units with no tensor in this configuration
  int64_t pinnedHostAllocs = 0;         // pinned blocks the pool allocated so far
};

// One planned unit as the model hands it over: op and its tensors' slots in the model (one, or
// two for moe_act; the second may be null).
struct SwapSlots {
  SwapOp op = SwapOp::kAttnNorm;
  std::array<DeviceTensor<bf16>*, 2> tensors{};
};

class SwapTierCuda {
 public:
  // Creates the two copy streams on the context's device. Errors: kInternal (CUDA).
  static Result<std::unique_ptr<SwapTierCuda>> create(CudaContext& context);
  ~SwapTierCuda();
  SwapTierCuda(const SwapTierCuda&) = delete;
  SwapTierCuda& operator=(const SwapTierCuda&) = delete;

  // Starts a step of `numLayers` layers (reloads prefetched `prefetchLayers` ahead, offloads
  // freed `freeLagLayers` layers after their own, as in moewb/engine/swap.h). Drops what a
  // failed step left, synchronises the compute stream and anchors the clocks; with `needPool`,
  // makes the pinned pool hold `pinnedBudgetBytes` (pinned only at the first use and when
  // the budget grows); resets the pool's slots. Errors: the pool's (naming swap.pinned_budget_gb), kInternal.
  Status beginStep(int32_t numLayers, int32_t prefetchLayers, int32_t freeLagLayers,
                   int64_t pinnedBudgetBytes, bool needPool);

  // Model hooks, in this order per step (layer l in [0, numLayers)):
  //   beginLayerForward(l); <layer l's forward>; endLayerForward(l, planned units) for l = 0..L-1;
  //   endForward(); then for l = L-1..0: beginLayerBackward(l); <backward>; endLayerBackward(l).
  // `slots` point into the model's saved activations, which must stay where they are until the
  // step ends (finishStep) or abortStep. Errors: kResourceExhausted (a reload's allocation),
  // kInternal (CUDA). A full pinned pool is no error: the unit stays on the device (counted).
  Status beginLayerForward(int32_t layer);
  Status endLayerForward(int32_t layer, const std::vector<SwapSlots>& slots);
  Status endForward();
  Status beginLayerBackward(int32_t layer);
  Status endLayerBackward(int32_t layer);

  // Recompute instead of keeping: dropForRecompute(l, slots) right after endLayerForward(l)
  // releases the slots' tensors to the allocator at once (compute-stream order: nothing else
  // reads them) and counts their blocks in the allocator's shadow (the peak without swap);
  // beginRecompute(l) inside layer l's backward, before the model allocates them again, takes
  // them out of the shadow and records the start; endRecompute(l) after the recompute launch
  // records its end (the report's layerRecomputeMs). Errors: kInternal (CUDA).
  Status dropForRecompute(int32_t layer, const std::vector<SwapSlots>& slots);
  Status beginRecompute(int32_t layer);
  Status endRecompute(int32_t layer);

  // After the step's final synchronisation: the copies' events, the watermarks from `allocator`
  // (real peak, and the shadow peak as the peak without swap) and the layer times; the tier is
  // then ready for the next beginStep. Errors: kInternal (CUDA), kFailedPrecondition when a unit
  // was never reloaded (a hook missing).
  Result<SwapTierStepReport> finishStep(int64_t step, int32_t rank);

  // A step that failed (or activations dropped): waits for both copy streams, releases what is
  // pending, forgets the units and zeroes the shadow. Call before the model frees the slots'
  // tensors. No-op when nothing is in flight.
  void abortStep();

  const PinnedHostPool& pool() const { return m_pool; }

 private:
  struct Unit;
  struct Layer;

  explicit SwapTierCuda(CudaContext& context);
  Result<cudaEvent_t> record(cudaStream_t stream);
  Status offloadUnit(int32_t layer, const SwapSlots& slots);
  Status releaseDone();
  Status releaseWithWait(int32_t layer);
  void releaseUnit(Unit& unit);
  Status reloadLayer(int32_t layer);
  Status reloadUnit(Unit& unit);
  Result<int64_t> eventNs(cudaEvent_t event) const;
  Status buildReport(int64_t step, int32_t rank, SwapTierStepReport& report);

  CudaContext& m_context;
  cudaStream_t m_d2h = nullptr;
  cudaStream_t m_h2d = nullptr;
  PinnedHostPool m_pool;
  std::vector<cudaEvent_t> m_events;  // pool; m_eventsUsed of them belong to this step
  size_t m_eventsUsed = 0;
  cudaEvent_t m_anchor = nullptr;
  int64_t m_anchorNs = 0;
  int32_t m_prefetchLayers = 1;
  int32_t m_freeLagLayers = 1;
  std::vector<Layer> m_layers;        // [L]
  std::vector<Unit> m_units;          // forward (offload) order
  std::vector<int32_t> m_reloadOrder; // indices into m_units, H2D issue order
  cudaEvent_t m_lastOffEnd = nullptr; // the step's last D2H event
  bool m_h2dWaitedOffloads = false;
  int64_t m_shadowBytes = 0;          // this tier's share of the allocator's shadow
  int32_t m_keptPoolFull = 0;
  int32_t m_keptAbsent = 0;
  struct OffloadWait {
    int32_t layer = 0;             // the layer whose last D2H the compute stream waited for
    cudaEvent_t before = nullptr;  // compute stream, before the wait
    cudaEvent_t after = nullptr;   // compute stream, after it
  };
  std::vector<OffloadWait> m_offloadWaits;
};

}  // namespace moewb::engine::cuda
