// The flight recorder of the GPU capture (CaptureMode::flightRecorderSteps > 0), in three plain
// parts that need no GPU:
// - FlightTriggers (trainer thread) watches each step's expert load, step time and peak device
//   memory and says at the step's end whether a trigger fired and why; for cooldownSteps steps
//   after a firing, triggers that hold are counted as suppressed instead.
// - FlightWindow decides which steps a firing writes: the last N steps up to the firing step,
//   less those an earlier firing already wrote.
// - FlightRecorderWriter sits between the GpuTraceBuilder and the real TraceWriter: the GPU rows
//   (slices with their kernel / memcpy / memset / sync / API details, GPU memory rows) are held
//   per step in memory until writeSteps() passes them on or dropBefore() discards them. Tracks,
//   stats, meta and every other row go straight through. Rows without a step (setup work, or
//   work between steps) are discarded and counted. Memory: the rows of the steps held; dropping
//   is O(rows dropped).
// Thread-safety: FlightTriggers on one thread; FlightWindow and FlightRecorderWriter's held rows
// on one (the parser) thread; the pass-through methods as thread-safe as the wrapped writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "moewb/engine/event_sink.h"
#include "moewb/profiler/capture_mode.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler::gpu {

struct TriggerFiring {
  int64_t step = -1;
  std::string reason;  // "step 12: expert max/mean load 9.31 > 8 in layer 2; step time ..."
};

class FlightTriggers {
 public:
  explicit FlightTriggers(const CaptureTriggers& triggers) : m_triggers(triggers) {}
  // Keeps the worst max/mean load of the step in progress. O(experts).
  void addExpertLoad(const engine::ExpertLoadEvent& event);
  // Ends the step: a firing when any trigger's threshold was exceeded and the step is past the
  // cooldown of the last firing, else nullopt. Resets the per-step state. Step time is
  // endNs - startNs; memory is StepEvent::peakBytes.
  std::optional<TriggerFiring> endStep(const engine::StepEvent& event);
  // Steps whose triggers held during a cooldown (readable from any thread).
  int64_t suppressed() const { return m_suppressed.load(); }

 private:
  CaptureTriggers m_triggers;
  int64_t m_quietUntilStep = 0;  // steps below this do not fire (the cooldown)
  std::atomic<int64_t> m_suppressed{0};
  double m_worstLoad = 0;  // max/mean of the worst layer so far in the step
  int32_t m_worstLayer = -1;
};

class FlightWindow {
 public:
  explicit FlightWindow(int32_t steps) : m_steps(steps) {}
  // Steps [first, last] a firing at `step` writes: the last N up to `step`, from after the last
  // step already written. Steps must fire in increasing order.
  std::pair<int64_t, int64_t> onFiring(int64_t step);
  // The oldest step still to be held once steps up to `resolvedStep` are resolved.
  int64_t oldestKept(int64_t resolvedStep) const { return resolvedStep - m_steps + 1; }
  int32_t steps() const { return m_steps; }

 private:
  int32_t m_steps;
  int64_t m_writtenThrough = -1;
};

class FlightRecorderWriter final : public storage::TraceWriter {
 public:
  // `writer` must outlive this object.
  explicit FlightRecorderWriter(storage::TraceWriter* writer) : m_writer(writer) {}

  // Held-row operations (one thread). Writes the held rows of steps [first, last] in the order
  // they were added and forgets them; returns how many steps had rows.
  int64_t writeSteps(int64_t first, int64_t last);
  // Discards the held rows of steps < `step`.
  void dropBefore(int64_t step);
  int64_t heldRows() const { return m_heldRows; }
  int64_t rowsWritten() const { return m_rowsWritten; }
  int64_t rowsDiscarded() const { return m_rowsDiscarded; }

  // GPU rows: held by step.
  void addSlice(const storage::SliceRow& slice) override;
  void addGpuKernel(const storage::SliceRow& slice, const storage::GpuKernelRow& row) override;
  void addGpuMemcpy(const storage::SliceRow& slice, const storage::GpuMemcpyRow& row) override;
  void addGpuMemset(const storage::SliceRow& slice, const storage::GpuMemsetRow& row) override;
  void addGpuSync(const storage::SliceRow& slice, const storage::GpuSyncRow& row) override;
  void addCudaApi(const storage::SliceRow& slice, const storage::CudaApiRow& row) override;
  void addGpuMemory(const storage::GpuMemoryRow& row) override;

  // Everything else: straight to the wrapped writer.
  RunId addRun(const storage::RunRow& run) override { return m_writer->addRun(run); }
  void finishRun(RunId run, const std::string& status, const std::string& message,
                 int64_t endNs) override {
    m_writer->finishRun(run, status, message, endNs);
  }
  TrackId addTrack(const storage::TrackRow& track) override { return m_writer->addTrack(track); }
  void addCounter(const storage::CounterRow& c) override { m_writer->addCounter(c); }
  void addMemoryEvent(const storage::MemoryEventRow& e) override { m_writer->addMemoryEvent(e); }
  void addExpertLoad(const storage::ExpertLoadRow& l) override { m_writer->addExpertLoad(l); }
  void addA2aTraffic(const storage::A2aTrafficRow& t) override { m_writer->addA2aTraffic(t); }
  void addCollective(const storage::CollectiveRow& c) override { m_writer->addCollective(c); }
  void addConfigChange(RunId run, const storage::ConfigChangeRow& change) override {
    m_writer->addConfigChange(run, change);
  }
  void addSwapPlan(RunId run, const storage::SwapPlanRow& p) override {
    m_writer->addSwapPlan(run, p);
  }
  void addSwapEvent(RunId run, const storage::SwapEventRow& e) override {
    m_writer->addSwapEvent(run, e);
  }
  void addSwapStep(RunId run, const storage::SwapStepRow& s) override {
    m_writer->addSwapStep(run, s);
  }
  void addStat(const storage::StatRow& stat) override { m_writer->addStat(stat); }
  void addStep(const storage::StepRow& step) override { m_writer->addStep(step); }
  void setMeta(const std::string& key, const std::string& value) override {
    m_writer->setMeta(key, value);
  }
  Status flush() override { return m_writer->flush(); }
  Status health() const override { return m_writer->health(); }
  Status close() override { return m_writer->close(); }
  const std::string& path() const override { return m_writer->path(); }

 private:
  struct Slice {
    storage::SliceRow slice;
  };
  template <typename Detail>
  struct WithDetail {
    storage::SliceRow slice;
    Detail detail;
  };
  using Held =
      std::variant<Slice, WithDetail<storage::GpuKernelRow>, WithDetail<storage::GpuMemcpyRow>,
                   WithDetail<storage::GpuMemsetRow>, WithDetail<storage::GpuSyncRow>,
                   WithDetail<storage::CudaApiRow>, storage::GpuMemoryRow>;
  void hold(int64_t step, Held&& row);
  void write(const Held& row);

  storage::TraceWriter* m_writer;
  std::map<int64_t, std::vector<Held>> m_held;  // by step
  int64_t m_heldRows = 0;
  int64_t m_rowsWritten = 0;
  int64_t m_rowsDiscarded = 0;
};

}  // namespace moewb::profiler::gpu
