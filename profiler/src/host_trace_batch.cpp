// StepRowBatch / RowPump: a step's host events as compact records, written by a helper thread
// (see host_trace_batch.h).
#include "host_trace_batch.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace moewb::profiler::detail {

void StepRowBatch::clear() {
  phases.clear();
  memory.clear();
  newCategories.clear();
  loads.clear();
  tokens.clear();
  dropped.clear();
  bias.clear();
  counterCount = 0;
  swapCount = 0;
  swapPlans.clear();
  swapSteps.clear();
  hasStep = false;
}

void StepRowBatch::addCounter(const engine::CounterEvent& event) {
  if (counterCount < counters.size()) {
    engine::CounterEvent& kept = counters[counterCount];
    kept.name.assign(event.name);
    kept.tsNs = event.tsNs;
    kept.value = event.value;
  } else {
    counters.push_back(event);
  }
  ++counterCount;
}

void StepRowBatch::addSwap(const engine::SwapEvent& event) {
  if (swapCount < swaps.size()) {
    engine::SwapEvent& kept = swaps[swapCount];
    kept.step = event.step;
    kept.rank = event.rank;
    kept.layer = event.layer;
    kept.op.assign(event.op);
    kept.bytes = event.bytes;
    kept.toHost = event.toHost;
    kept.startNs = event.startNs;
    kept.endNs = event.endNs;
    kept.neededNs = event.neededNs;
    kept.stallNs = event.stallNs;
    kept.simulated = event.simulated;
  } else {
    swaps.push_back(event);
  }
  ++swapCount;
}

namespace {

// The stored form of a plan: the profile's per-tensor vectors zipped into rows (a shorter
// vector reads as defaults past its end).
storage::SwapPlanRow planRow(const engine::SwapPlanEvent& e) {
  storage::SwapPlanRow row;
  row.step = e.step;
  row.rank = e.rank;
  row.mode = e.mode;
  row.hbmTargetBytes = e.hbmTargetBytes;
  row.pinnedBudgetBytes = e.pinnedBudgetBytes;
  row.prefetchLayers = e.prefetchLayers;
  row.freeLagLayers = e.freeLagLayers;
  row.ops = e.ops;
  row.minBytes = e.minBytes;
  row.recomputeOps = e.recomputeOps;
  row.d2hGbps = e.d2hGbps;
  row.h2dGbps = e.h2dGbps;
  row.bidirGbps = e.bidirGbps;
  row.fixedBytes = e.fixedBytes;
  row.turnMs = e.turnMs;
  row.layerForwardMs = e.layerForwardMs;
  row.layerBackwardMs = e.layerBackwardMs;
  row.layerOtherBytes = e.layerOtherBytes;
  row.layerRecomputeMs = e.layerRecomputeMs;
  if (!e.layerRecomputeMs.empty()) {
    row.recomputeMsSource = e.recomputeMsMeasured ? "measured" : "estimate";
  }
  const size_t tensors = std::max({e.tensorLayer.size(), e.tensorOp.size(), e.tensorBytes.size(),
                                   e.tensorSwapped.size(), e.tensorReason.size()});
  row.tensors.resize(tensors);
  for (size_t i = 0; i < tensors; ++i) {
    storage::SwapPlanTensorRow& t = row.tensors[i];
    if (i < e.tensorLayer.size()) t.layer = e.tensorLayer[i];
    if (i < e.tensorOp.size()) t.op = e.tensorOp[i];
    if (i < e.tensorBytes.size()) t.bytes = e.tensorBytes[i];
    if (i < e.tensorSwapped.size()) t.swapped = e.tensorSwapped[i];
    if (i < e.tensorRecomputed.size()) t.recomputed = e.tensorRecomputed[i];
    if (i < e.tensorReason.size()) t.reason = e.tensorReason[i];
  }
  row.predictedPeakBytes = e.predictedPeakBytes;
  row.predictedPeakNoSwapBytes = e.predictedPeakNoSwapBytes;
  row.predictedExposedMs = e.predictedExposedMs;
  row.summary = e.summary;
  return row;
}

storage::SwapStepRow swapStepRow(const engine::SwapStepEvent& e) {
  storage::SwapStepRow row;
  row.step = e.step;
  row.rank = e.rank;
  row.hbmPeakBytes = e.hbmPeakBytes;
  row.hbmPeakNoSwapBytes = e.hbmPeakNoSwapBytes;
  row.pinnedPeakBytes = e.pinnedPeakBytes;
  row.pinnedCapacityBytes = e.pinnedCapacityBytes;
  row.offloads = e.offloads;
  row.reloads = e.reloads;
  row.lateReloads = e.lateReloads;
  row.swappedBytes = e.swappedBytes;
  row.copyMs = e.copyMs;
  row.exposedMs = e.exposedMs;
  row.simulated = e.simulated;
  return row;
}

}  // namespace

RowPump::RowPump(storage::TraceWriter* writer) : m_writer(writer) {
  m_thread = std::thread([this] { loop(); });
}

RowPump::~RowPump() {
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
  }
  m_wake.notify_one();
  m_thread.join();
}

void RowPump::submit(std::unique_ptr<StepRowBatch>& batch) {
  std::unique_ptr<StepRowBatch> next;
  {
    std::lock_guard lock(m_mutex);
    if (!m_free.empty()) {
      next = std::move(m_free.back());
      m_free.pop_back();
    }
  }
  if (!next) next = std::make_unique<StepRowBatch>();
  next->thread = batch->thread;
  next->counterTrack = batch->counterTrack;
  next->run = batch->run;
  {
    std::unique_lock lock(m_mutex);
    if (m_pending.size() >= kMaxPendingBatches) {
      const auto start = std::chrono::steady_clock::now();
      m_room.wait(lock, [&] { return m_pending.size() < kMaxPendingBatches; });
      m_writer->addBackPressureWait(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - start)
                                        .count());
    }
    m_pending.push_back(std::move(batch));
  }
  m_wake.notify_one();
  batch = std::move(next);
}

void RowPump::drain() {
  std::unique_lock lock(m_mutex);
  m_drained.wait(lock, [&] { return m_pending.empty() && !m_busy; });
}

void RowPump::loop() {
  std::unique_lock lock(m_mutex);
  while (true) {
    m_wake.wait(lock, [&] { return !m_pending.empty() || m_stopping; });
    if (m_pending.empty()) return;  // stopping, and everything is written
    std::unique_ptr<StepRowBatch> batch = std::move(m_pending.front());
    m_pending.pop_front();
    m_busy = true;
    lock.unlock();
    m_room.notify_one();
    write(*batch);
    batch->clear();
    lock.lock();
    m_free.push_back(std::move(batch));
    m_busy = false;
    if (m_pending.empty()) m_drained.notify_all();
  }
}

void RowPump::write(StepRowBatch& batch) {
  for (std::string& name : batch.newCategories) m_categories.push_back(std::move(name));
  storage::SliceRow slice;
  slice.track = batch.thread;
  slice.category = storage::kCategoryPhase;
  for (const PhaseRecord& p : batch.phases) {
    slice.startNs = p.startNs;
    slice.durNs = p.endNs - p.startNs;
    slice.name = engine::phaseSliceName(p.phase, p.pass);
    slice.step = p.step;
    slice.layer = p.layer;
    slice.depth = engine::phaseDepth(p.phase);
    m_writer->addSlice(slice);
  }
  storage::MemoryEventRow memory;
  for (const MemoryRecord& m : batch.memory) {
    memory.track = m.track;
    memory.tsNs = m.tsNs;
    memory.step = m.step;
    memory.isAllocation = m.isAllocation;
    memory.bytes = m.bytes;
    memory.address = m.address;
    memory.category = m_categories[size_t(m.category)];
    memory.inUseBytes = m.inUseBytes;
    m_writer->addMemoryEvent(memory);
  }
  for (const LoadRecord& l : batch.loads) {
    for (size_t e = 0; e < l.count; ++e) {
      storage::ExpertLoadRow row;
      row.step = l.step;
      row.layer = l.layer;
      row.expert = int32_t(e);
      row.rank = l.rank;
      row.tokens = batch.tokens[l.first + e];
      row.dropped = batch.dropped[l.first + e];
      row.bias = batch.bias[l.first + e];
      m_writer->addExpertLoad(row);
    }
  }
  for (size_t i = 0; i < batch.counterCount; ++i) {
    const engine::CounterEvent& c = batch.counters[i];
    storage::CounterRow row;
    row.track = batch.counterTrack;
    row.name = c.name;
    row.tsNs = c.tsNs;
    row.value = c.value;
    m_writer->addCounter(row);
  }
  writeSwap(batch);
  if (!batch.hasStep) return;
  const engine::StepEvent& event = batch.step;
  storage::SliceRow step;
  step.track = batch.thread;
  step.startNs = event.startNs;
  step.durNs = event.endNs - event.startNs;
  step.name = "step";
  step.category = storage::kCategoryStep;
  step.step = event.step;
  step.depth = 0;
  m_writer->addSlice(step);
  storage::StepRow row;
  row.run = batch.run;
  row.rank = event.rank;
  row.step = event.step;
  row.startNs = event.startNs;
  row.endNs = event.endNs;
  row.loss = event.loss;
  row.auxLoss = event.auxLoss;
  row.tokens = event.tokens;
  row.tokensPerSecond = event.tokensPerSecond;
  row.peakBytes = event.peakBytes;
  row.gradNorm = event.gradNorm;
  row.lr = event.lr;
  m_writer->addStep(row);  // commits the step with everything queued before it
}

void RowPump::writeSwap(const StepRowBatch& batch) {
  for (const engine::SwapPlanEvent& plan : batch.swapPlans) {
    m_writer->addSwapPlan(batch.run, planRow(plan));
  }
  storage::SwapEventRow row;
  for (size_t i = 0; i < batch.swapCount; ++i) {
    const engine::SwapEvent& e = batch.swaps[i];
    row.step = e.step;
    row.rank = e.rank;
    row.layer = e.layer;
    row.op = e.op;
    row.bytes = e.bytes;
    row.toHost = e.toHost;
    row.startNs = e.startNs;
    row.endNs = e.endNs;
    row.neededNs = e.neededNs;
    row.stallNs = e.stallNs;
    row.simulated = e.simulated;
    m_writer->addSwapEvent(batch.run, row);
  }
  for (const engine::SwapStepEvent& step : batch.swapSteps) {
    m_writer->addSwapStep(batch.run, swapStepRow(step));
  }
}

}  // namespace moewb::profiler::detail
