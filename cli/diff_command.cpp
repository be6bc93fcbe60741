// `moewb diff`: A/B comparison of two traces, or of two step ranges of one trace (before and after
// a live config change): per phase and per GPU kernel the time per step of A and B with its
// step-to-step spread, the delta, the ratio, the noise and a flag when the delta is significant
// (storage/compare_queries.h computes all of it), then step time, tokens/s, loss and expert
// imbalance. --json prints the same as one JSON object.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/base/units.h"
#include "moewb/storage/compare_queries.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli {
namespace {

struct DiffArgs {
  std::string traceA;
  std::string traceB;  // empty: two ranges of traceA
  std::string aSteps;
  std::string bSteps;
  bool splitAtPatch = false;
  int64_t warmupSteps = 1;
  int top = 20;
  bool json = false;
};

// What to sample on each side, and the line that says why (the patch split).
struct DiffPlan {
  storage::SampleOptions a;
  storage::SampleOptions b;
  std::string splitNote;
};

// `text` padded with spaces to `width` characters (UTF-8 aware: "±" is one character), or cut.
std::string pad(const std::string& text, size_t width) {
  size_t chars = 0;
  for (unsigned char c : text) chars += (c & 0xC0) != 0x80;
  return chars >= width ? text : text + std::string(width - chars, ' ');
}

std::string kindName(storage::CompareKind kind) {
  return kind == storage::CompareKind::kKernel ? "gpu" : "phase";
}

std::string signedDuration(double ns) {
  return (ns > 0 ? "+" : "") + formatDurationNs(int64_t(std::llround(ns)));
}

std::string meanAndSpread(const storage::MetricStats& s) {
  if (s.n == 0) return "-";
  return formatDurationNs(int64_t(std::llround(s.mean))) + " ± " +
         formatDurationNs(int64_t(std::llround(s.stddev)));
}

std::string ratioText(const storage::MetricDelta& d) {
  char buf[32];
  if (d.a.mean == 0) return d.b.mean == 0 ? "1.00x" : "new";
  if (d.b.n > 0 && d.b.mean == 0) return "gone";
  std::snprintf(buf, sizeof buf, "%.2fx", d.ratio);
  return buf;
}

// Values other than durations: `digits` decimals, optional k/M for rates.
std::string number(double v, int digits, bool count) {
  if (count) return formatCount(v);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void printMetric(const char* label, const storage::MetricDelta& d, int digits, bool count,
                 bool duration) {
  auto value = [&](double v) {
    return duration ? formatDurationNs(int64_t(std::llround(v))) : number(v, digits, count);
  };
  auto side = [&](const storage::MetricStats& s) {
    return s.n == 0 ? std::string("-") : value(s.mean) + " ± " + value(s.stddev);
  };
  const std::string delta =
      duration ? signedDuration(d.delta) : (d.delta > 0 ? "+" : "") + value(d.delta);
  std::printf("  %-22s %s %s %12s %7s %s %s\n", label, pad(side(d.a), 22).c_str(),
              pad(side(d.b), 22).c_str(), delta.c_str(), ratioText(d).c_str(),
              pad("±" + value(d.noise), 12).c_str(), d.significant ? "*" : "");
}

void printSample(const char* label, const storage::TraceSample& s) {
  std::printf("%s  %s  run %s  steps %lld..%lld (%lld steps, range %s", label, s.path.c_str(),
              s.runName.c_str(), (long long)s.firstStep, (long long)s.lastStep,
              (long long)s.phaseSteps, storage::formatStepRange(s.range).c_str());
  if (s.worldSize > 1) std::printf(", rank %d of %d", s.rank, s.worldSize);
  if (s.gpuSteps > 0) std::printf(", %lld with GPU work", (long long)s.gpuSteps);
  std::printf(")\n");
}

void printTable(const storage::SampleComparison& cmp, int top) {
  std::printf(
      "\ntime per step: mean ± stddev over steps; delta = B - A; noise = 2 standard "
      "errors of the delta;\n* = significant (|delta| > noise and >= %.0f%% of the "
      "larger mean)\n",
      100.0 * storage::kMinRelativeDelta);
  std::printf("  %-5s %-32s %-22s %-22s %12s %7s %-12s\n", "kind", "name", "A", "B", "delta",
              "ratio", "noise");
  int shown = 0;
  for (const storage::NameDelta& row : cmp.names) {
    if (shown++ >= top) break;
    std::string name = row.name.size() > 32 ? row.name.substr(0, 29) + "..." : row.name;
    const storage::MetricDelta& d = row.perStepNs;
    std::printf("  %-5s %-32s %s %s %12s %7s %s %s\n", kindName(row.kind).c_str(), name.c_str(),
                pad(meanAndSpread(d.a), 22).c_str(), pad(meanAndSpread(d.b), 22).c_str(),
                signedDuration(d.delta).c_str(), ratioText(d).c_str(),
                pad("±" + formatDurationNs(int64_t(std::llround(d.noise))), 12).c_str(),
                d.significant ? "*" : "");
  }
  if (int(cmp.names.size()) > top) {
    std::printf("  (%zu more; --top N shows more)\n", cmp.names.size() - size_t(top));
  }
}

void printSummary(const storage::SampleComparison& cmp) {
  std::printf("\n  %-22s %-22s %-22s %12s %7s %-12s\n", "run", "A", "B", "delta", "ratio", "noise");
  printMetric("step time", cmp.stepNs, 0, false, true);
  printMetric("tokens/s", cmp.tokensPerSecond, 0, true, false);
  printMetric("loss (all steps)", cmp.loss, 4, false, false);
  printMetric("loss at end (last 10%)", cmp.lossEnd, 4, false, false);
  if (cmp.layers.empty()) return;
  std::printf("\n  expert imbalance: max/mean tokens per expert (1.00 = balanced)\n");
  printMetric("all layers", cmp.imbalance, 3, false, false);
  for (const storage::LayerDelta& l : cmp.layers) {
    const std::string label = "layer " + std::to_string(l.layer);
    printMetric(label.c_str(), l.maxOverMean, 3, false, false);
  }
}

nlohmann::json statsJson(const storage::MetricStats& s) {
  return {{"n", s.n},           {"mean", s.mean}, {"p50", s.p50},
          {"stddev", s.stddev}, {"min", s.min},   {"max", s.max}};
}

nlohmann::json deltaJson(const storage::MetricDelta& d) {
  return {{"a", statsJson(d.a)}, {"b", statsJson(d.b)}, {"delta", d.delta},
          {"ratio", d.ratio},    {"noise", d.noise},    {"significant", d.significant}};
}

nlohmann::json sampleJson(const storage::TraceSample& s) {
  return {{"path", s.path},
          {"run", s.runName},
          {"first_step", s.firstStep},
          {"last_step", s.lastStep},
          {"steps", s.phaseSteps},
          {"gpu_steps", s.gpuSteps},
          {"rank", s.rank},
          {"range", storage::formatStepRange(s.range)}};
}

void printJson(const storage::TraceSample& a, const storage::TraceSample& b,
               const storage::SampleComparison& cmp, const DiffPlan& plan, int top) {
  nlohmann::json rows = nlohmann::json::array();
  for (const storage::NameDelta& row : cmp.names) {
    if (int(rows.size()) >= top) break;
    nlohmann::json r = deltaJson(row.perStepNs);
    r["kind"] = kindName(row.kind);
    r["name"] = row.name;
    r["in_a"] = row.inA;
    r["in_b"] = row.inB;
    rows.push_back(std::move(r));
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const storage::LayerDelta& l : cmp.layers) {
    nlohmann::json r = deltaJson(l.maxOverMean);
    r["layer"] = l.layer;
    layers.push_back(std::move(r));
  }
  nlohmann::json out = {
      {"a", sampleJson(a)},
      {"b", sampleJson(b)},
      {"unit", "ns per step"},
      {"significance", "abs(delta) > noise and abs(delta) >= 0.01 * max(abs(a.mean), abs(b.mean))"},
      {"names", rows},
      {"names_total", cmp.names.size()},
      {"step_ns", deltaJson(cmp.stepNs)},
      {"tokens_per_second", deltaJson(cmp.tokensPerSecond)},
      {"loss", deltaJson(cmp.loss)},
      {"loss_end", deltaJson(cmp.lossEnd)},
      {"imbalance", deltaJson(cmp.imbalance)},
      {"imbalance_layers", layers}};
  if (!plan.splitNote.empty()) out["split"] = plan.splitNote;
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// Checks the option combination and turns it into the two samples. Errors are bad input.
Result<DiffPlan> planDiff(const DiffArgs& args, storage::TraceReader& readerA) {
  DiffPlan plan;
  plan.a.warmupSteps = plan.b.warmupSteps = args.warmupSteps;
  const bool oneTrace = args.traceB.empty();
  if (args.splitAtPatch) {
    if (!oneTrace) {
      return invalidArgument("--split-at-patch compares two parts of ONE trace; give one file");
    }
    if (!args.aSteps.empty() || !args.bSteps.empty()) {
      return invalidArgument(
          "--split-at-patch chooses the steps itself; leave out --a-steps "
          "and --b-steps (or give both ranges without it)");
    }
    MOEWB_ASSIGN_OR_RETURN(const storage::PatchSplit split, storage::findPatchSplit(readerA));
    plan.a.range = {0, split.step};
    plan.b.range = {split.step, split.nextStep.value_or(storage::kOpenEnd)};
    plan.splitNote = "split at step " + std::to_string(split.step) + ": " + split.description;
    return plan;
  }
  if (oneTrace && (args.aSteps.empty() || args.bSteps.empty())) {
    return invalidArgument(
        "one trace needs --split-at-patch or both --a-steps and --b-steps; "
        "or give two trace files");
  }
  if (!args.aSteps.empty()) {
    MOEWB_ASSIGN_OR_RETURN(plan.a.range, storage::parseCompareRange(args.aSteps, "--a-steps"));
  }
  if (!args.bSteps.empty()) {
    MOEWB_ASSIGN_OR_RETURN(plan.b.range, storage::parseCompareRange(args.bSteps, "--b-steps"));
  }
  return plan;
}

int diffCommand(const DiffArgs& args) {
  const auto badInput = [](const std::string& message) {
    std::fprintf(stderr, "moewb diff: %s\n", message.c_str());
    return kExitBadInput;
  };
  auto readerA = storage::TraceReader::open(args.traceA);
  if (!readerA.isOk()) return badInput(readerA.status().message());
  std::unique_ptr<storage::TraceReader> ownedB;
  storage::TraceReader* readerB = readerA->get();
  if (!args.traceB.empty()) {
    auto opened = storage::TraceReader::open(args.traceB);
    if (!opened.isOk()) return badInput(opened.status().message());
    ownedB = std::move(opened).value();
    readerB = ownedB.get();
  }
  auto plan = planDiff(args, **readerA);
  if (!plan.isOk()) return badInput(plan.status().message());
  // A trace that fails while it is read (a damaged table, a hostile value) is bad input too.
  auto a = storage::sampleTrace(**readerA, plan->a);
  if (!a.isOk()) return badInput("A: " + a.status().message());
  auto b = storage::sampleTrace(*readerB, plan->b);
  if (!b.isOk()) return badInput("B: " + b.status().message());
  const storage::SampleComparison cmp = storage::compareSamples(*a, *b);
  if (args.json) {
    printJson(*a, *b, cmp, *plan, args.top);
    return kExitOk;
  }
  printSample("A", *a);
  printSample("B", *b);
  if (!plan->splitNote.empty()) std::printf("%s\n", plan->splitNote.c_str());
  printTable(cmp, args.top);
  printSummary(cmp);
  return kExitOk;
}

}  // namespace

void addDiffCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "compare two traces (or two step ranges of one): per-phase and per-kernel time "
      "per step with its noise, step time, tokens/s, loss, expert imbalance");
  // Two positionals (not one taking 1-2 values): CLI11 2.1 prints the latter as "traces(1x)".
  cmd->add_option("A", args->traceA, "trace A (.sqlite)")->required();
  cmd->add_option("B", args->traceB, "trace B (.sqlite); without it, two step ranges of A");
  cmd->add_option("--a-steps", args->aSteps, "steps of A: A:B (A..B-1), A:, :B or one step");
  cmd->add_option("--b-steps", args->bSteps, "steps of B, as --a-steps");
  cmd->add_flag("--split-at-patch", args->splitAtPatch,
                "one trace: A = the steps before its first live config change, B = from it up "
                "to the next change");
  cmd->add_option("--warmup", args->warmupSteps,
                  "leading committed steps of each trace left out (default 1)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--top", args->top, "rows of the phase/kernel table (default 20)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--json", args->json, "print one JSON object instead of the tables");
  cmd->callback([args, action] { *action = [args] { return diffCommand(*args); }; });
}

}  // namespace moewb::cli
