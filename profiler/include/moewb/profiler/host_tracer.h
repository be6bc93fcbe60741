// HostTracer: the EventSink that turns the engine's host events into trace-store rows.
//
// It owns the per-run bookkeeping (run id, the trainer-thread track, the counter track) and maps
// each event to rows: a "step" slice (depth 0) and a step row per StepEvent, phase slices with
// the depth from phaseDepth(), one expert_load row per (layer, expert), counter rows; in parallel
// runs a "collective" slice on the rank's comm track plus a collective row per collective, and
// a2a_traffic rows per EP all-to-all; per device allocation or free one memory_event row on the
// event's rank's "device memory" track (kind "memory", created at its first event). Costs on
// the engine thread: one row copy into the writer's queue per event; no I/O.
// Thread-safety: the sink methods are called from the training thread only.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/engine/event_sink.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler {

class HostTracer final : public engine::EventSink {
 public:
  // `writer` must outlive the tracer. `rank` tags every row. With a `leader` (the tracer of rank
  // 0 of the same parallel run, which must get onRunStart first), this tracer adds no run row of
  // its own: its steps belong to the leader's run, and onRunEnd leaves the run to the leader.
  explicit HostTracer(storage::TraceWriter* writer, int32_t rank = 0,
                      const HostTracer* leader = nullptr);

  void onRunStart(const engine::RunStartEvent& event) override;
  void onPhase(const engine::PhaseEvent& event) override;
  void onExpertLoad(const engine::ExpertLoadEvent& event) override;
  void onCounter(const engine::CounterEvent& event) override;
  void onStep(const engine::StepEvent& event) override;
  void onMemory(const engine::MemoryEvent& event) override;
  void onConfigChange(const engine::ConfigChangeEvent& event) override;
  void onCollective(const engine::CollectiveEvent& event) override;
  void onA2aTraffic(const engine::A2aTrafficEvent& event) override;
  void onRunEnd(const engine::RunEndEvent& event) override;

  RunId runId() const { return m_run; }

 private:
  TrackId counterTrack();
  // The "device memory" track of `rank` (the event's rank; normally this tracer's), created on
  // first use.
  TrackId memoryTrack(int32_t rank);

  storage::TraceWriter* m_writer;
  int32_t m_rank;
  const HostTracer* m_leader;
  RunId m_run;
  TrackId m_comm;
  TrackId m_thread;
  TrackId m_counters;
  std::vector<std::pair<int32_t, TrackId>> m_memoryTracks;  // (rank, track); usually one
};

}  // namespace moewb::profiler
