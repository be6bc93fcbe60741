// StepRowBatch and RowPump: how HostTracer keeps the trace writer's work off the engine thread.
//
// StepRowBatch holds one step's high-volume host events as compact records (phases, device-memory
// events, expert loads in flat arrays, counters, the step itself); filling it costs the engine
// thread one append per event and no lock. RowPump owns one helper thread: at the end of a step
// the tracer hands the batch over (one lock and one wake-up per step) and gets an empty, recycled
// batch back, so steady state allocates nothing; the pump turns the records into rows and queues
// them on the TraceWriter, the step row last, so each step is still committed together with its
// rows.
// Back-pressure: at most kMaxPendingBatches batches wait for the pump; submit() blocks while that
// many are pending (and the writer's own queue is bounded too, trace_writer.h), so the trace stays
// within a few steps of the engine. Each wait is reported to the writer (addBackPressureWait).
// Ordering: batches are written in the order they were submitted; within a batch phases, memory
// events, expert loads, counters, swap plans, swap copies, swap step rows, then the step slice
// and step row.
// Thread-safety: submit/drain from one producer thread (the tracer's); the pump writes to the
// writer, whose add* methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/engine/event_sink.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler::detail {

struct PhaseRecord {
  int64_t step = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  int32_t layer = -1;
  engine::Phase phase = engine::Phase::kForward;
  engine::Pass pass = engine::Pass::kNone;
};

struct MemoryRecord {
  int64_t tsNs = 0;
  int64_t step = 0;
  int64_t bytes = 0;
  int64_t address = 0;     // bit pattern of the uint64 device address
  int64_t inUseBytes = 0;  // the category's bytes in use after the event
  TrackId track;           // the rank's "device memory" track
  int32_t category = 0;    // index into the categories (StepRowBatch::newCategories)
  bool isAllocation = true;
};

// One ExpertLoadEvent: its per-expert values are [first, first + count) of the flat arrays.
struct LoadRecord {
  int64_t step = 0;
  int32_t layer = 0;
  int32_t rank = 0;
  size_t first = 0;
  size_t count = 0;
};

struct StepRowBatch {
  TrackId thread;        // the trainer-thread track of the phase and step slices
  TrackId counterTrack;  // valid once a counter was traced
  RunId run;
  std::vector<PhaseRecord> phases;
  std::vector<MemoryRecord> memory;
  std::vector<std::string> newCategories;  // categories first seen in this batch, in index order
  std::vector<LoadRecord> loads;
  std::vector<int64_t> tokens;    // [sum of loads' counts]
  std::vector<int64_t> dropped;   // [sum of loads' counts]
  std::vector<double> bias;       // [sum of loads' counts]
  std::vector<engine::CounterEvent> counters;  // the first counterCount are this step's; the
  size_t counterCount = 0;                      // rest keep their strings' storage for reuse
  std::vector<engine::SwapEvent> swaps;  // the first swapCount are this step's copies; the rest
  size_t swapCount = 0;                   // keep their op strings' storage for reuse
  std::vector<engine::SwapPlanEvent> swapPlans;  // rare: at most a few per run
  std::vector<engine::SwapStepEvent> swapSteps;
  bool hasStep = false;
  engine::StepEvent step;

  bool empty() const {
    return phases.empty() && memory.empty() && newCategories.empty() && loads.empty() &&
           counterCount == 0 && swapCount == 0 && swapPlans.empty() && swapSteps.empty() &&
           !hasStep;
  }
  // Appends a counter, reusing a kept element's string storage when there is one.
  void addCounter(const engine::CounterEvent& event);
  // Appends a swap copy the same way.
  void addSwap(const engine::SwapEvent& event);
  // Empties every list, keeping their capacity (and the ids).
  void clear();
};

class RowPump {
 public:
  static constexpr size_t kMaxPendingBatches = 2;

  // Starts the pump thread. `writer` must outlive the pump.
  explicit RowPump(storage::TraceWriter* writer);
  // Writes every batch still pending, then stops the thread.
  ~RowPump();
  RowPump(const RowPump&) = delete;
  RowPump& operator=(const RowPump&) = delete;

  // Hands `batch` to the pump and replaces it with an empty one (a recycled batch when there is
  // one; the ids are copied over), first waiting while kMaxPendingBatches are pending. Producer
  // thread; O(1) plus one wake-up when the pump keeps up.
  void submit(std::unique_ptr<StepRowBatch>& batch);
  // Blocks until every submitted batch has been queued on the writer. Producer thread.
  void drain();

 private:
  void loop();
  void write(StepRowBatch& batch);
  void writeSwap(const StepRowBatch& batch);

  storage::TraceWriter* m_writer;
  std::mutex m_mutex;  // guards the fields up to m_busy
  std::condition_variable m_wake;     // batches pending or stopping
  std::condition_variable m_drained;  // nothing pending and not busy
  std::condition_variable m_room;     // the pump took a batch
  std::deque<std::unique_ptr<StepRowBatch>> m_pending;
  std::vector<std::unique_ptr<StepRowBatch>> m_free;
  bool m_stopping = false;
  bool m_busy = false;
  std::vector<std::string> m_categories;  // pump thread: every category so far, by index
  std::thread m_thread;
};

}  // namespace moewb::profiler::detail
