// HostTracer: the EventSink that turns the engine's host events into trace-store rows.
//
// It owns the per-run bookkeeping (run id, the trainer-thread track, the counter track) and maps
// each event to rows: a "step" slice (depth 0) and a step row per StepEvent, phase slices with
// the depth from phaseDepth(), one expert_load row per (layer, expert), counter rows; in parallel
// runs a "collective" slice on the rank's comm track plus a collective row per collective, and
// a2a_traffic rows per EP all-to-all; per device allocation or free one memory_event row on the
// event's rank's "device memory" track (kind "memory", created at its first event); per swap
// plan a swap_plan row with its layer and tensor rows, per swap copy a swap_event row, per
// swap step a swap_step row (all of this tracer's run).
// Costs on the engine thread: a step's phase, memory, expert-load, counter and swap events are
// only appended to a batch of compact records (no lock, no allocation in steady state); onStep
// hands the batch to the tracer's helper thread (one lock and one wake-up per step), which
// builds the rows and queues them on the writer, the step row last, so every step is still
// committed with its rows. Run, config-change, collective and traffic events are queued on the
// writer directly (one row copy each). onRunEnd (and the destructor) wait until the helper has
// queued everything.
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

namespace detail {
struct StepRowBatch;
class RowPump;
}  // namespace detail

class HostTracer final : public engine::EventSink {
 public:
  // `writer` must outlive the tracer. `rank` tags every row. With a `leader` (the tracer of rank
  // 0 of the same parallel run, which must get onRunStart first), this tracer adds no run row of
  // its own: its steps belong to the leader's run, and onRunEnd leaves the run to the leader.
  explicit HostTracer(storage::TraceWriter* writer, int32_t rank = 0,
                      const HostTracer* leader = nullptr);
  // Queues what is left of the current step's events and waits until the helper thread has
  // queued every row on the writer.
  ~HostTracer() override;
  HostTracer(const HostTracer&) = delete;
  HostTracer& operator=(const HostTracer&) = delete;

  void onRunStart(const engine::RunStartEvent& event) override;
  void onPhase(const engine::PhaseEvent& event) override;
  void onExpertLoad(const engine::ExpertLoadEvent& event) override;
  void onCounter(const engine::CounterEvent& event) override;
  void onStep(const engine::StepEvent& event) override;
  void onMemory(const engine::MemoryEvent& event) override;
  void onConfigChange(const engine::ConfigChangeEvent& event) override;
  void onCollective(const engine::CollectiveEvent& event) override;
  void onA2aTraffic(const engine::A2aTrafficEvent& event) override;
  void onSwapPlan(const engine::SwapPlanEvent& event) override;
  void onSwap(const engine::SwapEvent& event) override;
  void onSwapStep(const engine::SwapStepEvent& event) override;
  void onRunEnd(const engine::RunEndEvent& event) override;

  RunId runId() const { return m_run; }
  // false: onMemory drops device-memory events (no memory track, no memory_event rows). Call
  // before the run starts. Default true.
  void setMemoryEvents(bool keep) { m_memoryEvents = keep; }

 private:
  TrackId counterTrack();
  // The "device memory" track of `rank` (the event's rank; normally this tracer's), created on
  // first use.
  TrackId memoryTrack(int32_t rank);
  // Index of `category` in the batches' category list (new ones go into the current batch).
  int32_t categoryIndex(const std::string& category);

  storage::TraceWriter* m_writer;
  int32_t m_rank;
  const HostTracer* m_leader;
  bool m_memoryEvents = true;
  RunId m_run;
  TrackId m_comm;
  TrackId m_thread;
  TrackId m_counters;
  std::vector<std::pair<int32_t, TrackId>> m_memoryTracks;  // (rank, track); usually one
  std::vector<std::string> m_categories;  // memory categories seen, by index
  std::unique_ptr<detail::StepRowBatch> m_batch;  // the current step's events
  std::unique_ptr<detail::RowPump> m_pump;        // declared last: stopped first
};

}  // namespace moewb::profiler
