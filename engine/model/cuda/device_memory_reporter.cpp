// Device-memory events from the caching allocator (see device_memory_reporter.h).
#include "model/cuda/device_memory_reporter.h"

#include "moewb/base/units.h"

namespace moewb::engine::cuda {

void DeviceMemoryReporter::start(CudaContext& context, EventSink* sink, int32_t rank,
                                 int64_t step) {
  m_context = &context;
  m_sink = sink;
  m_rank = rank;
  const AllocatorStats stats = context.allocator().stats();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    if (stats.inUseBytes[size_t(c)] == 0) continue;
    MemoryEvent event;
    event.tsNs = steadyNowNs();
    event.step = step;
    event.rank = rank;
    event.bytes = stats.inUseBytes[size_t(c)];
    event.category = memoryCategoryName(MemoryCategory(c));
    event.categoryInUseBytes = event.bytes;
    sink->onMemory(event);
  }
  context.allocator().setRecording(true);
}

void DeviceMemoryReporter::emit(int64_t step) {
  if (m_context == nullptr) return;
  m_context->allocator().takeEvents(m_events);
  MemoryEvent event;
  event.step = step;
  event.rank = m_rank;
  for (const DeviceMemoryEvent& e : m_events) {
    event.tsNs = e.tsNs;
    event.isAllocation = e.isAllocation;
    event.bytes = e.bytes;
    event.address = uint64_t(e.address);
    event.category = memoryCategoryName(e.category);
    event.categoryInUseBytes = e.categoryInUseBytes;
    m_sink->onMemory(event);
  }
}

void DeviceMemoryReporter::stop() {
  if (m_context == nullptr) return;
  m_context->allocator().setRecording(false);
  m_context = nullptr;
}

}  // namespace moewb::engine::cuda
