// HostTracer: engine events -> trace-store rows (see host_tracer.h). A step's events become
// compact records on the engine thread; the RowPump (host_trace_batch.h) writes their rows.
#include "moewb/profiler/host_tracer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "host_trace_batch.h"
#include "moewb/base/units.h"

namespace moewb::profiler {

namespace {
const char* outcomeName(engine::RunOutcome outcome) {
  switch (outcome) {
    case engine::RunOutcome::kCompleted: return "completed";
    case engine::RunOutcome::kStopped: return "stopped";
    case engine::RunOutcome::kFailed: return "failed";
  }
  return "failed";
}
}  // namespace

HostTracer::HostTracer(storage::TraceWriter* writer, int32_t rank, const HostTracer* leader)
    : m_writer(writer),
      m_rank(rank),
      m_leader(leader),
      m_batch(std::make_unique<detail::StepRowBatch>()),
      m_pump(std::make_unique<detail::RowPump>(writer)) {}

HostTracer::~HostTracer() {
  if (!m_batch->empty()) m_pump->submit(m_batch);
  m_pump->drain();
}

void HostTracer::onRunStart(const engine::RunStartEvent& event) {
  storage::RunRow run;
  run.name = event.name;
  run.configToml = event.configToml;
  run.backend = event.backend;
  run.worldSize = event.worldSize;
  run.startNs = event.startNs;
  run.startUnixNs = unixNowNs();
  run.status = "running";
  m_run = m_leader != nullptr ? m_leader->runId() : m_writer->addRun(run);
  if (m_leader == nullptr) {  // the run's provenance, once per trace (moewb info prints it)
    if (!event.device.empty()) m_writer->setMeta("device", event.device);
    if (!event.startup.empty()) m_writer->setMeta("startup", engine::describeStartup(event.startup));
  }

  storage::TrackRow thread;
  thread.name = "trainer thread";
  thread.kind = "thread";
  thread.rank = m_rank;
  thread.threadId = int64_t(syscall(SYS_gettid));
  m_thread = m_writer->addTrack(thread);
  m_batch->thread = m_thread;
  m_batch->run = m_run;
  if (event.worldSize > 1) {
    storage::TrackRow comm;
    comm.name = "collectives";
    comm.kind = "comm";
    comm.rank = m_rank;
    comm.threadId = thread.threadId;
    m_comm = m_writer->addTrack(comm);
  }
}

void HostTracer::onPhase(const engine::PhaseEvent& event) {
  m_batch->phases.push_back(
      {event.step, event.startNs, event.endNs, event.layer, event.phase, event.pass});
}

void HostTracer::onExpertLoad(const engine::ExpertLoadEvent& event) {
  detail::StepRowBatch& b = *m_batch;
  const size_t count = event.tokensPerExpert.size();
  b.loads.push_back({event.step, event.layer, event.rank, b.tokens.size(), count});
  b.tokens.insert(b.tokens.end(), event.tokensPerExpert.begin(), event.tokensPerExpert.end());
  for (size_t e = 0; e < count; ++e) {
    b.dropped.push_back(e < event.droppedPerExpert.size() ? event.droppedPerExpert[e] : 0);
    b.bias.push_back(e < event.biasPerExpert.size() ? event.biasPerExpert[e] : 0.0);
  }
}

TrackId HostTracer::counterTrack() {
  if (!m_counters.isValid()) {
    storage::TrackRow track;
    track.name = "counters";
    track.kind = "counter";
    track.rank = m_rank;
    m_counters = m_writer->addTrack(track);
  }
  return m_counters;
}

void HostTracer::onCounter(const engine::CounterEvent& event) {
  m_batch->counterTrack = counterTrack();
  m_batch->addCounter(event);
}

TrackId HostTracer::memoryTrack(int32_t rank) {
  for (const auto& [r, track] : m_memoryTracks) {
    if (r == rank) return track;
  }
  storage::TrackRow track;
  track.name = "device memory";
  track.kind = storage::kTrackKindMemory;
  track.rank = rank;
  track.threadId = 0;  // device ordinal within the rank's process: one device per rank
  m_memoryTracks.emplace_back(rank, m_writer->addTrack(track));
  return m_memoryTracks.back().second;
}

int32_t HostTracer::categoryIndex(const std::string& category) {
  for (size_t i = 0; i < m_categories.size(); ++i) {
    if (m_categories[i] == category) return int32_t(i);
  }
  m_categories.push_back(category);
  m_batch->newCategories.push_back(category);
  return int32_t(m_categories.size() - 1);
}

// The hot path of device-memory events: one compact record appended, no row, no lock.
void HostTracer::onMemory(const engine::MemoryEvent& event) {
  if (!m_memoryEvents) return;
  detail::MemoryRecord record;
  record.tsNs = event.tsNs;
  record.step = event.step;
  record.bytes = event.bytes;
  record.address = int64_t(event.address);
  record.inUseBytes = event.categoryInUseBytes;
  record.track = memoryTrack(event.rank);
  record.category = categoryIndex(event.category);
  record.isAllocation = event.isAllocation;
  m_batch->memory.push_back(record);
}

// Hands the step's events to the pump, which queues their rows and then the step's own.
void HostTracer::onStep(const engine::StepEvent& event) {
  m_batch->hasStep = true;
  m_batch->step = event;
  m_pump->submit(m_batch);
}

void HostTracer::onConfigChange(const engine::ConfigChangeEvent& event) {
  storage::ConfigChangeRow row;
  row.step = event.step;
  row.tsNs = event.tsNs;
  row.key = event.key;
  row.oldValue = event.oldValue;
  row.newValue = event.newValue;
  row.source = event.source;
  m_writer->addConfigChange(m_run, row);
}

void HostTracer::onCollective(const engine::CollectiveEvent& event) {
  if (!m_comm.isValid()) return;
  storage::SliceRow slice;
  slice.track = m_comm;
  slice.startNs = event.startNs;
  slice.durNs = event.endNs - event.startNs;
  slice.name = event.op;
  slice.category = storage::kCategoryCollective;
  slice.step = event.step;
  slice.layer = event.layer;
  slice.correlationId = int64_t(event.seq);
  m_writer->addSlice(slice);
  storage::CollectiveRow row;
  row.track = m_comm;
  row.startNs = slice.startNs;
  row.durNs = slice.durNs;
  row.step = event.step;
  row.layer = event.layer;
  row.rank = event.rank;
  row.op = event.op;
  row.commGroup = event.group;
  row.phase = event.phase;
  row.seq = int64_t(event.seq);
  row.bytesSent = event.bytesSent;
  row.bytesReceived = event.bytesReceived;
  for (int32_t peer : event.peers) {
    if (!row.peers.empty()) row.peers.push_back(',');
    row.peers.append(std::to_string(peer));
  }
  row.ok = event.ok;
  m_writer->addCollective(row);
}

void HostTracer::onA2aTraffic(const engine::A2aTrafficEvent& event) {
  for (size_t j = 0; j < event.dstRanks.size() && j < event.bytes.size(); ++j) {
    storage::A2aTrafficRow row;
    row.step = event.step;
    row.layer = event.layer;
    row.srcRank = event.srcRank;
    row.dstRank = event.dstRanks[j];
    row.bytes = event.bytes[j];
    row.phase = event.phase;
    m_writer->addA2aTraffic(row);
  }
}

// Swap events ride in the step's batch, so they are committed with their step. A copy is one
// append (its op string reuses kept storage); plans copy their profile (rare).
void HostTracer::onSwapPlan(const engine::SwapPlanEvent& event) {
  m_batch->swapPlans.push_back(event);
}

void HostTracer::onSwap(const engine::SwapEvent& event) {
  m_batch->addSwap(event);
}

void HostTracer::onSwapStep(const engine::SwapStepEvent& event) {
  m_batch->swapSteps.push_back(event);
}

void HostTracer::onRunEnd(const engine::RunEndEvent& event) {
  if (!m_batch->empty()) m_pump->submit(m_batch);
  m_pump->drain();  // every row of the run is queued before the run is finished
  if (m_leader != nullptr) return;  // the leader finishes the shared run
  m_writer->finishRun(m_run, outcomeName(event.outcome), event.message, event.endNs);
}

}  // namespace moewb::profiler
