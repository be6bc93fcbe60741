// StepRowBatch / RowPump: a step's host events as compact records, written by a helper thread
// (see host_trace_batch.h).
#include "host_trace_batch.h"

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

}  // namespace moewb::profiler::detail
