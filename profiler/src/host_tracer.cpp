// HostTracer: engine events -> trace-store rows (see host_tracer.h). One row copy per event.
#include "moewb/profiler/host_tracer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <string>

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
    : m_writer(writer), m_rank(rank), m_leader(leader) {}

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

  storage::TrackRow thread;
  thread.name = "trainer thread";
  thread.kind = "thread";
  thread.rank = m_rank;
  thread.threadId = int64_t(syscall(SYS_gettid));
  m_thread = m_writer->addTrack(thread);
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
  storage::SliceRow slice;
  slice.track = m_thread;
  slice.startNs = event.startNs;
  slice.durNs = event.endNs - event.startNs;
  slice.name = engine::phaseSliceName(event.phase, event.pass);
  slice.category = storage::kCategoryPhase;
  slice.step = event.step;
  slice.layer = event.layer;
  slice.depth = engine::phaseDepth(event.phase);
  m_writer->addSlice(slice);
}

void HostTracer::onExpertLoad(const engine::ExpertLoadEvent& event) {
  for (size_t e = 0; e < event.tokensPerExpert.size(); ++e) {
    storage::ExpertLoadRow row;
    row.step = event.step;
    row.layer = event.layer;
    row.expert = int32_t(e);
    row.rank = event.rank;
    row.tokens = event.tokensPerExpert[e];
    row.dropped = e < event.droppedPerExpert.size() ? event.droppedPerExpert[e] : 0;
    row.bias = e < event.biasPerExpert.size() ? event.biasPerExpert[e] : 0.0;
    m_writer->addExpertLoad(row);
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
  storage::CounterRow row;
  row.track = counterTrack();
  row.name = event.name;
  row.tsNs = event.tsNs;
  row.value = event.value;
  m_writer->addCounter(row);
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

// Runs on the allocator's hot path: one row copy into the writer's queue, no I/O.
void HostTracer::onMemory(const engine::MemoryEvent& event) {
  storage::MemoryEventRow row;
  row.track = memoryTrack(event.rank);
  row.tsNs = event.tsNs;
  row.step = event.step;
  row.isAllocation = event.isAllocation;
  row.bytes = event.bytes;
  row.address = int64_t(event.address);
  row.category = event.category;
  row.inUseBytes = event.categoryInUseBytes;
  m_writer->addMemoryEvent(row);
}

void HostTracer::onStep(const engine::StepEvent& event) {
  storage::SliceRow slice;
  slice.track = m_thread;
  slice.startNs = event.startNs;
  slice.durNs = event.endNs - event.startNs;
  slice.name = "step";
  slice.category = storage::kCategoryStep;
  slice.step = event.step;
  slice.depth = 0;
  m_writer->addSlice(slice);

  storage::StepRow row;
  row.run = m_run;
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

void HostTracer::onRunEnd(const engine::RunEndEvent& event) {
  if (m_leader != nullptr) return;  // the leader finishes the shared run
  m_writer->finishRun(m_run, outcomeName(event.outcome), event.message, event.endNs);
}

}  // namespace moewb::profiler
