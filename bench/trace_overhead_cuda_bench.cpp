// What each source of tracing cost adds to the CUDA training step, for the small config and a
// launch-heavy one (many thin layers and experts, so thousands of tiny kernels per step). Modes,
// each adding one source to the one before up to cupti_full (the last two are variants):
//   untraced       no event sink: no GPU phase timing, no memory observer
//   engine_events  the engine's events into a no-op sink: GPU phase timing (CUDA event pairs)
//                  and the allocator's memory events, no trace
//   host_phases    host trace (TrainingRun into SQLite) without device-memory events (the tracer
//                  drops them)
//   host_memory    host trace with device-memory events (`moewb run`)
//   cupti_kernel   + CUPTI kernel records                      (--gpu-trace-kinds kernel)
//   cupti_copies   + memcpy, memset                            (kernel,memcpy,memset)
//   cupti_runtime  + runtime API records                       (...,runtime)
//   cupti_driver   + driver API records                        (...,runtime,driver)
//   cupti_nvtx     + NVTX ranges                               (...,driver,nvtx)
//   cupti_full     + memory2 and synchronisation = `moewb run --gpu-trace` (all)
//   cupti_full_flush1s  all, but CUPTI flushed at most once a second instead of after every
//                  step (GpuCaptureOptions::flushIntervalMs): what the per-step flush costs
//   cupti_lean     kernel,memcpy,memset,runtime,nvtx (no driver, memory, sync)
//   cupti_launches the "launches" set: every device kind and nvtx, and only the API calls that
//                  launch, copy, set, allocate or wait (launch_api)
//   cupti_every10  all kinds, every 10th step only (`--trace-every 10`): the amortised cost
//   cupti_idle     all kinds armed for a step window after the run (`--trace-steps` far ahead):
//                  what CUPTI costs before its first capture window
//   cupti_after    all kinds for the warm-up steps only (`--trace-steps 0:5`): what CUPTI costs
//                  after a capture window has closed
// Each (config, mode) trains in a child process of its own (this program re-run with --child), so
// CUPTI's and NVTX's state never leak into another mode; the modes alternate for --reps rounds
// and each mode's figure is the median of its rounds. Step time = mean time between consecutive
// step ends (as the last sink sees them; untraced: as step() returns) after 5 warm-up steps, so
// the sinks' own work and the steps a mode captures only now and then are all included.
// Output: one JSON line per (config, mode) as soon as a config is done (overhead in % of the
// untraced step, GPU records, unattributed GPU records and dropped records per step), then a
// Markdown table of all of them. Compare with ../shared/anchors/profiler_overhead.py.
// Usage: trace_overhead_cuda_bench SMALL.toml [--steps N] [--reps R] [--modes a,b,...]
//          [--configs small,launch_heavy] [--backend cpu]
// (--backend cpu: a smoke run of the harness without a GPU; the CUPTI modes are left out.)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"

#include "moewb/base/units.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/profiler/gpu_trace_kinds.h"
#include "moewb/run/training_run.h"
#include "moewb/storage/trace_reader.h"

namespace {

using moewb::engine::RunConfig;

constexpr int kWarmupSteps = 5;

enum class Sink { kNone, kNoOp, kTrace };

struct Mode {
  const char* name;
  Sink sink;
  bool memoryEvents;        // the host trace keeps device-memory events
  const char* gpuKinds;     // --gpu-trace-kinds of the CUPTI capture; null = no capture
  int32_t flushIntervalMs;  // GpuCaptureOptions::flushIntervalMs (0 = after every step)
  int64_t everySteps = 1;   // CaptureMode::everySteps
  bool windowAfterRun = false;  // CaptureMode window starts after the last step (never on)
  bool windowInWarmup = false;  // CaptureMode window = the warm-up steps (closed before timing)
};

const Mode kModes[] = {
    {"untraced", Sink::kNone, false, nullptr, 0},
    {"engine_events", Sink::kNoOp, true, nullptr, 0},
    {"host_phases", Sink::kTrace, false, nullptr, 0},
    {"host_memory", Sink::kTrace, true, nullptr, 0},
    {"cupti_kernel", Sink::kTrace, true, "kernel", 0},
    {"cupti_copies", Sink::kTrace, true, "kernel,memcpy,memset", 0},
    {"cupti_runtime", Sink::kTrace, true, "kernel,memcpy,memset,runtime", 0},
    {"cupti_driver", Sink::kTrace, true, "kernel,memcpy,memset,runtime,driver", 0},
    {"cupti_nvtx", Sink::kTrace, true, "kernel,memcpy,memset,runtime,driver,nvtx", 0},
    {"cupti_full", Sink::kTrace, true, "all", 0},
    {"cupti_full_flush1s", Sink::kTrace, true, "all", 1000},
    {"cupti_lean", Sink::kTrace, true, "kernel,memcpy,memset,runtime,nvtx", 0},
    {"cupti_launches", Sink::kTrace, true, "launches", 0},
    {"cupti_every10", Sink::kTrace, true, "all", 0, 10},
    {"cupti_idle", Sink::kTrace, true, "all", 0, 1, true},
    {"cupti_after", Sink::kTrace, true, "all", 0, 1, false, true},
};

const Mode* findMode(const std::string& name) {
  for (const Mode& m : kModes) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

// Overrides of the launch-heavy configuration, applied to the small config.
const std::vector<std::string> kLaunchHeavy = {"run.name=launch_heavy", "model.num_layers=16",
                                               "moe.num_experts=64",    "moe.top_k=8",
                                               "moe.d_ff=32",           "data.batch_size=2"};

// Mean ms between consecutive step ends after the warm-up steps. With MOEWB_BENCH_STEP_TIMES set,
// every step's time goes to stderr too (where a mode's cost lands).
double meanStepMs(const std::vector<int64_t>& endsNs) {
  if (std::getenv("MOEWB_BENCH_STEP_TIMES") != nullptr) {
    for (size_t i = 1; i < endsNs.size(); ++i) {
      std::fprintf(stderr, "    step %zu: %.3f ms\n", i, double(endsNs[i] - endsNs[i - 1]) / 1e6);
    }
  }
  if (endsNs.size() < size_t(kWarmupSteps) + 2) return 0;
  const int64_t spanNs = endsNs.back() - endsNs[size_t(kWarmupSteps)];
  return double(spanNs) / 1e6 / double(endsNs.size() - size_t(kWarmupSteps) - 1);
}

// Remembers when each step's events reached it (it is the last sink).
class StepClock final : public moewb::engine::EventSink {
 public:
  void onRunStart(const moewb::engine::RunStartEvent&) override {}
  void onPhase(const moewb::engine::PhaseEvent&) override {}
  void onExpertLoad(const moewb::engine::ExpertLoadEvent&) override {}
  void onCounter(const moewb::engine::CounterEvent&) override {}
  void onStep(const moewb::engine::StepEvent&) override {
    m_endsNs.push_back(moewb::steadyNowNs());
  }
  void onRunEnd(const moewb::engine::RunEndEvent&) override {}
  const std::vector<int64_t>& endsNs() const { return m_endsNs; }

 private:
  std::vector<int64_t> m_endsNs;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "trace_overhead_cuda_bench: %s\n", what.c_str());
  std::exit(1);
}

struct ChildResult {
  double stepMs = 0;
  double recordsPerStep = 0;       // CUPTI records per step
  double unattributedPerStep = 0;  // device records without their API call, per step
  double droppedRecords = 0;       // CUPTI records dropped in the whole run
};

// Trains untraced, stamping each step's end as step() returns.
std::vector<int64_t> trainUntraced(const RunConfig& config, int steps) {
  auto trainer = moewb::engine::Trainer::create(config, nullptr);
  if (!trainer.isOk()) fail(trainer.status().toString());
  std::vector<int64_t> endsNs;
  for (int i = 0; i < steps; ++i) {
    auto step = (*trainer)->step();
    if (!step.isOk()) fail(step.status().toString());
    endsNs.push_back(moewb::steadyNowNs());
  }
  return endsNs;
}

// Reads the GPU figures of a finished trace's stats.
void readStats(const std::string& path, int steps, ChildResult& r) {
  auto reader = moewb::storage::TraceReader::open(path);
  if (!reader.isOk()) return;
  auto stats = (*reader)->stats();
  if (!stats.isOk()) return;
  for (const auto& s : *stats) {
    if (s.name == "cupti_records") r.recordsPerStep = double(s.value) / double(steps);
    if (s.name == "gpu_records_unattributed") r.unattributedPerStep = double(s.value) / steps;
    if (s.name == "cupti_dropped_records") r.droppedRecords = double(s.value);
  }
}

// One mode on one config in this process: prints the ChildResult as one JSON line.
int child(const RunConfig& config, const Mode& mode, int steps) {
  ChildResult r;
  if (mode.sink == Sink::kNone) {
    r.stepMs = meanStepMs(trainUntraced(config, steps));
  } else if (mode.sink == Sink::kNoOp) {
    StepClock clock;
    auto trainer = moewb::engine::Trainer::create(config, &clock);
    if (!trainer.isOk()) fail(trainer.status().toString());
    if (auto s = (*trainer)->run(steps); !s.isOk()) fail(s.toString());
    r.stepMs = meanStepMs(clock.endsNs());
  } else {
    StepClock clock;
    moewb::run::TrainingRunOptions options;
    options.outPath = (std::filesystem::temp_directory_path() /
                       ("moewb-trace-overhead-" + std::to_string(getpid()) + ".sqlite"))
                          .string();
    options.steps = steps;
    options.hostMemoryEvents = mode.memoryEvents;
    options.gpuTrace = mode.gpuKinds != nullptr;
    if (options.gpuTrace) {
      // MOEWB_BENCH_GPU_KINDS overrides the mode's kinds (to find which kind a cost comes from).
      const char* kindsOverride = std::getenv("MOEWB_BENCH_GPU_KINDS");
      auto kinds =
          moewb::profiler::parseGpuTraceKinds(kindsOverride ? kindsOverride : mode.gpuKinds);
      if (!kinds.isOk()) fail(kinds.status().toString());
      options.gpuCapture.kinds = *kinds;
      options.gpuCapture.flushIntervalMs = mode.flushIntervalMs;
      options.gpuCapture.mode.everySteps = mode.everySteps;
      if (mode.windowAfterRun) {
        options.gpuCapture.mode.firstStep = steps + 1000;
        options.gpuCapture.mode.endStep = steps + 1001;
      }
      if (mode.windowInWarmup) options.gpuCapture.mode.endStep = kWarmupSteps;
    }
    auto run = moewb::run::TrainingRun::create(config, options, &clock);
    if (!run.isOk()) fail(run.status().toString());
    auto summary = (*run)->run();
    if (!summary.isOk()) fail(summary.status().toString());
    r.stepMs = meanStepMs(clock.endsNs());
    readStats(options.outPath, steps, r);
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::error_code ignored;
      std::filesystem::remove(options.outPath + suffix, ignored);
    }
  }
  std::printf(
      "{\"step_ms\": %.4f, \"gpu_records_per_step\": %.1f, \"unattributed_per_step\": %.1f, "
      "\"dropped_records\": %.0f}\n",
      r.stepMs, r.recordsPerStep, r.unattributedPerStep, r.droppedRecords);
  return 0;
}

// Runs this program with --child and reads its line; nullopt (and a message) when it failed.
std::optional<ChildResult> runChild(const std::string& self, const std::string& configPath,
                                    const std::vector<std::string>& overrides, const Mode& mode,
                                    int steps, const std::string& backend) {
  std::string command = "'" + self + "' '" + configPath + "' --child " + mode.name +
                        " --steps " + std::to_string(steps) + " --backend " + backend;
  for (const auto& o : overrides) command += " --set '" + o + "'";
  const std::optional<std::string> line = moewb::bench::childOutputLine(command);
  ChildResult r;
  if (!line ||
      std::sscanf(line->c_str(),
                  "{\"step_ms\": %lf, \"gpu_records_per_step\": %lf, \"unattributed_per_step\": "
                  "%lf, \"dropped_records\": %lf}",
                  &r.stepMs, &r.recordsPerStep, &r.unattributedPerStep, &r.droppedRecords) != 4) {
    std::fprintf(stderr, "trace_overhead_cuda_bench: child failed: %s\n", command.c_str());
    return std::nullopt;
  }
  return r;
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

struct ModeFigures {
  const Mode* mode = nullptr;
  std::vector<double> stepMs;  // one per round that succeeded
  ChildResult last;            // GPU figures of the last round that succeeded
  int failures = 0;
};

struct ConfigFigures {
  std::string name;
  std::vector<ModeFigures> modes;
  double baseMs = std::nan("");  // untraced (or the first mode's) median
};

// Trains every mode `reps` times, alternating, and prints its JSON lines.
ConfigFigures measureConfig(const std::string& self, const std::string& configPath,
                            const std::string& name, const std::vector<std::string>& overrides,
                            const std::vector<const Mode*>& modes, int steps, int reps,
                            const std::string& backend) {
  ConfigFigures figures;
  figures.name = name;
  for (const Mode* mode : modes) figures.modes.push_back({mode, {}, {}, 0});
  for (int r = 0; r < reps; ++r) {
    for (ModeFigures& m : figures.modes) {
      auto result = runChild(self, configPath, overrides, *m.mode, steps, backend);
      if (!result) {
        ++m.failures;
        continue;
      }
      m.stepMs.push_back(result->stepMs);
      m.last = *result;
      std::fprintf(stderr, "  %s %s round %d: %.3f ms\n", name.c_str(), m.mode->name, r + 1,
                   result->stepMs);
    }
  }
  figures.baseMs = moewb::bench::median(figures.modes.front().stepMs);
  for (const ModeFigures& m : figures.modes) {
    const double ms = moewb::bench::median(m.stepMs);
    std::string rounds;
    for (double v : m.stepMs) {
      char text[32];
      std::snprintf(text, sizeof text, "%s%.4f", rounds.empty() ? "" : ", ", v);
      rounds += text;
    }
    std::printf(
        "{\"name\": \"moewb_trace_overhead_%s_%s\", \"config\": \"%s\", \"mode\": \"%s\", "
        "\"gpu_trace_kinds\": \"%s\", \"step_ms\": %.4f, \"overhead_pct\": %.2f, "
        "\"step_ms_rounds\": [%s], \"gpu_records_per_step\": %.1f, "
        "\"unattributed_per_step\": %.1f, \"dropped_records\": %.0f, \"failed_rounds\": %d, "
        "\"reps\": %d, \"steps\": %d, \"baseline\": \"%s\"}\n",
        name.c_str(), m.mode->name, name.c_str(), m.mode->name,
        m.mode->gpuKinds != nullptr ? m.mode->gpuKinds : "", std::isnan(ms) ? -1.0 : ms,
        std::isnan(ms) ? 0.0 : 100.0 * (ms / figures.baseMs - 1), rounds.c_str(),
        m.last.recordsPerStep, m.last.unattributedPerStep, m.last.droppedRecords, m.failures, reps,
        steps, figures.modes.front().mode->name);
  }
  std::fflush(stdout);
  return figures;
}

// The Markdown table: one row per mode, per config the step time, its overhead against the
// baseline and the increment over the row before.
void printTable(const std::vector<ConfigFigures>& configs) {
  if (configs.empty()) return;
  std::printf("\n| mode | GPU trace kinds |");
  for (const auto& c : configs) std::printf(" %s ms (vs %s, vs row above) | records/step |",
                                            c.name.c_str(), c.modes.front().mode->name);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < configs.size(); ++i) std::printf("---|---|");
  std::printf("\n");
  for (size_t row = 0; row < configs.front().modes.size(); ++row) {
    const Mode* mode = configs.front().modes[row].mode;
    std::printf("| %s | %s |", mode->name, mode->gpuKinds != nullptr ? mode->gpuKinds : "-");
    for (const auto& c : configs) {
      const double ms = moewb::bench::median(c.modes[row].stepMs);
      const double above = row > 0 ? moewb::bench::median(c.modes[row - 1].stepMs) : ms;
      if (std::isnan(ms)) {
        std::printf(" failed | - |");
        continue;
      }
      std::printf(" %.3f (%+.1f%%, %+.1f%%) | %.0f |", ms, 100.0 * (ms / c.baseMs - 1),
                  100.0 * (ms - above) / c.baseMs, c.modes[row].last.recordsPerStep);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s SMALL.toml [--steps N] [--reps R] [--modes a,b,...] "
                 "[--configs small,launch_heavy] [--backend cpu]\n",
                 argv[0]);
    return 2;
  }
  const std::string configPath = argv[1];
  int steps = 40, reps = 3;
  std::string childMode;
  std::string backend = "cuda";
  std::string modeList, configList = "small,launch_heavy";
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) {
      backend = argv[++i];
    } else if (!std::strcmp(argv[i], "--child") && i + 1 < argc) {
      childMode = argv[++i];
    } else if (!std::strcmp(argv[i], "--modes") && i + 1 < argc) {
      modeList = argv[++i];
    } else if (!std::strcmp(argv[i], "--configs") && i + 1 < argc) {
      configList = argv[++i];
    } else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (steps <= kWarmupSteps + 1 || reps < 1) {
    std::fprintf(stderr, "--steps must be > %d and --reps >= 1\n", kWarmupSteps + 1);
    return 2;
  }
  if (!childMode.empty()) {
    const Mode* mode = findMode(childMode);
    if (mode == nullptr) fail("unknown mode " + childMode);
    auto config = moewb::engine::loadConfigFile(configPath);
    if (!config.isOk()) fail(config.status().toString());
    RunConfig c = *config;
    for (const auto& o : overrides) {
      if (auto s = moewb::engine::applyOverride(c, o); !s.isOk()) fail(s.toString());
    }
    c.run.backend = backend;
    if (auto s = moewb::engine::validateConfig(c); !s.isOk()) fail(s.toString());
    return child(c, *mode, steps);
  }
  std::vector<const Mode*> modes;
  for (const Mode& m : kModes) {
    if (!modeList.empty()) continue;
    if (backend != "cuda" && m.gpuKinds != nullptr) continue;
    modes.push_back(&m);
  }
  for (const std::string& name : splitList(modeList)) {
    const Mode* m = findMode(name);
    if (m == nullptr) {
      std::string accepted;
      for (const Mode& k : kModes) accepted += std::string(accepted.empty() ? "" : ", ") + k.name;
      std::fprintf(stderr, "--modes: unknown mode '%s'; accepted: %s\n", name.c_str(),
                   accepted.c_str());
      return 2;
    }
    if (backend != "cuda" && m->gpuKinds != nullptr) continue;
    modes.push_back(m);
  }
  if (modes.empty()) {
    std::fprintf(stderr, "no mode to run\n");
    return 2;
  }
  const std::vector<std::string> configNames = splitList(configList);
  for (const std::string& name : configNames) {
    if (name != "small" && name != "launch_heavy") {
      std::fprintf(stderr, "--configs: unknown config '%s'; accepted: small, launch_heavy\n",
                   name.c_str());
      return 2;
    }
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<ConfigFigures> results;
  for (const std::string& name : configNames) {
    const std::vector<std::string> sets =
        name == "small" ? overrides : [&] {
          std::vector<std::string> all = kLaunchHeavy;
          all.insert(all.end(), overrides.begin(), overrides.end());
          return all;
        }();
    results.push_back(
        measureConfig(self, configPath, name, sets, modes, steps, reps, backend));
  }
  printTable(results);
  return 0;
}
