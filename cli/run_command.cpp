// `moewb run`: train the embedded engine on a config and record the run into a trace file.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "output_path.h"
#include "moewb/base/step_range.h"
#include "moewb/base/units.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "moewb/profiler/capture_mode.h"
#include "moewb/run/control_socket.h"
#include "moewb/run/topology.h"
#include "moewb/run/training_run.h"
#include "progress_printer.h"

namespace moewb::cli {
namespace {

struct RunArgs {
  std::string configPath;
  std::string outPath;
  int64_t steps = -1;
  std::vector<std::string> overrides;
  bool force = false;
  bool quiet = false;
  std::string resumePath;
  int64_t checkpointEvery = 0;
  std::string checkpointDir;
  std::string dumpSteps;  // "A:B"
  std::string dumpDir;
  std::string initWeightsPath;
  std::string exportMergedPath;
  int32_t ranks = 0;  // --ranks: parallel.world_size (0 = from the config)
  bool gpuTrace = false;  // --gpu-trace: CUPTI capture of the CUDA run
  profiler::CaptureModeArgs capture;  // --trace-every, --trace-steps, --flight-recorder, --trigger-*
  std::string controlPath;  // --control: the live-control socket ("" = none)
};

// The run a stop signal stops, and whether one came before that run existed.
std::atomic<run::TrainingRun*> g_activeRun{nullptr};
std::atomic<bool> g_stopSignalled{false};
static_assert(std::atomic<run::TrainingRun*>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

// The first SIGINT (Ctrl-C) or SIGTERM (what launchers, Slurm and Kubernetes send): finish the
// current step, commit it and stop with status "stopped". A second one: the default action.
extern "C" void onStopSignal(int) {
  g_stopSignalled.store(true);
  if (run::TrainingRun* active = g_activeRun.load()) active->requestStop();  // an atomic store
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// Installs onStopSignal for SIGINT and SIGTERM for its lifetime.
class StopSignals {
 public:
  StopSignals() {
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
  }
  ~StopSignals() {
    g_activeRun.store(nullptr);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  // From now on a stop signal stops `run`; one that came before stops it at once.
  void attach(run::TrainingRun* run) {
    g_activeRun.store(run);
    if (g_stopSignalled.load()) run->requestStop();
  }
  // Before the run is destroyed.
  void detach() { g_activeRun.store(nullptr); }
};

// Tests only: MOEWB_TEST_STALL_RANK="R:S:SECONDS" makes in-process rank R sleep SECONDS before
// its step S (a stalled rank, for the stuck-rank watchdog's test). Unset or malformed: nothing.
std::function<void(int32_t, int64_t)> stallHookFromEnvironment() {
  const char* text = std::getenv("MOEWB_TEST_STALL_RANK");
  long long rank = -1, step = -1, seconds = -1;
  if (text == nullptr || std::sscanf(text, "%lld:%lld:%lld", &rank, &step, &seconds) != 3 ||
      rank < 0 || step < 0 || seconds < 0) {
    return {};
  }
  return [rank, step, seconds](int32_t r, int64_t s) {
    if (r == rank && s == step) std::this_thread::sleep_for(std::chrono::seconds(seconds));
  };
}

void printSummary(const run::RunSummary& s) {
  std::printf("\nrun summary\n");
  std::printf("  trace           %s\n", s.tracePath.c_str());
  std::printf("  steps           %lld%s\n", (long long)s.stepsDone, s.stopped ? " (stopped early)" : "");
  std::printf("  loss            %.4f -> %.4f (%.1f%% lower)\n", s.firstLoss, s.lastLoss,
              s.firstLoss > 0 ? 100.0 * (1.0 - s.lastLoss / s.firstLoss) : 0.0);
  std::printf("  tokens/s        %s (mean after the first step)\n",
              formatCount(s.meanTokensPerSecond).c_str());
  if (s.peakFlopsPerSecond > 0) {  // GPU runs; the CPU reference has no peak to compare with
    auto flops = [](double value) {  // "49.16 TFLOP", "812.3 MFLOP"
      const char* prefix = value >= 1e12 ? "T" : value >= 1e9 ? "G" : value >= 1e6 ? "M" : "";
      const double scale = value >= 1e12 ? 1e12 : value >= 1e9 ? 1e9 : value >= 1e6 ? 1e6 : 1;
      char text[48];
      std::snprintf(text, sizeof text, "%.4g %sFLOP", value / scale, prefix);
      return std::string(text);
    };
    std::printf("  model FLOPs     %s per step (forward + backward, counted from the config)\n",
                flops(s.modelFlopsPerStep).c_str());
    if (s.modelFlopsPerSecond > 0) {
      std::printf("  MFU             %.2f%% of %.1f TFLOP/s, the H200 bf16 dense peak "
                  "(docs/MFU.md)\n",
                  100 * s.mfu, s.peakFlopsPerSecond / 1e12);
      std::printf("                  %s/s achieved; %.2f%% of the %.0f TFLOP/s bf16 GEMM measured "
                  "on it\n",
                  flops(s.modelFlopsPerSecond).c_str(),
                  100 * s.modelFlopsPerSecond / s.gemmCeilingFlopsPerSecond,
                  s.gemmCeilingFlopsPerSecond / 1e12);
    } else {
      std::printf("  MFU             - (needs a second step: the first is not timed)\n");
    }
  }
  std::printf("  wall time       %.2f s\n", s.wallSeconds);
  std::printf("  expert load     max/mean per layer, mean over steps (1.00 = balanced):\n");
  for (size_t layer = 0; layer < s.meanImbalancePerLayer.size(); ++layer) {
    std::printf("    layer %-3zu     %.2f\n", layer, s.meanImbalancePerLayer[layer]);
  }
}

// Under a launcher (moewb launch, torchrun, srun) with WORLD_SIZE > 1 every process is one rank:
// parallel.world_size comes from the launcher and the ranks train on GPUs over NCCL.
Result<engine::ValidConfig> buildConfig(const RunArgs& args,
                                      const std::optional<engine::LauncherRank>& launcher) {
  MOEWB_ASSIGN_OR_RETURN(engine::RunConfig config, engine::loadConfigFile(args.configPath));
  int32_t ranks = args.ranks;
  if (launcher) {
    if (ranks > 0 && ranks != launcher->worldSize) {
      return invalidArgument("--ranks " + std::to_string(ranks) + " but the launcher started " +
                             std::to_string(launcher->worldSize) +
                             " processes (WORLD_SIZE); accepted: no --ranks under a launcher");
    }
    ranks = launcher->worldSize;
    if (config.run.backend == "auto") config.run.backend = "cuda";
  }
  if (ranks > 0) {  // the same as --set parallel.world_size=N, before the other overrides
    MOEWB_RETURN_IF_ERROR(
        engine::applyOverride(config, "parallel.world_size=" + std::to_string(ranks)));
  }
  for (const auto& assignment : args.overrides) {
    MOEWB_RETURN_IF_ERROR(engine::applyOverride(config, assignment));
  }
  if (launcher && config.run.backend != "cuda") {
    return invalidArgument("run.backend = \"" + config.run.backend + "\": the ranks of a "
                           "multi-process run train on GPUs over NCCL; accepted: \"cuda\" or "
                           "\"auto\" (e.g. --set run.backend=cuda)");
  }
  Result<engine::ValidConfig> valid = engine::ValidConfig::validate(std::move(config));
  if (!valid.isOk()) return valid.status().withContext(args.configPath);
  return valid;
}

// runs/x.sqlite -> runs/x.rank3.sqlite: each process of a multi-process run writes its own file.
std::string rankPath(const std::string& path, int32_t rank) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) +
                             p.extension().string())).string();
}

int runCommand(const RunArgs& args) {
  StopSignals stopSignals;  // from the start: a SIGTERM during set-up stops before the first step
  auto launcherFound = engine::detectLauncherRank();
  if (!launcherFound.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", launcherFound.status().message().c_str());
    return kExitBadInput;
  }
  std::optional<engine::LauncherRank> launcher = *launcherFound;
  auto config = buildConfig(args, launcher);
  if (!config.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", config.status().message().c_str());
    return kExitBadInput;
  }
  const bool namesDefaults = args.outPath.empty() ||
                             (!args.dumpSteps.empty() && args.dumpDir.empty()) ||
                             (args.checkpointEvery > 0 && args.checkpointDir.empty());
  if (Status name = checkRunNameForPaths((*config)->run.name); namesDefaults && !name.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", name.message().c_str());
    return kExitBadInput;
  }
  const std::string basePath =
      args.outPath.empty() ? "runs/" + (*config)->run.name + ".sqlite" : args.outPath;
  const std::string outPath = launcher ? rankPath(basePath, launcher->rank) : basePath;
  if (Status out = checkOutputPath(outPath, "--out", args.force, OutputKind::kTrace); !out.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", out.message().c_str());
    return kExitBadInput;
  }
  // The control socket is bound before the trace exists, so a bad path leaves nothing behind; it
  // is removed when this function returns (normally, after a stop or a signal, or on an error).
  std::unique_ptr<run::ControlServer> control;
  if (!args.controlPath.empty()) {
    const std::string path = launcher ? args.controlPath + ".rank" +
                                            std::to_string(launcher->rank)
                                      : args.controlPath;
    auto listening = run::ControlServer::listen(path);
    if (!listening.isOk()) {
      std::fprintf(stderr, "moewb run: --control: %s\n", listening.status().message().c_str());
      return listening.status().code() == StatusCode::kInternal ? kExitFailure : kExitBadInput;
    }
    control = std::move(*listening);
  }
  run::TrainingRunOptions options;
  if (!args.dumpSteps.empty()) {
    Result<StepRange> range = parseStepRange(args.dumpSteps, "--dump-steps");
    if (!range.isOk()) {
      std::fprintf(stderr, "moewb run: %s\n", range.status().message().c_str());
      return kExitBadInput;
    }
    options.dumpFirstStep = range->first;
    options.dumpEndStep = range->end;
    options.dumpDir = args.dumpDir.empty() ? "runs/" + (*config)->run.name + "-dumps" : args.dumpDir;
  }
  options.outPath = outPath;
  options.overwrite = true;
  options.steps = args.steps;
  options.resumePath = args.resumePath;
  options.initWeightsPath = args.initWeightsPath;
  options.exportMergedPath = args.exportMergedPath;
  options.checkpointEverySteps = args.checkpointEvery;
  options.gpuTrace = args.gpuTrace;
  options.launcherRank = launcher ? launcher->rank : -1;
  options.beforeRankStep = stallHookFromEnvironment();
  // A rank that cannot be stopped (a multi-process rank's GPU work stuck behind a dead peer's
  // collective, an in-process rank thread stalled or deadlocked): the trace already says so and
  // is closed; end the process without running destructors that would wait for that rank.
  options.onStuckRank = [outPath, &control](const Status& status) {
    std::fprintf(stderr, "moewb run: %s\n(steps committed before the failure are kept in %s)\n",
                 status.message().c_str(), outPath.c_str());
    std::fflush(stderr);
    if (control) control->removeSocketFile();
    std::_Exit(kExitFailure);
  };
  profiler::CaptureModeArgs captureArgs = args.capture;
  captureArgs.gpuTrace = args.gpuTrace;
  captureArgs.plannedSteps = args.steps >= 0 ? args.steps : (*config)->run.steps;
  auto mode = profiler::parseCaptureMode(captureArgs);
  if (!mode.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", mode.status().message().c_str());
    return kExitBadInput;
  }
  options.gpuCapture.mode = *mode;
  options.gpuCapture.kinds = args.capture.gpuTraceKinds;
  options.checkpointDir =
      args.checkpointDir.empty() ? "runs/" + (*config)->run.name + "-checkpoints" : args.checkpointDir;
  int64_t planned = args.steps >= 0 ? args.steps : (*config)->run.steps;
  ProgressPrinter progress(planned);
  auto run = run::TrainingRun::create(*config, options, args.quiet ? nullptr : &progress);
  if (!run.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n", run.status().message().c_str());
    StatusCode code = run.status().code();
    bool badInput = code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
                    code == StatusCode::kDataLoss || code == StatusCode::kAlreadyExists;
    return badInput ? kExitBadInput : kExitFailure;
  }
  std::fprintf(stderr, "training '%s' (%s backend) for %lld steps -> %s\n", (*config)->run.name.c_str(),
               (*config)->run.backend.c_str(), (long long)planned, outPath.c_str());
  if (args.gpuTrace && !options.gpuCapture.mode.isEveryStep()) {
    std::fprintf(stderr, "  GPU capture: %s\n", options.gpuCapture.mode.describe().c_str());
  }
  const std::string topology = run::describeTopology(*config, launcher ? launcher->rank : -1,
                                                      launcher ? launcher->localRank : -1);
  if (!topology.empty()) std::fprintf(stderr, "  %s\n", topology.c_str());
  run::TrainingRun* active = run->get();
  progress.setCommittedSteps([active] { return active->committedSteps(); });
  if (control) {
    if (Status serving = control->start(*active); !serving.isOk()) {
      std::fprintf(stderr, "moewb run: --control: %s\n", serving.message().c_str());
      return kExitFailure;
    }
    std::fprintf(stderr, "  live control: moewb ctl %s status|pause|resume|step|stop|keys|"
                 "set KEY=VALUE\n", control->path().c_str());
  }
  stopSignals.attach(active);
  auto summary = active->run();
  stopSignals.detach();
  if (control) control->stop();  // before the run goes; answers what still waits for it
  if (!summary.isOk()) {
    std::fprintf(stderr, "moewb run: %s\n(steps committed before the failure are kept in %s)\n",
                 summary.status().message().c_str(), outPath.c_str());
    return kExitFailure;
  }
  printSummary(*summary);
  if (launcher && launcher->rank == 0) {
    std::printf("  merge the ranks' traces: moewb merge -o %s %s ... %s\n", basePath.c_str(),
                rankPath(basePath, 0).c_str(),
                rankPath(basePath, (*config)->parallel.worldSize - 1).c_str());
  }
  if (!args.exportMergedPath.empty()) {
    std::printf("  merged weights  %s\n", args.exportMergedPath.c_str());
  }
  return kExitOk;
}

}  // namespace

void addRunCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "train on a config and record the run into a trace");
  cmd->add_option("--config,-c", args->configPath, "TOML config (see samples/configs/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", args->outPath, "trace file to write (default runs/<run.name>.sqlite)");
  cmd->add_option("--steps,-n", args->steps, "optimizer steps (default: run.steps of the config)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--set", args->overrides, "override a config key, e.g. --set moe.top_k=2")
      ->type_name("KEY=VALUE");
  cmd->add_flag("--force,-f", args->force, "replace the output file if it exists");
  cmd->add_option("--ranks", args->ranks,
                  "train on N ranks in this process = --set parallel.world_size=N: threads on "
                  "the CPU, or with run.backend = cuda virtual ranks sharing GPU 0; with "
                  "parallel.ep / parallel.fsdp / parallel.replicate, all ranks trace into --out. "
                  "Under `moewb launch` (or torchrun / srun) each process is one rank over NCCL "
                  "and writes --out with .rankR before the extension")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--resume", args->resumePath,
                  "continue from a checkpoint (its step up to --steps in total)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--init-weights", args->initWeightsPath,
                  "start from the base weights of a checkpoint or merged export (moments, "
                  "adapters and step ignored), e.g. for LoRA fine-tuning")
      ->check(CLI::ExistingFile);
  cmd->add_option("--export-merged", args->exportMergedPath,
                  "after training, write the weights with LoRA adapters merged in (safetensors, "
                  "format moewb-weights)");
  cmd->add_option("--checkpoint-every", args->checkpointEvery,
                  "save a checkpoint after every N-th step (0 = never)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--dump-steps", args->dumpSteps,
                  "write alignment dumps (weights, batch, loss terms, gradients) for steps A:B "
                  "(A..B-1)")
      ->type_name("A:B");
  cmd->add_option("--dump-dir", args->dumpDir, "where dumps go (default runs/<run.name>-dumps)");
  cmd->add_option("--checkpoint-dir", args->checkpointDir,
                  "where checkpoints go (default runs/<run.name>-checkpoints)");
  cmd->add_flag("--quiet,-q", args->quiet, "no progress line");
  cmd->add_option("--control", args->controlPath,
                  "listen for live commands on a Unix socket created at PATH (status, pause, "
                  "resume, step, stop, set KEY=VALUE, keys; send them with `moewb ctl PATH ...`; "
                  "removed when the run ends; under a launcher each rank appends .rankR)")
      ->type_name("PATH");
  cmd->add_flag("--gpu-trace", args->gpuTrace,
                "also record the GPU activity with CUPTI (kernels, copies, memsets, memory, "
                "synchronisation, CUDA API calls, NVTX), each kernel tagged with its step, layer "
                "and phase; needs run.backend = cuda on one rank");
  cmd->add_option_function<std::string>(
         "--gpu-trace-kinds",
         [args](const std::string& list) {
           args->capture.gpuTraceKinds = profiler::parseGpuTraceKinds(list).value();
         },
         std::string("with --gpu-trace: record only these kinds, like nsys --trace (default "
                     "all): ") +
             profiler::kGpuTraceKindNames +
             ", or the sets all and launches (every device kind, nvtx and launch_api: only the "
             "API calls that launch, copy, set, allocate or wait). A kernel, copy or memset gets "
             "its step, layer and phase from its launching API call's correlation id and the "
             "NVTX range around that call: without runtime, driver or launch_api its kernels "
             "cannot be attributed (runtime alone misses cuBLAS's launches), without nvtx they "
             "get no layer or phase; fewer kinds cost less")
      ->check(CLI::Validator(
          [](std::string& list) {
            auto kinds = profiler::parseGpuTraceKinds(list);
            return kinds.isOk() ? std::string() : kinds.status().message();
          },
          "", "gpu trace kinds"))
      ->needs(cmd->get_option("--gpu-trace"))
      ->type_name("LIST");
  // Capture modes: plain values here, turned into optionals (given or not) in the callback so
  // that parseCaptureMode can say which option is wrong.
  auto every = std::make_shared<int64_t>(0);
  auto window = std::make_shared<std::string>();
  auto flight = std::make_shared<int64_t>(0);
  auto load = std::make_shared<double>(0), stepMs = std::make_shared<double>(0),
       memoryGiB = std::make_shared<double>(0);
  auto cooldown = std::make_shared<int64_t>(0);
  CLI::Option* everyOpt = cmd->add_option(
      "--trace-every", *every, "with --gpu-trace: capture only every N-th step (steps 0, N, 2N, "
      "..., or counted from the start of --trace-steps); CUPTI is off in between");
  CLI::Option* windowOpt = cmd->add_option(
      "--trace-steps", *window, "with --gpu-trace: capture only steps A..B-1 (a single A = step "
      "A); CUPTI is off outside the window")->type_name("A:B");
  CLI::Option* flightOpt = cmd->add_option(
      "--flight-recorder", *flight, "with --gpu-trace: record every step but keep only the last N "
      "steps' GPU rows in memory; write them when a --trigger-* fires");
  CLI::Option* loadOpt = cmd->add_option(
      "--trigger-load", *load, "flight-recorder trigger: expert max/mean load above X in any "
      "layer");
  CLI::Option* stepMsOpt = cmd->add_option(
      "--trigger-step-ms", *stepMs, "flight-recorder trigger: step time above Y ms");
  CLI::Option* memoryOpt = cmd->add_option(
      "--trigger-memory-gib", *memoryGiB, "flight-recorder trigger: the step's peak device "
      "memory above Z GiB");
  CLI::Option* cooldownOpt = cmd->add_option(
      "--trigger-cooldown", *cooldown, "flight recorder: after a firing, ignore the triggers for "
      "the next K steps (default 0: a trigger that stays true fires, and writes, every step)");
  cmd->callback([=] {
    profiler::CaptureModeArgs& c = args->capture;
    if (everyOpt->count() > 0) c.traceEvery = *every;
    if (windowOpt->count() > 0) c.traceSteps = *window;
    if (flightOpt->count() > 0) c.flightRecorder = *flight;
    if (loadOpt->count() > 0) c.triggerLoad = *load;
    if (stepMsOpt->count() > 0) c.triggerStepMs = *stepMs;
    if (memoryOpt->count() > 0) c.triggerMemoryGiB = *memoryGiB;
    if (cooldownOpt->count() > 0) c.triggerCooldown = *cooldown;
    *action = [args] { return runCommand(*args); };
  });
}

}  // namespace moewb::cli
