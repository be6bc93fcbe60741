// What the host trace costs the engine thread per CUDA training step, measured on the CPU: a
// synthetic step shaped like samples/configs/small.toml's GPU step (120 phase events, 1,500
// device-memory events, 4 expert-load events of 16 experts, 30 counters, one step event) is fed
// through a FanOutSink (the HostTracer plus two no-op sinks, as TrainingRun has) into a real SQLite
// trace. Before each memory event the thread does ~2 us of busy work, as if it were launching
// kernels, so the writer thread idles between events as it does on the GPU host; after each
// traced step the benchmark waits (flush) until the writer has caught up, as it does during the
// next step's launches there.
// Timing: the engine thread's sink calls (and, batched, the appends) are timed section by
// section with the steady clock; each benchmark iteration feeds one step into the tracer and
// one identical step into no-op sinks only, and the reported time (manual) is the difference, so
// the clock reads and the event construction cancel out and what remains is the tracer's and
// the writer queue's cost on the engine thread. Counters: median_ns_per_step (median of those
// differences: robust against the thread being preempted inside a timed section on a busy
// machine), traced_ns / untraced_ns (medians of the two kinds of step). 300 iterations (about
// 3 s) per run.
// Memory-event delivery (the benchmark argument):
//   0 none        no memory events (phases, loads, counters and the step only)
//   1 interleaved every event reaches the sinks when the allocator sees it, between launches
//                 (the CUDA backend's allocator observer before issue 5)
//   2 batched     the allocator records each event into a buffer during the step and the backend
//                 hands the buffer to the sinks after its last launch (cuda_backend.cpp now)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <string>
#include <vector>

#include "moewb/base/units.h"
#include "moewb/engine/event_sink.h"
#include "moewb/profiler/host_tracer.h"
#include "moewb/storage/trace_writer.h"

namespace {

using moewb::steadyNowNs;
namespace engine = moewb::engine;

constexpr int kPhases = 120;
constexpr int kMemoryEvents = 1500;
constexpr int kLayers = 4;
constexpr int kExperts = 16;
constexpr int kCounters = 30;
constexpr int64_t kLaunchGapNs = 2000;

enum class Delivery : int64_t { kNone = 0, kInterleaved = 1, kBatched = 2 };

// SummarySink / StepClock stand-ins: sinks that ignore everything.
class NullSink final : public engine::EventSink {
 public:
  void onRunStart(const engine::RunStartEvent&) override {}
  void onPhase(const engine::PhaseEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onStep(const engine::StepEvent&) override {}
  void onRunEnd(const engine::RunEndEvent&) override {}
};

// One allocator event as the CachingAllocator records it.
struct RecordedMemoryEvent {
  int64_t tsNs;
  uint64_t address;
  int64_t bytes;
  int64_t categoryInUseBytes;
  const char* category;
  bool isAllocation;
};

// The backend's conversion of one allocator event into the engine's MemoryEvent.
void fillEngineEvent(const RecordedMemoryEvent& r, engine::MemoryEvent& event) {
  event.tsNs = r.tsNs;
  event.isAllocation = r.isAllocation;
  event.bytes = r.bytes;
  event.address = r.address;
  event.category = r.category;
  event.categoryInUseBytes = r.categoryInUseBytes;
}

// Sums the durations of the timed sections of one step.
class SectionTime {
 public:
  template <typename F>
  void timed(F&& work) {
    const int64_t t0 = steadyNowNs();
    work();
    m_ns += steadyNowNs() - t0;
  }
  double ns() const { return double(m_ns); }

 private:
  int64_t m_ns = 0;
};

// Busy work standing in for kernel launches: `iterations` rounds of a dependent add.
void launchWork(int64_t iterations) {
  uint64_t x = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    x += uint64_t(i);
    benchmark::DoNotOptimize(x);
  }
}

// Rounds of launchWork that take about `ns` on this machine (the fastest of a few tries).
int64_t launchWorkIterations(int64_t ns) {
  constexpr int64_t kProbe = 1'000'000;
  int64_t best = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const int64_t t0 = steadyNowNs();
    launchWork(kProbe);
    best = std::min(best, steadyNowNs() - t0);
  }
  return std::max<int64_t>(1, kProbe * ns / std::max<int64_t>(1, best));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The step's host events other than memory, built once (the trainer's cost, not the tracer's).
struct StepTemplate {
  std::vector<engine::PhaseEvent> phases;      // [kPhases]
  std::vector<engine::ExpertLoadEvent> loads;  // [kLayers]
  std::vector<std::string> counterNames;       // [kCounters]
};

StepTemplate makeStepTemplate() {
  const engine::Phase layerPhases[] = {engine::Phase::kKda, engine::Phase::kRouter,
                                       engine::Phase::kPermute, engine::Phase::kExperts,
                                       engine::Phase::kCombine};
  StepTemplate t;
  for (int i = 0; i < kPhases; ++i) {
    engine::PhaseEvent e;
    e.phase = layerPhases[i % 5];
    e.pass = (i < kPhases / 2) ? engine::Pass::kForward : engine::Pass::kBackward;
    e.layer = (i / 5) % kLayers;
    t.phases.push_back(e);
  }
  for (int layer = 0; layer < kLayers; ++layer) {
    engine::ExpertLoadEvent load;
    load.layer = layer;
    for (int e = 0; e < kExperts; ++e) {
      load.tokensPerExpert.push_back(100 + e);
      load.droppedPerExpert.push_back(0);
      load.biasPerExpert.push_back(0.01 * e);
    }
    t.loads.push_back(std::move(load));
  }
  for (int i = 0; i < kCounters; ++i) {
    t.counterNames.push_back("memory.counter_" + std::to_string(i));
  }
  return t;
}

// Feeds one synthetic step (doing the busy work between memory events) into `sinks`; returns
// the ns spent in the timed sections (sink calls and appends).
double feedStep(engine::EventSink& sinks, Delivery delivery, int64_t step, int64_t workIterations,
                StepTemplate& templ, std::vector<RecordedMemoryEvent>& recorded,
                int64_t* inUse) {
  const char* categories[] = {"activations", "workspace"};
  SectionTime time;
  const int64_t stepStartNs = steadyNowNs();
  for (int i = 0; i < kMemoryEvents; ++i) {
    launchWork(workIterations);
    if (delivery == Delivery::kNone) continue;
    const int c = (i / 2) % 2;
    const bool isAllocation = i % 2 == 0;
    const int64_t bytes = 512 * (1 + (i / 2) % 64);
    inUse[c] += isAllocation ? bytes : -bytes;
    const RecordedMemoryEvent r{steadyNowNs(), 0x7f0000000000ull + uint64_t(i / 2) * 4096, bytes,
                                inUse[c], categories[c], isAllocation};
    if (delivery == Delivery::kInterleaved) {
      time.timed([&] {
        engine::MemoryEvent single;  // the old observer built one per event
        single.step = step;
        fillEngineEvent(r, single);
        sinks.onMemory(single);
      });
    } else {
      time.timed([&] { recorded.push_back(r); });
    }
  }
  time.timed([&] {
    engine::MemoryEvent event;
    event.step = step;
    for (const RecordedMemoryEvent& r : recorded) {
      fillEngineEvent(r, event);
      sinks.onMemory(event);
    }
    recorded.clear();
    for (engine::PhaseEvent& p : templ.phases) {
      p.step = step;
      p.startNs = stepStartNs;
      p.endNs = stepStartNs + 1000;
      sinks.onPhase(p);
    }
    for (engine::ExpertLoadEvent& load : templ.loads) {
      load.step = step;
      sinks.onExpertLoad(load);
    }
    const int64_t endNs = steadyNowNs();
    for (const std::string& name : templ.counterNames) sinks.onCounter({name, endNs, 1.0});
    sinks.onStep({.step = step, .rank = 0, .startNs = stepStartNs, .endNs = endNs, .loss = 1.0,
                  .tokens = 512});
  });
  return time.ns();
}

void BM_HostTraceStep(benchmark::State& state) {
  const Delivery delivery = Delivery(state.range(0));
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("moewb-host-trace-step-" + std::to_string(getpid()) + ".sqlite"))
          .string();
  auto writer = moewb::storage::TraceWriter::create(path, {.overwrite = true});
  if (!writer.isOk()) {
    state.SkipWithError(writer.status().toString().c_str());
    return;
  }
  moewb::profiler::HostTracer tracer(writer->get());
  NullSink summary, clock, untracedSink;
  engine::FanOutSink sinks({&tracer, &summary, &clock});
  engine::FanOutSink untraced({&untracedSink, &summary, &clock});
  sinks.onRunStart({.name = "bench", .configToml = "", .backend = "cuda", .worldSize = 1,
                    .numLayers = kLayers, .numExperts = kExperts, .startNs = steadyNowNs()});
  StepTemplate templ = makeStepTemplate();
  std::vector<RecordedMemoryEvent> recorded;
  recorded.reserve(kMemoryEvents);
  const int64_t workIterations = launchWorkIterations(kLaunchGapNs);
  int64_t step = 0;
  int64_t inUse[2] = {0, 0};
  std::vector<double> tracedNs, untracedNs, diffNs;  // per iteration
  for (auto _ : state) {
    const double traced = feedStep(sinks, delivery, step, workIterations, templ, recorded, inUse);
    (void)(*writer)->flush();  // the writer catches up, as during the next step's launches
    const double plain =
        feedStep(untraced, delivery, step, workIterations, templ, recorded, inUse);
    state.SetIterationTime(std::max(0.0, traced - plain) * 1e-9);
    tracedNs.push_back(traced);
    untracedNs.push_back(plain);
    diffNs.push_back(traced - plain);
    ++step;
  }
  sinks.onRunEnd({.outcome = engine::RunOutcome::kCompleted, .endNs = steadyNowNs(),
                  .stepsDone = step});
  if (!(*writer)->close().isOk()) state.SkipWithError("closing the trace failed");
  state.counters["median_ns_per_step"] = median(diffNs);
  state.counters["traced_ns"] = median(tracedNs);
  state.counters["untraced_ns"] = median(untracedNs);
  const int64_t memoryRows = delivery == Delivery::kNone ? 0 : kMemoryEvents;
  state.counters["rows_per_step"] =
      double(kPhases + memoryRows + kLayers * kExperts + kCounters + 2);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ignored;
    std::filesystem::remove(path + suffix, ignored);
  }
}
BENCHMARK(BM_HostTraceStep)
    ->ArgName("delivery")
    ->Arg(int64_t(Delivery::kNone))
    ->Arg(int64_t(Delivery::kInterleaved))
    ->Arg(int64_t(Delivery::kBatched))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(300);

}  // namespace

BENCHMARK_MAIN();
