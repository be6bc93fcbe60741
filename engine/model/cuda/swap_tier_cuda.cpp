// SwapTierCuda: offload, release, reload and consume of swapped activations on two copy streams
// (see swap_tier_cuda.h for the ordering rules this file implements).
#include "model/cuda/swap_tier_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "moewb/base/units.h"
#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {

struct SwapTierCuda::Unit {
  int32_t layer = 0;
  SwapOp op = SwapOp::kAttnNorm;
  int count = 0;                                   // tensors (1, or 2 for moe_act)
  std::array<DeviceTensor<bf16>*, 2> slots{};      // the model's tensors
  std::array<DeviceTensor<bf16>, 2> pending;       // originals until their D2H is done
  std::array<std::vector<int64_t>, 2> shapes;
  std::array<MemoryCategory, 2> categories{};
  std::array<int64_t, 2> bytes{};                  // tensor bytes
  std::array<int64_t, 2> blockBytes{};             // the originals' allocator blocks
  char* host = nullptr;                            // pinned slot (tensors at 256-B offsets)
  cudaEvent_t offStart = nullptr, offEnd = nullptr, reStart = nullptr, reEnd = nullptr;
  bool released = false;
  bool reloaded = false;

  int64_t totalBytes() const { return bytes[0] + bytes[1]; }
};

struct SwapTierCuda::Layer {
  cudaEvent_t fwdStart = nullptr, fwdEnd = nullptr;
  cudaEvent_t needed = nullptr, bwdBegin = nullptr, bwdEnd = nullptr;
  std::vector<int32_t> units;          // indices into m_units
  cudaEvent_t lastOffEnd = nullptr;
  cudaEvent_t lastReEnd = nullptr;
  bool d2hWaited = false;              // the D2H stream waits on fwdEnd
  bool reloadsIssued = false;
  int64_t droppedBytes = 0;            // blocks released by dropForRecompute (in the shadow)
  cudaEvent_t recomputeStart = nullptr, recomputeEnd = nullptr;
};

SwapTierCuda::SwapTierCuda(CudaContext& context) : m_context(context) {}

Result<std::unique_ptr<SwapTierCuda>> SwapTierCuda::create(CudaContext& context) {
  std::unique_ptr<SwapTierCuda> tier(new SwapTierCuda(context));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&tier->m_d2h, cudaStreamNonBlocking));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&tier->m_h2d, cudaStreamNonBlocking));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&tier->m_anchor));
  return tier;
}

SwapTierCuda::~SwapTierCuda() {
  abortStep();
  if (m_d2h != nullptr) cudaStreamSynchronize(m_d2h);
  if (m_h2d != nullptr) cudaStreamSynchronize(m_h2d);
  m_units.clear();
  for (cudaEvent_t event : m_events) cudaEventDestroy(event);
  if (m_anchor != nullptr) cudaEventDestroy(m_anchor);
  if (m_d2h != nullptr) cudaStreamDestroy(m_d2h);
  if (m_h2d != nullptr) cudaStreamDestroy(m_h2d);
}

Result<cudaEvent_t> SwapTierCuda::record(cudaStream_t stream) {
  if (m_eventsUsed == m_events.size()) {
    cudaEvent_t event = nullptr;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
    m_events.push_back(event);
  }
  cudaEvent_t event = m_events[m_eventsUsed++];
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream));
  return event;
}

Status SwapTierCuda::beginStep(int32_t numLayers, int32_t prefetchLayers, int32_t freeLagLayers,
                               int64_t pinnedBudgetBytes, bool needPool) {
  abortStep();
  m_eventsUsed = 0;
  m_layers.assign(size_t(std::max(0, numLayers)), Layer{});
  m_units.clear();
  m_reloadOrder.clear();
  m_offloadWaits.clear();
  m_lastOffEnd = nullptr;
  m_h2dWaitedOffloads = false;
  m_keptPoolFull = 0;
  m_keptAbsent = 0;
  m_prefetchLayers = std::max(0, prefetchLayers);
  m_freeLagLayers = std::max(0, freeLagLayers);
  if (needPool) MOEWB_RETURN_IF_ERROR(m_pool.reserve(pinnedBudgetBytes));
  m_pool.beginStep();
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_context.stream()));
  m_anchorNs = steadyNowNs();
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(m_anchor, m_context.stream()));
  return Status::ok();
}

Status SwapTierCuda::beginLayerForward(int32_t layer) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  MOEWB_ASSIGN_OR_RETURN(m_layers[size_t(layer)].fwdStart, record(m_context.stream()));
  return Status::ok();
}

Status SwapTierCuda::endLayerForward(int32_t layer, const std::vector<SwapSlots>& slots) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  MOEWB_ASSIGN_OR_RETURN(m_layers[size_t(layer)].fwdEnd, record(m_context.stream()));
  for (const SwapSlots& unit : slots) MOEWB_RETURN_IF_ERROR(offloadUnit(layer, unit));
  MOEWB_RETURN_IF_ERROR(releaseDone());
  return layer >= m_freeLagLayers ? releaseWithWait(layer - m_freeLagLayers) : Status::ok();
}

// D2H of one unit into one pinned slot, after the layer's forward; the model's tensors move into
// the unit (pending) until the copy is done.
Status SwapTierCuda::offloadUnit(int32_t layer, const SwapSlots& slots) {
  Unit unit;
  unit.layer = layer;
  unit.op = slots.op;
  int64_t slotBytes = 0;
  for (DeviceTensor<bf16>* tensor : slots.tensors) {
    if (tensor == nullptr || tensor->empty()) continue;
    unit.slots[size_t(unit.count)] = tensor;
    unit.bytes[size_t(unit.count)] = tensor->bytes();
    slotBytes += pinnedSlotBytes(tensor->bytes());
    ++unit.count;
  }
  if (unit.count == 0) {  // e.g. expert_fc1 with fusion.permute_into_experts
    ++m_keptAbsent;
    return Status::ok();
  }
  Result<void*> host = m_pool.take(slotBytes);
  if (!host.isOk()) {
    if (host.status().code() != StatusCode::kResourceExhausted) return host.status();
    ++m_keptPoolFull;  // the tensor stays on the device; the step runs on
    return Status::ok();
  }
  unit.host = static_cast<char*>(host.value());
  Layer& l = m_layers[size_t(layer)];
  if (!l.d2hWaited) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m_d2h, l.fwdEnd, 0));
    l.d2hWaited = true;
  }
  MOEWB_ASSIGN_OR_RETURN(unit.offStart, record(m_d2h));
  int64_t offset = 0;
  for (int i = 0; i < unit.count; ++i) {
    const DeviceTensor<bf16>& tensor = *unit.slots[size_t(i)];
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(unit.host + offset, tensor.data(),
                                               size_t(tensor.bytes()), cudaMemcpyDeviceToHost,
                                               m_d2h));
    offset += pinnedSlotBytes(tensor.bytes());
  }
  MOEWB_ASSIGN_OR_RETURN(unit.offEnd, record(m_d2h));
  for (int i = 0; i < unit.count; ++i) {
    DeviceTensor<bf16>& tensor = *unit.slots[size_t(i)];
    unit.shapes[size_t(i)] = tensor.shape();
    unit.categories[size_t(i)] = tensor.category();
    unit.blockBytes[size_t(i)] = m_context.allocator().blockBytes(tensor.data());
    unit.pending[size_t(i)] = std::move(tensor);  // the model's slot is empty now
  }
  m_lastOffEnd = unit.offEnd;
  l.lastOffEnd = unit.offEnd;
  l.units.push_back(int32_t(m_units.size()));
  m_units.push_back(std::move(unit));
  return Status::ok();
}

void SwapTierCuda::releaseUnit(Unit& unit) {
  if (unit.released) return;
  for (int i = 0; i < unit.count; ++i) {
    unit.pending[size_t(i)] = DeviceTensor<bf16>();  // back to the allocator
    m_context.allocator().addShadowBytes(unit.blockBytes[size_t(i)]);
    m_shadowBytes += unit.blockBytes[size_t(i)];
  }
  unit.released = true;
}

// Releases the pending tensors whose D2H is done, in copy order (one stream: the first copy not
// done ends the scan).
Status SwapTierCuda::releaseDone() {
  for (Unit& unit : m_units) {
    if (unit.released) continue;
    const cudaError_t state = cudaEventQuery(unit.offEnd);
    if (state == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is an answer, not an error to report later
      return Status::ok();
    }
    MOEWB_CUDA_RETURN_IF_ERROR(state);
    releaseUnit(unit);
  }
  return Status::ok();
}

// At the end of layer layer + freeLagLayers's forward (or of the forward): the compute stream
// waits for layer `layer`'s last D2H and its pending tensors are released now (their blocks'
// next users queue behind the wait).
Status SwapTierCuda::releaseWithWait(int32_t layer) {
  const Layer& l = m_layers[size_t(layer)];
  bool pending = false;
  for (int32_t index : l.units) pending = pending || !m_units[size_t(index)].released;
  if (!pending) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(cudaEvent_t before, record(m_context.stream()));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m_context.stream(), l.lastOffEnd, 0));
  MOEWB_ASSIGN_OR_RETURN(cudaEvent_t after, record(m_context.stream()));
  m_offloadWaits.push_back({layer, before, after});
  // Every unit up to this layer's last one was copied before it (one D2H stream, in order).
  for (Unit& unit : m_units) {
    if (unit.layer <= layer) releaseUnit(unit);
  }
  return Status::ok();
}

Status SwapTierCuda::endForward() {
  MOEWB_RETURN_IF_ERROR(releaseDone());
  const int32_t layers = int32_t(m_layers.size());
  // Layers whose free point is past the last layer (l + lag > L - 1): one wait, before the turn,
  // for the last of them that still has a pending unit (it covers the earlier ones).
  for (int32_t l = layers - 1; l >= std::max(0, layers - m_freeLagLayers); --l) {
    bool pending = false;
    for (int32_t index : m_layers[size_t(l)].units) {
      pending = pending || !m_units[size_t(index)].released;
    }
    if (pending) {
      MOEWB_RETURN_IF_ERROR(releaseWithWait(l));
      break;
    }
  }
  for (int32_t l = layers - 1; l >= std::max(0, layers - m_prefetchLayers); --l) {
    MOEWB_RETURN_IF_ERROR(reloadLayer(l));
  }
  return Status::ok();
}

// New tensors for every unit of `layer` (compute-stream order), then their H2D copies once the
// compute stream has reached the allocation and every offload of the step is done.
Status SwapTierCuda::reloadLayer(int32_t layer) {
  Layer& l = m_layers[size_t(layer)];
  if (l.reloadsIssued) return Status::ok();
  l.reloadsIssued = true;
  if (l.units.empty()) return Status::ok();
  for (int32_t index : l.units) {
    Unit& unit = m_units[size_t(index)];
    for (int i = 0; i < unit.count; ++i) {
      // The shadow drops first, so in use + shadow never counts the tensor twice.
      m_context.allocator().addShadowBytes(-unit.blockBytes[size_t(i)]);
      m_shadowBytes -= unit.blockBytes[size_t(i)];
      MOEWB_ASSIGN_OR_RETURN(*unit.slots[size_t(i)],
                             DeviceTensor<bf16>::create(m_context.allocator(),
                                                        unit.shapes[size_t(i)],
                                                        unit.categories[size_t(i)]));
    }
  }
  MOEWB_ASSIGN_OR_RETURN(cudaEvent_t allocated, record(m_context.stream()));
  if (!m_h2dWaitedOffloads && m_lastOffEnd != nullptr) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m_h2d, m_lastOffEnd, 0));
    m_h2dWaitedOffloads = true;
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m_h2d, allocated, 0));
  for (int32_t index : l.units) {
    MOEWB_RETURN_IF_ERROR(reloadUnit(m_units[size_t(index)]));
    l.lastReEnd = m_units[size_t(index)].reEnd;
    m_reloadOrder.push_back(index);
  }
  return Status::ok();
}

Status SwapTierCuda::reloadUnit(Unit& unit) {
  MOEWB_ASSIGN_OR_RETURN(unit.reStart, record(m_h2d));
  int64_t offset = 0;
  for (int i = 0; i < unit.count; ++i) {
    DeviceTensor<bf16>& tensor = *unit.slots[size_t(i)];
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tensor.data(), unit.host + offset,
                                               size_t(tensor.bytes()), cudaMemcpyHostToDevice,
                                               m_h2d));
    offset += pinnedSlotBytes(tensor.bytes());
  }
  MOEWB_ASSIGN_OR_RETURN(unit.reEnd, record(m_h2d));
  unit.reloaded = true;
  return Status::ok();
}

Status SwapTierCuda::beginLayerBackward(int32_t layer) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  MOEWB_RETURN_IF_ERROR(releaseDone());
  MOEWB_RETURN_IF_ERROR(reloadLayer(layer));
  if (m_prefetchLayers > 0 && layer - m_prefetchLayers >= 0) {
    MOEWB_RETURN_IF_ERROR(reloadLayer(layer - m_prefetchLayers));
  }
  Layer& l = m_layers[size_t(layer)];
  MOEWB_ASSIGN_OR_RETURN(l.needed, record(m_context.stream()));
  if (l.lastReEnd != nullptr) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m_context.stream(), l.lastReEnd, 0));
  }
  MOEWB_ASSIGN_OR_RETURN(l.bwdBegin, record(m_context.stream()));
  return Status::ok();
}

Status SwapTierCuda::endLayerBackward(int32_t layer) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  MOEWB_ASSIGN_OR_RETURN(m_layers[size_t(layer)].bwdEnd, record(m_context.stream()));
  return releaseDone();
}

void SwapTierCuda::abortStep() {
  if (m_units.empty() && m_shadowBytes == 0) return;
  cudaStreamSynchronize(m_d2h);
  cudaStreamSynchronize(m_h2d);
  for (Unit& unit : m_units) {
    for (DeviceTensor<bf16>& tensor : unit.pending) tensor = DeviceTensor<bf16>();
    unit.released = true;
  }
  m_context.allocator().addShadowBytes(-m_shadowBytes);
  m_shadowBytes = 0;
  m_units.clear();
  m_reloadOrder.clear();
  for (Layer& l : m_layers) l = Layer{};
}

Status SwapTierCuda::dropForRecompute(int32_t layer, const std::vector<SwapSlots>& slots) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  Layer& l = m_layers[size_t(layer)];
  for (const SwapSlots& unit : slots) {
    for (DeviceTensor<bf16>* tensor : unit.tensors) {
      if (tensor == nullptr || tensor->empty()) continue;
      const int64_t bytes = m_context.allocator().blockBytes(tensor->data());
      *tensor = DeviceTensor<bf16>();  // back to the allocator, in compute-stream order
      m_context.allocator().addShadowBytes(bytes);
      m_shadowBytes += bytes;
      l.droppedBytes += bytes;
    }
  }
  return Status::ok();
}

Status SwapTierCuda::beginRecompute(int32_t layer) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  Layer& l = m_layers[size_t(layer)];
  // The shadow drops first, so in use + shadow never counts a tensor twice.
  m_context.allocator().addShadowBytes(-l.droppedBytes);
  m_shadowBytes -= l.droppedBytes;
  l.droppedBytes = 0;
  MOEWB_ASSIGN_OR_RETURN(l.recomputeStart, record(m_context.stream()));
  return Status::ok();
}

Status SwapTierCuda::endRecompute(int32_t layer) {
  MOEWB_CHECK(layer >= 0 && size_t(layer) < m_layers.size());
  MOEWB_ASSIGN_OR_RETURN(m_layers[size_t(layer)].recomputeEnd, record(m_context.stream()));
  return Status::ok();
}

Result<int64_t> SwapTierCuda::eventNs(cudaEvent_t event) const {
  float ms = 0;
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m_anchor, event));
  return m_anchorNs + int64_t(std::llround(double(ms) * 1e6));
}

Result<SwapTierStepReport> SwapTierCuda::finishStep(int64_t step, int32_t rank) {
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_d2h));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_h2d));
  for (Unit& unit : m_units) {
    if (!unit.reloaded) {
      const std::string what = std::string(swapOpName(unit.op)) + " of layer " +
                               std::to_string(unit.layer);
      abortStep();
      return failedPrecondition("swap: " + what +
                                " was offloaded but never reloaded (a backward hook is missing)");
    }
    releaseUnit(unit);
  }
  SwapTierStepReport report;
  MOEWB_RETURN_IF_ERROR(buildReport(step, rank, report));
  if (m_shadowBytes != 0) m_context.allocator().addShadowBytes(-m_shadowBytes);
  m_shadowBytes = 0;
  m_units.clear();
  m_reloadOrder.clear();
  return report;
}

Status SwapTierCuda::buildReport(int64_t step, int32_t rank, SwapTierStepReport& report) {
  auto ms = [&](cudaEvent_t from, cudaEvent_t to) -> Result<double> {
    if (from == nullptr || to == nullptr) return 0.0;
    float value = 0;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&value, from, to));
    return double(value);
  };
  const size_t layers = m_layers.size();
  report.layerForwardMs.assign(layers, 0.0);
  report.layerBackwardMs.assign(layers, 0.0);
  report.layerRecomputeMs.assign(layers, 0.0);
  for (size_t l = 0; l < layers; ++l) {
    MOEWB_ASSIGN_OR_RETURN(report.layerRecomputeMs[l],
                           ms(m_layers[l].recomputeStart, m_layers[l].recomputeEnd));
    MOEWB_ASSIGN_OR_RETURN(report.layerForwardMs[l], ms(m_layers[l].fwdStart, m_layers[l].fwdEnd));
    MOEWB_ASSIGN_OR_RETURN(report.layerBackwardMs[l],
                           ms(m_layers[l].bwdBegin, m_layers[l].bwdEnd));
  }
  if (layers > 0) {
    MOEWB_ASSIGN_OR_RETURN(report.turnMs, ms(m_layers.back().fwdEnd, m_layers.back().needed));
  }
  std::vector<const OffloadWait*> waitOf(layers, nullptr);
  for (const OffloadWait& wait : m_offloadWaits) {
    MOEWB_ASSIGN_OR_RETURN(double waitMs, ms(wait.before, wait.after));
    report.offloadWaitMs += waitMs;
    waitOf[size_t(wait.layer)] = &wait;
  }
  SwapStepEvent& total = report.step;
  total.step = step;
  total.rank = rank;
  auto copy = [&](const Unit& unit, bool toHost) -> Result<SwapEvent> {
    SwapEvent event;
    event.step = step;
    event.rank = rank;
    event.layer = unit.layer;
    event.op = swapOpName(unit.op);
    event.bytes = unit.totalBytes();
    event.toHost = toHost;
    MOEWB_ASSIGN_OR_RETURN(event.startNs, eventNs(toHost ? unit.offStart : unit.reStart));
    MOEWB_ASSIGN_OR_RETURN(event.endNs, eventNs(toHost ? unit.offEnd : unit.reEnd));
    total.copyMs += double(event.endNs - event.startNs) / 1e6;
    return event;
  };
  for (const Unit& unit : m_units) {
    MOEWB_ASSIGN_OR_RETURN(SwapEvent event, copy(unit, true));
    const OffloadWait* wait = waitOf[size_t(unit.layer)];
    if (wait != nullptr && m_layers[size_t(unit.layer)].lastOffEnd == unit.offEnd) {
      MOEWB_ASSIGN_OR_RETURN(event.neededNs, eventNs(wait->before));
      MOEWB_ASSIGN_OR_RETURN(int64_t afterNs, eventNs(wait->after));
      event.stallNs = std::max<int64_t>(0, afterNs - event.neededNs);
    }
    total.exposedMs += double(event.stallNs) / 1e6;
    report.events.push_back(std::move(event));
    ++total.offloads;
    total.swappedBytes += unit.totalBytes();
  }
  std::vector<int64_t> layerCoveredNs(layers, 0);  // latest reload end seen per layer
  for (int32_t index : m_reloadOrder) {
    const Unit& unit = m_units[size_t(index)];
    MOEWB_ASSIGN_OR_RETURN(SwapEvent event, copy(unit, false));
    const Layer& l = m_layers[size_t(unit.layer)];
    if (l.needed != nullptr) {
      MOEWB_ASSIGN_OR_RETURN(event.neededNs, eventNs(l.needed));
      int64_t& covered = layerCoveredNs[size_t(unit.layer)];
      covered = std::max(covered, event.neededNs);
      event.stallNs = std::max<int64_t>(0, event.endNs - covered);
      covered = std::max(covered, event.endNs);
    }
    ++total.reloads;
    total.lateReloads += event.stallNs > 0 ? 1 : 0;
    total.exposedMs += double(event.stallNs) / 1e6;
    report.events.push_back(std::move(event));
  }
  const AllocatorStats stats = m_context.allocator().stats();
  total.hbmPeakBytes = stats.totalPeakInUseBytes;
  total.hbmPeakNoSwapBytes = stats.totalPeakWithShadowBytes;
  const PinnedPoolStats pinned = m_pool.stats();
  total.pinnedPeakBytes = pinned.peakInUseBytes;
  total.pinnedCapacityBytes = pinned.capacityBytes;
  report.keptPoolFull = m_keptPoolFull;
  report.keptAbsent = m_keptAbsent;
  report.pinnedHostAllocs = pinned.hostAllocs;
  return Status::ok();
}

}  // namespace moewb::engine::cuda
