// `moewb info`: what a trace holds: run and config, steps and loss, top phases by total time,
// device memory (peaks per category, allocations/frees), expert-load imbalance per layer, swap
// (swap_info.h; only when the trace has swap rows), data-quality stats.
#include <algorithm>
#include <map>
#include <set>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "gpu_info.h"
#include "swap_info.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/base/units.h"
#include "moewb/storage/run_liveness.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli {
namespace {

struct InfoArgs {
  std::string tracePath;
  int topPhases = 12;
  bool showConfig = true;
};

// The status of a run still marked "running" says whether its writer is alive (the heartbeat,
// storage/run_liveness.h): "running (last heartbeat 2 s ago)" or "ended without closing (writer
// died; ...)".
void printRun(const storage::RunRow& run, const std::map<std::string, std::string>& meta,
              bool showConfig) {
  const std::string status = storage::describeRunStatus(run, meta, unixNowNs() / kNsPerMs);
  std::printf("run      %s  backend %s  ranks %d  status %s%s%s\n", run.name.c_str(),
              run.backend.c_str(), run.worldSize, status.c_str(),
              run.message.empty() ? "" : " -- ", run.message.c_str());
  for (const auto& [key, label] : {std::pair<const char*, const char*>{"device", "device  "},
                                   {"startup", "start-up"}}) {
    const auto it = meta.find(key);
    if (it != meta.end() && !it->second.empty()) std::printf("%s %s\n", label, it->second.c_str());
  }
  if (!showConfig) return;
  std::printf("config\n");
  std::istringstream lines(run.configToml);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) std::printf("    %s\n", line.c_str());
  }
}

// Steps of a run. A parallel run has one row per (rank, step): the count is of distinct steps,
// loss and step time are the lowest rank's, tokens/s is summed over the ranks of each step.
void printSteps(const std::vector<storage::StepRow>& rows) {
  if (rows.empty()) {
    std::printf("steps    none committed\n");
    return;
  }
  int32_t firstRank = rows.front().rank;
  std::set<int32_t> ranks;
  for (const auto& s : rows) {
    firstRank = std::min(firstRank, s.rank);
    ranks.insert(s.rank);
  }
  std::vector<storage::StepRow> steps;  // the lowest rank's rows, in step order
  std::map<int64_t, double> tokensPerSecondByStep;
  for (const auto& s : rows) {
    if (s.rank == firstRank) steps.push_back(s);
    tokensPerSecondByStep[s.step] += s.tokensPerSecond;
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  std::vector<int64_t> durs;
  for (const auto& s : steps) durs.push_back(s.endNs - s.startNs);
  std::sort(durs.begin(), durs.end());
  // Mean over the steps after the first (which carries one-time set-up), when there are some.
  double tokensPerSecond = 0;
  size_t counted = 0;
  for (const auto& [step, value] : tokensPerSecondByStep) {
    if (step == tokensPerSecondByStep.begin()->first && tokensPerSecondByStep.size() > 1) continue;
    tokensPerSecond += value;
    ++counted;
  }
  tokensPerSecond /= double(std::max<size_t>(counted, 1));
  int64_t peak = 0;
  for (const auto& s : rows) peak = std::max(peak, s.peakBytes);
  std::printf("steps    %zu committed (%lld..%lld)", tokensPerSecondByStep.size(),
              (long long)tokensPerSecondByStep.begin()->first,
              (long long)tokensPerSecondByStep.rbegin()->first);
  if (ranks.size() > 1) {
    std::printf(" on %zu ranks (%zu rank-steps); loss and step time of rank %d, tokens/s of "
                "all ranks", ranks.size(), rows.size(), firstRank);
  }
  std::printf("\n");
  std::printf("loss     %.4f -> %.4f   aux %.4f -> %.4f\n", steps.front().loss, steps.back().loss,
              steps.front().auxLoss, steps.back().auxLoss);
  std::printf("speed    %s tokens/s   step time p50 %s  max %s   peak memory %s%s\n",
              formatCount(tokensPerSecond).c_str(), formatDurationNs(durs[durs.size() / 2]).c_str(),
              formatDurationNs(durs.back()).c_str(), formatBytes(peak).c_str(),
              ranks.size() > 1 ? " (largest rank)" : "");
}

// The memory account of the last step (the memory.* counters the trainer reports per step).
void printMemory(storage::TraceReader& reader) {
  auto bounds = reader.timeBounds();
  if (!bounds.isOk()) return;
  auto counters = reader.counters({bounds->startNs, bounds->endNs + 1});
  if (!counters.isOk()) return;
  std::map<std::string, double> last;
  for (const auto& c : *counters) {
    if (c.name.starts_with("memory.") && c.name != "memory.tensor_bytes") last[c.name] = c.value;
  }
  if (last.empty()) return;
  std::printf("memory  ");
  for (const char* category : {"weights", "grads", "optimizer", "activations"}) {
    auto it = last.find(std::string("memory.") + category + "_bytes");
    if (it != last.end()) std::printf(" %s %s", category, formatBytes(int64_t(it->second)).c_str());
  }
  std::printf("   (last step)\n");
}

// Device memory (CUDA runs): per memory track, the peak bytes in use of each category and the
// number of allocations and frees. Prints nothing for traces without memory events (CPU runs).
void printDeviceMemory(storage::TraceReader& reader) {
  auto totals = reader.memoryTotals();
  if (!totals.isOk() || totals->empty()) return;
  std::map<int64_t, int32_t> rankOf;
  if (auto tracks = reader.tracks(); tracks.isOk()) {
    for (const auto& t : *tracks) rankOf[t.id.value] = t.rank;
  }
  std::map<int64_t, std::vector<const storage::MemoryCategoryTotals*>> byTrack;
  for (const auto& t : *totals) byTrack[t.track.value].push_back(&t);
  for (const auto& [track, categories] : byTrack) {
    std::string line;
    int64_t allocations = 0, frees = 0;
    for (const auto* c : categories) {
      line += " " + c->category + " " + formatBytes(c->peakBytes);
      allocations += c->allocations;
      frees += c->frees;
    }
    const std::string who = byTrack.size() > 1 ? " rank " + std::to_string(rankOf[track]) : "";
    std::printf("device memory%s  peak%s   %lld allocations, %lld frees\n", who.c_str(),
                line.c_str(), (long long)allocations, (long long)frees);
  }
}

// GPU capture runs: the capture mode, and each flight-recorder trigger that fired (meta keys
// written by the capture). Prints nothing for traces without a GPU capture.
void printGpuCaptureMode(std::map<std::string, std::string>& meta) {
  if (meta.contains("gpu_capture_mode")) {
    std::printf("gpu capture  %s\n", meta["gpu_capture_mode"].c_str());
  }
  if (!meta.contains("gpu_capture_triggers")) return;
  std::istringstream lines(meta["gpu_capture_triggers"]);
  for (std::string line; std::getline(lines, line);) {
    std::printf("  trigger fired  %s\n", line.c_str());
  }
}

void printPhases(const std::vector<storage::PhaseTotal>& totals, int top) {
  int64_t stepNs = 0;
  for (const auto& t : totals) {
    if (t.name == "step") stepNs = t.totalNs;
  }
  std::printf("\ntop phases by total time (share of all step time; passes contain phases)\n");
  std::printf("  %-18s %8s %12s %12s %7s\n", "name", "count", "total", "mean", "share");
  int shown = 0;
  for (const auto& t : totals) {
    if (t.name == "step" || storage::isGpuCaptureCategory(t.category)) continue;
    if (shown++ >= top) break;
    std::printf("  %-18s %8lld %12s %12s %6.1f%%\n", t.name.c_str(), (long long)t.count,
                formatDurationNs(t.totalNs).c_str(), formatDurationNs(int64_t(t.meanNs())).c_str(),
                stepNs ? 100.0 * double(t.totalNs) / double(stepNs) : 0.0);
  }
}

void printImbalance(const std::vector<storage::LayerImbalance>& layers) {
  std::printf("\nexpert load imbalance per layer (max/mean tokens per expert; 1.00 = balanced)\n");
  std::printf("  %-6s %10s %10s %16s\n", "layer", "mean", "last", "hottest (share)");
  for (const auto& l : layers) {
    std::printf("  %-6d %10.2f %10.2f %8d (%4.1f%%)\n", l.layer, l.meanMaxOverMean,
                l.lastMaxOverMean, l.hottestExpert, 100.0 * l.hottestShare);
  }
}

int infoCommand(const InfoArgs& args) {
  auto opened = storage::TraceReader::open(args.tracePath);
  if (!opened.isOk()) {
    std::fprintf(stderr, "moewb info: %s\n", opened.status().message().c_str());
    return kExitBadInput;
  }
  storage::TraceReader& reader = **opened;
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "moewb info: %s: %s\n", args.tracePath.c_str(), s.message().c_str());
    return kExitFailure;
  };
  auto meta = reader.meta();
  if (!meta.isOk()) return fail(meta.status());
  std::printf("trace    %s (schema %s, written by %s on %s)\n", args.tracePath.c_str(),
              (*meta)["schema_version"].c_str(), (*meta)["tool_version"].c_str(),
              (*meta)["host"].c_str());
  auto runs = reader.runs();
  if (!runs.isOk()) return fail(runs.status());
  for (const auto& run : *runs) {
    printRun(run, *meta, args.showConfig);
    auto steps = reader.steps(run.id);
    if (!steps.isOk()) return fail(steps.status());
    printSteps(*steps);
  }
  printGpuCaptureMode(*meta);
  printMemory(reader);
  printDeviceMemory(reader);
  auto totals = reader.phaseTotals();
  if (!totals.isOk()) return fail(totals.status());
  printPhases(*totals, args.topPhases);
  auto imbalance = reader.layerImbalance();
  if (!imbalance.isOk()) return fail(imbalance.status());
  printImbalance(*imbalance);
  printGpuSummary(reader, args.topPhases);
  printSwapSummary(reader);
  auto stats = reader.stats();
  if (stats.isOk() && !stats->empty()) {
    std::printf("\ndata quality\n");
    for (const auto& s : *stats) {
      std::printf("  %-28s %-9s %lld  %s\n", s.name.c_str(), s.severity.c_str(), (long long)s.value,
                  s.description.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

void addInfoCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info", "summarise a trace: run, config, steps, phases, load");
  cmd->add_option("trace", args->tracePath, "trace file (.sqlite)")->required();
  cmd->add_option("--top", args->topPhases, "phases to list")->check(CLI::Range(1, 1000));
  cmd->add_flag("!--no-config", args->showConfig, "do not print the config");
  cmd->callback([args, action] { *action = [args] { return infoCommand(*args); }; });
}

}  // namespace moewb::cli
