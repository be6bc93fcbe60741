// What tracing costs on the CUDA training step: the small config and a launch-heavy one (many
// thin layers and experts, so thousands of tiny kernels per step) each trained three ways:
// untraced (no sink but a step clock), host trace only (TracedRun into SQLite), and host trace
// plus CUPTI every step (`moewb run --gpu-trace`). Each (config, way) trains in a child process of
// its own (this program re-run with --child), so CUPTI's state never leaks into an untraced run;
// the three ways alternate for --reps rounds and each way's figure is the median of its rounds'
// medians. Step time = time between consecutive step ends as the last sink sees them, so the
// sinks' own work is included. Prints one JSON line per (config, way) and one summary per config
// with the overhead in % of the untraced step; compare with ../shared/anchors/profiler_overhead.py.
// Usage: trace_overhead_cuda_bench SMALL.toml [--steps N] [--reps R] [--backend cpu]
// (--backend cpu: a smoke run of the harness without a GPU; the CUPTI way is left out.)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "moewb/base/units.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/profiler/traced_run.h"
#include "moewb/storage/trace_reader.h"

namespace {

using moewb::engine::RunConfig;

constexpr int kWarmupSteps = 5;
const char* const kWays[] = {"untraced", "host", "cupti"};

// Overrides of the launch-heavy configuration, applied to the small config.
const std::vector<std::string> kLaunchHeavy = {"run.name=launch_heavy", "model.num_layers=16",
                                               "moe.num_experts=64",    "moe.top_k=8",
                                               "moe.d_ff=32",           "data.batch_size=2"};

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

  // Median ms between consecutive step ends after the warm-up steps.
  double medianStepMs() const {
    std::vector<double> ms;
    for (size_t i = kWarmupSteps + 1; i < m_endsNs.size(); ++i) {
      ms.push_back(double(m_endsNs[i] - m_endsNs[i - 1]) / 1e6);
    }
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  std::vector<int64_t> m_endsNs;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "trace_overhead_cuda_bench: %s\n", what.c_str());
  std::exit(1);
}

// One way on one config in this process: prints {"step_ms": ..., "gpu_records_per_step": ...}.
int child(const RunConfig& config, const std::string& way, int steps) {
  StepClock clock;
  double recordsPerStep = 0;
  if (way == "untraced") {
    auto trainer = moewb::engine::Trainer::create(config, &clock);
    if (!trainer.isOk()) fail(trainer.status().toString());
    if (auto s = (*trainer)->run(steps); !s.isOk()) fail(s.toString());
  } else {
    moewb::profiler::TracedRunOptions options;
    options.outPath = (std::filesystem::temp_directory_path() /
                       ("moewb-trace-overhead-" + std::to_string(getpid()) + ".sqlite"))
                          .string();
    options.steps = steps;
    options.gpuTrace = way == "cupti";
    auto run = moewb::profiler::TracedRun::create(config, options, &clock);
    if (!run.isOk()) fail(run.status().toString());
    auto summary = (*run)->run();
    if (!summary.isOk()) fail(summary.status().toString());
    if (auto reader = moewb::storage::TraceReader::open(options.outPath); reader.isOk()) {
      if (auto stats = (*reader)->stats(); stats.isOk()) {
        for (const auto& s : *stats) {
          if (s.name == "cupti_records") recordsPerStep = double(s.value) / double(steps);
        }
      }
    }
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::error_code ignored;
      std::filesystem::remove(options.outPath + suffix, ignored);
    }
  }
  std::printf("{\"step_ms\": %.4f, \"gpu_records_per_step\": %.0f}\n", clock.medianStepMs(),
              recordsPerStep);
  return 0;
}

struct ChildResult {
  double stepMs = 0;
  double recordsPerStep = 0;
};

// Runs this program with --child and reads its line.
ChildResult runChild(const std::string& self, const std::string& configPath,
                     const std::vector<std::string>& overrides, const std::string& way, int steps,
                     const std::string& backend) {
  std::string command = "'" + self + "' '" + configPath + "' --child " + way + " --steps " +
                        std::to_string(steps) + " --backend " + backend;
  for (const auto& o : overrides) command += " --set '" + o + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) fail("cannot run " + command);
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  const int status = pclose(pipe);
  ChildResult r;
  if (!got || status != 0 ||
      std::sscanf(line, "{\"step_ms\": %lf, \"gpu_records_per_step\": %lf}", &r.stepMs,
                  &r.recordsPerStep) != 2) {
    fail("child failed: " + command);
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SMALL.toml [--steps N] [--reps R]\n", argv[0]);
    return 2;
  }
  const std::string configPath = argv[1];
  int steps = 40, reps = 3;
  std::string childWay;
  std::string backend = "cuda";
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) {
      backend = argv[++i];
    } else if (!std::strcmp(argv[i], "--child") && i + 1 < argc) {
      childWay = argv[++i];
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
  if (!childWay.empty()) {
    auto config = moewb::engine::loadConfigFile(configPath);
    if (!config.isOk()) fail(config.status().toString());
    RunConfig c = *config;
    for (const auto& o : overrides) {
      if (auto s = moewb::engine::applyOverride(c, o); !s.isOk()) fail(s.toString());
    }
    c.run.backend = backend;
    if (auto s = moewb::engine::validateConfig(c); !s.isOk()) fail(s.toString());
    return child(c, childWay, steps);
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::pair<std::string, std::vector<std::string>>> configs = {
      {"small", {}}, {"launch_heavy", kLaunchHeavy}};
  for (const auto& [name, sets] : configs) {
    std::map<std::string, std::vector<double>> ms;
    double recordsPerStep = 0;
    for (int r = 0; r < reps; ++r) {
      for (const char* way : kWays) {
        if (backend != "cuda" && std::string(way) == "cupti") continue;
        const ChildResult result = runChild(self, configPath, sets, way, steps, backend);
        ms[way].push_back(result.stepMs);
        if (std::string(way) == "cupti") recordsPerStep = result.recordsPerStep;
      }
    }
    std::map<std::string, double> med;
    for (const char* way : kWays) {
      med[way] = median(ms[way]);
      std::printf(
          "{\"name\": \"moewb_trace_overhead_%s_%s\", \"step_ms\": %.4f, \"reps\": %d, "
          "\"steps\": %d}\n",
          name.c_str(), way, med[way], reps, steps);
    }
    const double base = med["untraced"];
    std::printf(
        "{\"name\": \"moewb_trace_overhead_%s\", \"untraced_ms\": %.4f, \"host_ms\": %.4f, "
        "\"cupti_ms\": %.4f, \"host_overhead_pct\": %.2f, \"full_overhead_pct\": %.2f, "
        "\"cupti_only_pct\": %.2f, \"gpu_records_per_step\": %.0f}\n",
        name.c_str(), base, med["host"], med["cupti"], 100.0 * (med["host"] / base - 1),
        100.0 * (med["cupti"] / base - 1), 100.0 * (med["cupti"] - med["host"]) / base,
        recordsPerStep);
    std::fflush(stdout);
  }
  return 0;
}
