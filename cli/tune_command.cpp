// `moewb tune`: run (or resume) a tuning study over real short training runs and print its table;
// `moewb tune --export`: write a study's trial as our TOML, Megatron-Core flags or torchtitan TOML;
// `moewb tune --apply`: apply a study's trial live to a running run (tune_apply.h).
// The work is in the tuner library (moewb/tuner/); this file parses arguments and presents.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/tuner/cost_model.h"
#include "moewb/tuner/exports.h"
#include "moewb/tuner/study.h"
#include "output_path.h"
#include "tune_apply.h"

namespace moewb::cli {
namespace {

struct TuneArgs {
  std::string configPath;
  std::string out;
  std::string budget;
  std::string objective = "tokens_per_s";
  std::string knobs;
  std::string strategy = "auto";
  std::vector<std::string> overrides;
  int32_t ranks = 0;
  int64_t steps = 6;
  int64_t maxSteps = 48;
  int64_t gateSteps = 4;
  double gateLossRel = -1;  // -1: the backend's default (tuner::gateToleranceFor)
  double gateGradRel = -1;
  bool quiet = false;
  std::string exportPath;
  std::string format = "toml";
  int64_t trial = 0;
  bool force = false;
  bool predict = false;
  std::string tracePath;     // calibration trace (--predict; --strategy model: instead of the base)
  int32_t gpus = 0;          // --predict: ranks, one per GPU
  std::string interconnect;  // --interconnect overrides
  size_t modelTop = 6;       // --strategy model: candidates that run real trials
  std::string applyPath;     // --apply STUDY
  std::string controlPath;   // --apply: the run's control socket
  bool dryRun = false;       // --apply: print the plan, send nothing
};

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void onTuneSignal(int) {
  g_stop.store(true);
}

int exitFor(const Status& s) {
  return s.code() == StatusCode::kInternal || s.code() == StatusCode::kResourceExhausted
             ? kExitFailure
             : kExitBadInput;
}

int fail(const Status& s) {
  std::fprintf(stderr, "moewb tune: %s\n", s.message().c_str());
  return exitFor(s);
}

std::string human(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The settings of `row` that differ from the base's, "(base)" for the base itself.
std::string settingsDiff(const std::string& settings, const std::string& base) {
  auto mine = tuner::parseSettingsText(settings);
  auto theirs = tuner::parseSettingsText(base);
  if (!mine.isOk() || !theirs.isOk() || mine->size() != theirs->size()) return settings;
  tuner::Settings diff;
  for (size_t i = 0; i < mine->size(); ++i) {
    if ((*mine)[i] != (*theirs)[i]) diff.push_back((*mine)[i]);
  }
  return diff.empty() ? "(base)" : tuner::settingsText(diff);
}

void printTrial(const tuner::TrialRecord& t, int64_t n, int64_t planned) {
  std::printf(
      "trial %lld/%lld  rung %d  %lld steps  %8s tok/s  %8.2f ms/step  peak %7.2f MiB  "
      "loss %.4f  %-14s %s\n",
      static_cast<long long>(n), static_cast<long long>(planned), t.rung,
      static_cast<long long>(t.steps), human(t.tokensPerSecond).c_str(), t.stepTimeMs,
      double(t.peakBytes) / (1 << 20), t.finalLoss, tuner::verdictName(t.verdict),
      t.settings.c_str());
  if (t.predictedStepTimeMs > 0) {
    std::printf("      predicted %.2f ms/step, peak %.2f MiB\n", t.predictedStepTimeMs,
                double(t.predictedPeakBytes) / (1 << 20));
  }
  if (!t.message.empty()) std::printf("      %s\n", t.message.c_str());
  std::fflush(stdout);
}

void printModelSummary(const tuner::StudyResult& r) {
  const tuner::ModelSummary& m = r.model;
  if (!m.used) return;
  std::printf("\ncost model: calibrated from %s; %zu candidates scored in %.3f s\n",
              m.calibrationTrace.c_str(), m.scored, m.scoreSeconds);
  for (const auto& a : m.assumptions) std::printf("  - %s\n", a.c_str());
  if (m.compared == 0) {
    std::printf("predicted vs measured: no measured trial with a prediction yet\n");
    return;
  }
  std::printf(
      "predicted vs measured over %lld trials: step time error median %.1f%%, max %.1f%%;"
      " peak memory error median %.1f%%, max %.1f%%\n",
      static_cast<long long>(m.compared), 100 * m.stepErrorMedian, 100 * m.stepErrorMax,
      100 * m.peakErrorMedian, 100 * m.peakErrorMax);
}

void printTable(const tuner::StudyResult& r, const TuneArgs& args) {
  std::string base;
  for (const auto& row : r.table) {
    if (row.isBase) base = row.trial.settings;
  }
  std::printf("\nstudy %s: %s, %zu candidates (%zu valid), %lld new runs%s, objective %s\n",
              args.out.c_str(), r.strategy.c_str(), r.candidates, r.validCandidates,
              static_cast<long long>(r.newRuns), r.budgetExhausted ? " (budget reached)" : "",
              args.objective.c_str());
  std::printf("%4s %6s %-14s %5s %9s %9s %9s %9s %8s %8s  %s\n", "rank", "trial", "verdict",
              "steps", "tok/s", "ms/step", "pred ms", "peak MiB", "loss", "vs base",
              "settings (change from base)");
  int rank = 0;
  for (const auto& row : r.table) {
    const auto& t = row.trial;
    const bool ran = t.verdict != tuner::Verdict::kInvalid && t.verdict != tuner::Verdict::kFailed;
    char ratio[16] = "-";
    if (row.ratioToBase > 0) std::snprintf(ratio, sizeof ratio, "%.3fx", row.ratioToBase);
    char predicted[16] = "-";
    if (t.predictedStepTimeMs > 0) {
      std::snprintf(predicted, sizeof predicted, "%.2f", t.predictedStepTimeMs);
    }
    std::printf("%4d %6lld %-14s %5lld %9s %9.2f %9s %9.2f %8.4f %8s  %s\n", ++rank,
                static_cast<long long>(t.id), tuner::verdictName(t.verdict),
                static_cast<long long>(t.steps), ran ? human(t.tokensPerSecond).c_str() : "-",
                ran ? t.stepTimeMs : 0.0, predicted, ran ? double(t.peakBytes) / (1 << 20) : 0.0,
                ran ? t.finalLoss : 0.0, ratio, settingsDiff(t.settings, base).c_str());
    if (!t.message.empty() && t.verdict != tuner::Verdict::kPruned) {
      std::printf("%11s%s\n", "", t.message.c_str());
    }
  }
  printModelSummary(r);
  if (r.best) {
    std::printf(
        "\nbest: trial %lld (%s); export it with\n  moewb tune --export %s --format "
        "toml|megatron|torchtitan -o FILE\n",
        static_cast<long long>(r.best->trial.id),
        r.best->isBase ? "the base config" : settingsDiff(r.best->trial.settings, base).c_str(),
        args.out.c_str());
  } else {
    std::printf("\nno trial passed; nothing to export\n");
  }
}

Result<tuner::StudyOptions> buildOptions(const TuneArgs& args) {
  tuner::StudyOptions o;
  o.studyPath = args.out;
  o.configPath = args.configPath;
  MOEWB_ASSIGN_OR_RETURN(o.base, engine::loadConfigFile(args.configPath));
  if (args.ranks > 0) {
    MOEWB_RETURN_IF_ERROR(
        engine::applyOverride(o.base, "parallel.world_size=" + std::to_string(args.ranks)));
  }
  for (const auto& assignment : args.overrides) {
    MOEWB_RETURN_IF_ERROR(engine::applyOverride(o.base, assignment));
  }
  MOEWB_RETURN_IF_ERROR(engine::validateConfig(o.base).withContext(args.configPath));
  if (!args.knobs.empty()) {
    MOEWB_ASSIGN_OR_RETURN(o.knobs, tuner::parseKnobList(args.knobs));
  }
  o.knobsText = args.knobs;
  MOEWB_ASSIGN_OR_RETURN(o.objective, tuner::parseObjective(args.objective));
  MOEWB_ASSIGN_OR_RETURN(o.budget, tuner::parseBudget(args.budget));
  o.strategy = args.strategy;
  o.calibrationTrace = args.tracePath;
  MOEWB_ASSIGN_OR_RETURN(o.interconnect, tuner::parseInterconnect(args.interconnect));
  o.modelTopK = args.modelTop;
  o.steps = args.steps;
  o.maxSteps = args.maxSteps;
  o.gate = {args.gateSteps, args.gateLossRel, args.gateGradRel};
  if (args.gateSteps < 1) {
    return invalidArgument("--gate-steps " + std::to_string(args.gateSteps) +
                           " is not accepted; accepted: 1 or more");
  }
  return o;
}

int tuneCommand(const TuneArgs& args) {
  const std::filesystem::path parent = std::filesystem::path(args.out).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    return fail(invalidArgument("-o " + args.out + ": the directory " + parent.string() +
                                " does not exist"));
  }
  auto options = buildOptions(args);
  if (!options.isOk()) return fail(options.status());
  if (!args.quiet) options->onTrial = printTrial;
  g_stop.store(false);
  options->stop = &g_stop;
  struct sigaction action {};
  action.sa_handler = onTuneSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction oldInt {
  }, oldTerm{};
  sigaction(SIGINT, &action, &oldInt);
  sigaction(SIGTERM, &action, &oldTerm);
  auto result = tuner::runStudy(*options);
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
  if (!result.isOk()) return fail(result.status());
  printTable(*result, args);
  if (g_stop.load()) {  // like `moewb run`: a clean stop is a success; the study resumes
    std::fprintf(stderr, "moewb tune: interrupted; run the same command again to resume\n");
  }
  return kExitOk;
}

int exportCommand(const TuneArgs& args) {
  if (Status out =
          checkOutputPath(args.out, "-o", args.force, OutputKind::kJson, {args.exportPath});
      !out.isOk()) {
    return fail(out);
  }
  auto format = tuner::parseExportFormat(args.format);
  if (!format.isOk()) return fail(format.status());
  std::optional<int64_t> trial;
  if (args.trial > 0) trial = args.trial;
  auto exported = tuner::exportStudyTrial(args.exportPath, trial, *format);
  if (!exported.isOk()) return fail(exported.status());
  const std::string tmp = args.out + ".moewb-tmp";
  std::error_code ec;
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file << exported->text.text;
    if (!file.flush()) {
      std::filesystem::remove(tmp, ec);
      return fail(internalError("cannot write " + args.out));
    }
  }
  std::filesystem::rename(tmp, args.out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return fail(internalError("cannot write " + args.out));
  }
  std::printf("wrote %s (%s, trial %lld", args.out.c_str(), args.format.c_str(),
              static_cast<long long>(exported->trial.id));
  if (!exported->text.unexpressed.empty()) {
    std::printf("; %zu setting(s) not expressible, listed in its header",
                exported->text.unexpressed.size());
  }
  std::printf(")\n");
  return kExitOk;
}

// `moewb tune --predict`: one prediction of the base config (with --set and --gpus) from a
// calibration trace, with its parts and assumptions; nothing is run or written.
int predictCommand(const TuneArgs& args) {
  if (args.tracePath.empty()) {
    return fail(
        invalidArgument("--predict needs --trace TRACE: a trace of `moewb run` (or a study "
                        "trial) of this model to calibrate the cost model from"));
  }
  auto cal = tuner::calibrate(args.tracePath);
  if (!cal.isOk()) return fail(cal.status());
  engine::RunConfig config = cal->config;
  if (!args.configPath.empty()) {
    auto loaded = engine::loadConfigFile(args.configPath);
    if (!loaded.isOk()) return fail(loaded.status());
    config = *loaded;
  }
  if (args.gpus < 0) {
    return fail(invalidArgument("--gpus " + std::to_string(args.gpus) +
                                " is not accepted; accepted: 1 or more"));
  }
  const int32_t ranks = args.gpus > 0 ? args.gpus : args.ranks;
  if (ranks > 0) {
    Status s = engine::applyOverride(config, "parallel.world_size=" + std::to_string(ranks));
    if (!s.isOk()) return fail(s);
  }
  for (const auto& assignment : args.overrides) {
    if (Status s = engine::applyOverride(config, assignment); !s.isOk()) return fail(s);
  }
  const std::string source = args.configPath.empty() ? args.tracePath : args.configPath;
  if (Status s = engine::validateConfig(config).withContext(source); !s.isOk()) return fail(s);
  auto net = tuner::parseInterconnect(args.interconnect);
  if (!net.isOk()) return fail(net.status());
  tuner::CostModel model(*cal, *net);
  tuner::PredictOptions options;
  options.devices = args.gpus;
  options.withAssumptions = true;
  auto p = model.predict(config, options);
  if (!p.isOk()) return fail(p.status());
  std::printf(
      "layout: %d rank(s)%s, ep %d, fsdp %d, replicate %d, a2a_chunks %d; %lld tokens "
      "per step\n",
      config.parallel.worldSize, args.gpus > 0 ? " on as many GPUs" : "", config.parallel.ep,
      config.parallel.fsdpDegree(), config.parallel.replicateDegree(), config.parallel.a2aChunks,
      static_cast<long long>(config.tokensPerStep()));
  std::printf("calibration: measured step %.2f ms, peak %.2f MiB per rank\n", cal->stepMs,
              double(cal->peakBytes) / (1 << 20));
  std::printf("%s", tuner::describePrediction(*p).c_str());
  std::printf("predicted tokens/s: %.1f\n",
              p->stepMs > 0 ? double(config.tokensPerStep()) * 1e3 / p->stepMs : 0.0);
  return kExitOk;
}

// `moewb tune --apply STUDY --control PATH [--trial ID] [--dry-run]`, its arguments checked.
int applyCommand(const TuneArgs& args) {
  if (!args.configPath.empty() || !args.exportPath.empty() || !args.out.empty() || args.predict) {
    return fail(invalidArgument("--apply takes no --config, --export, -o or --predict; accepted: "
                                "--apply STUDY --control PATH [--trial ID] [--dry-run]"));
  }
  if (args.controlPath.empty()) {
    return fail(invalidArgument("--apply needs --control PATH: the control socket of a run "
                                "started with `moewb run --control PATH`"));
  }
  TuneApplyArgs apply;
  apply.studyPath = args.applyPath;
  apply.controlPath = args.controlPath;
  if (args.trial > 0) apply.trial = args.trial;
  apply.dryRun = args.dryRun;
  return tuneApplyCommand(apply);
}

}  // namespace

void addTuneCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "search settings over real short training runs (a study file), or export a trial");
  cmd->add_option("--config", args->configPath, "base config (TOML)");
  cmd->add_option("-o,--out", args->out,
                  "study file to create or resume; with --export, the "
                  "file to write");
  cmd->add_option("--budget", args->budget, "N trials (30trials) or a duration (90s, 10m, 2h)");
  cmd->add_option("--objective", args->objective, "tokens_per_s (default) or peak_memory");
  cmd->add_option("--knobs", args->knobs, "keys to tune, KEY or KEY=V1|V2, comma-separated");
  cmd->add_option("--strategy", args->strategy,
                  "auto (default), exhaustive, halving or model (cost model, then halving)");
  cmd->add_option("--set", args->overrides, "override a key of the base config (KEY=VALUE)");
  cmd->add_option("--ranks", args->ranks, "in-process ranks (parallel.world_size)");
  cmd->add_option("--steps", args->steps, "steps of a trial (halving: of the first rung)");
  cmd->add_option("--max-steps", args->maxSteps, "halving: most steps of a rung");
  cmd->add_option("--gate-steps", args->gateSteps, "steps the precision gate compares");
  cmd->add_option("--gate-loss-rel", args->gateLossRel,
                  "tolerated relative loss difference "
                  "(default: 1e-5 on the CPU, 1e-3 on the GPU)");
  cmd->add_option("--gate-grad-rel", args->gateGradRel,
                  "tolerated relative grad-norm "
                  "difference (default: 1e-4 on the CPU, 1e-2 on the GPU)");
  cmd->add_flag("--quiet,-q", args->quiet, "no line per trial");
  cmd->add_option("--export", args->exportPath, "export a trial of this study file");
  cmd->add_option("--format", args->format, "export format: toml (default), megatron, torchtitan");
  cmd->add_option("--trial", args->trial,
                  "trial id to export or apply (default: the best passing)");
  cmd->add_flag("--force,-f", args->force, "--export: replace the output file if it exists");
  cmd->add_flag("--predict", args->predict,
                "predict the step time and memory of --config (default: the trace's) from --trace");
  cmd->add_option("--trace", args->tracePath,
                  "calibration trace for --predict, or for --strategy model instead of a base run");
  cmd->add_option("--model-top", args->modelTop,
                  "--strategy model: best predicted candidates that run real trials (default 6)");
  cmd->add_option("--gpus", args->gpus, "--predict: ranks, one per GPU (parallel.world_size)");
  cmd->add_option("--interconnect", args->interconnect,
                  "--predict/model: intra_node_gbps=450,inter_node_gbps=50,gpus_per_node=8,"
                  "latency_us=15 (any of them)");
  cmd->add_option("--apply", args->applyPath,
                  "apply a trial of this study file live to the run at --control (one patch, "
                  "source tuner)");
  cmd->add_option("--control", args->controlPath,
                  "--apply: the run's control socket (moewb run --control PATH)");
  cmd->add_flag("--dry-run", args->dryRun, "--apply: print the plan, send nothing");
  cmd->callback([args, action] {
    *action = [args] {
      if (!args->applyPath.empty()) return applyCommand(*args);
      if (!args->controlPath.empty() || args->dryRun) {
        return fail(invalidArgument("--control and --dry-run go with --apply STUDY"));
      }
      if (args->predict) return predictCommand(*args);
      if (args->out.empty()) {
        return fail(invalidArgument("-o FILE is required (the study file, or the export's file)"));
      }
      if (!args->exportPath.empty()) {
        if (!args->configPath.empty()) {
          return fail(
              invalidArgument("--export and --config are exclusive; accepted: "
                              "--export STUDY --format F -o FILE, or --config FILE -o STUDY"));
        }
        return exportCommand(*args);
      }
      if (args->configPath.empty()) {
        return fail(invalidArgument("--config FILE is required (or --export STUDY to export)"));
      }
      return tuneCommand(*args);
    };
  });
}

}  // namespace moewb::cli
